//! How a timer is written to and read from a row of `tickd_timers`: the columns a
//! [`TimerView`] is read from, durations stored as nanoseconds, a cron timer's stored
//! schedule, and the deadline a [`Due`] stands for.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio_postgres::Row;

use crate::domain::{Calendar, Due, NewTimer, TimerId, TimerView};

/// The columns a [`TimerView`] is read from, in [`view_of`]'s order.
pub(super) const VIEW_COLUMNS: &str =
    "id, namespace, key, deadline, payload, repeat_nanos, ttl_nanos, fired_count, cron, time_zone";

pub(super) fn deadline_of(due: Due, now: u64) -> u64 {
    match due {
        Due::After(delay) => now.saturating_add(delay.as_nanos() as u64),
        Due::AtUnix(unix) => unix,
    }
}

pub(super) fn nanos(duration: Option<Duration>) -> Option<i64> {
    duration.map(|duration| duration.as_nanos().min(i64::MAX as u128) as i64)
}

fn optional_duration(nanos: Option<i64>) -> Option<Duration> {
    nanos.map(|nanos| Duration::from_nanos(nanos as u64))
}

pub(super) fn new_view(timer: &NewTimer, id: u64, deadline_unix: u64, now: u64) -> TimerView {
    TimerView {
        id: TimerId(id),
        namespace: Arc::from(timer.namespace.as_str()),
        key: timer.key.clone(),
        deadline_unix,
        payload: timer.payload.clone(),
        repeat: timer.repeat,
        ttl: timer.ttl,
        remaining: Duration::from_nanos(deadline_unix.saturating_sub(now)),
        fired_count: 0,
        calendar: timer.calendar.clone(),
    }
}

/// Reads [`VIEW_COLUMNS`].
pub(super) fn view_of(row: &Row, now: u64) -> TimerView {
    let deadline_unix = row.get::<_, i64>(3) as u64;
    TimerView {
        id: TimerId(row.get::<_, i64>(0) as u64),
        namespace: Arc::from(row.get::<_, &str>(1)),
        key: row.get(2),
        deadline_unix,
        payload: Bytes::copy_from_slice(row.get::<_, &[u8]>(4)),
        repeat: optional_duration(row.get(5)),
        ttl: optional_duration(row.get(6)),
        remaining: Duration::from_nanos(deadline_unix.saturating_sub(now)),
        fired_count: row.get::<_, i64>(7) as u64,
        calendar: stored_calendar(row, 8),
    }
}

/// The schedule stored in a row's columns `cron` (at `cron_column`) and `time_zone` (the
/// next one); `None` for a timer without one.
pub(crate) fn stored_calendar(row: &Row, cron_column: usize) -> Option<Calendar> {
    let cron: Option<&str> = row.get(cron_column);
    let time_zone: Option<&str> = row.get(cron_column + 1);
    Calendar::stored(cron?, time_zone.unwrap_or_default())
}
