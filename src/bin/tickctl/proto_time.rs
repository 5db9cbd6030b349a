//! Conversions between std's `Duration`/`SystemTime` and protobuf's well-known
//! `Duration`/`Timestamp`, both ways, so no command does the seconds/nanos arithmetic itself.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) fn to_proto_duration(duration: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: duration.as_secs() as i64,
        nanos: duration.subsec_nanos() as i32,
    }
}

pub(crate) fn to_proto_timestamp(time: SystemTime) -> prost_types::Timestamp {
    match time.duration_since(UNIX_EPOCH) {
        Ok(since) => prost_types::Timestamp {
            seconds: since.as_secs() as i64,
            nanos: since.subsec_nanos() as i32,
        },
        Err(before) => {
            // Protobuf keeps nanos non-negative even before 1970: borrow one second.
            let before = before.duration();
            let mut seconds = -(before.as_secs() as i64);
            let mut nanos = before.subsec_nanos() as i32;
            if nanos > 0 {
                seconds -= 1;
                nanos = 1_000_000_000 - nanos;
            }
            prost_types::Timestamp { seconds, nanos }
        }
    }
}

/// None when absent, negative, or out of range: the caller shows "-" (or JSON null).
pub(crate) fn from_proto_duration(duration: Option<&prost_types::Duration>) -> Option<Duration> {
    let duration = duration?;
    Some(Duration::new(
        u64::try_from(duration.seconds).ok()?,
        u32::try_from(duration.nanos).ok()?,
    ))
}

/// None when absent, before 1970, or out of range: the caller shows "-" (or JSON null).
pub(crate) fn from_proto_timestamp(
    timestamp: Option<&prost_types::Timestamp>,
) -> Option<SystemTime> {
    let timestamp = timestamp?;
    let nanos = u32::try_from(timestamp.nanos).ok()?;
    let seconds = u64::try_from(timestamp.seconds).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(seconds, nanos))
}
