//! How the table keeps one pending timer in the wheel: a 72-byte record, its packing of
//! key and payload, its next deadline when it repeats, and its view for the log.

use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::budget::memory::{expiration_held_bytes, held_bytes, logged_firing_bytes};
use crate::clock::Now;
use crate::domain::{Calendar, Expiration, TimerId, TraceContext};
use crate::local::store::frame::TimerFields;
use crate::local::store::records as durable;
use crate::local::table::namespaces::Namespaces;

use super::stored_schedules::StoredSchedules;
use super::traces::Traces;

/// What the wheel holds for each pending timer. Every pending timer has one, so it is kept
/// to 72 bytes: with the wheel's own fields an entry is 96 bytes, and a timer whose key and
/// payload fit in 16 bytes needs no other allocation.
#[derive(Debug)]
pub(super) struct TimerRecord {
    pub(super) id: u64,
    pub(super) deadline_unix: u64,
    pub(super) repeat: OptionalNanos,
    pub(super) ttl: OptionalNanos,
    pub(super) fired_count: u64,
    /// The key's `key_len` bytes followed by the payload, inline up to 16 bytes.
    pub(super) key_and_payload: SmallVec<[u8; 16]>,
    pub(super) namespace: u32,
    /// At most `Limits::max_key_len` (256), checked before a timer gets here.
    pub(super) key_len: u16,
    /// Recovered with its deadline already past: it fires at once, marked late.
    pub(super) late: bool,
    /// A cron timer: its schedule is in the table's `calendars`, by id.
    pub(super) calendar: bool,
}

impl TimerRecord {
    /// Packs a key and payload into one buffer (see `key_and_payload`).
    pub(super) fn pack(key: Option<&str>, payload: &[u8]) -> (SmallVec<[u8; 16]>, u16) {
        let key = key.unwrap_or_default();
        let key_len = u16::try_from(key.len()).expect("keys are validated to at most 256 bytes");
        let mut packed = SmallVec::with_capacity(key.len() + payload.len());
        packed.extend_from_slice(key.as_bytes());
        packed.extend_from_slice(payload);
        (packed, key_len)
    }

    pub(super) fn key(&self) -> Option<&str> {
        let key = &self.key_and_payload[..usize::from(self.key_len)];
        // Only ever packed from a `str`, so the check cannot fail.
        std::str::from_utf8(key).ok().filter(|key| !key.is_empty())
    }

    pub(super) fn payload(&self) -> &[u8] {
        &self.key_and_payload[usize::from(self.key_len)..]
    }

    /// Its share of the memory budget (see [`crate::budget::memory::held_bytes`]).
    pub(super) fn held_bytes(&self) -> u64 {
        held_bytes(
            usize::from(self.key_len),
            self.payload().len(),
            self.calendar,
        )
    }

    /// Its firing's share (see [`crate::budget::memory::expiration_held_bytes`]), with the
    /// store's copy of it when there is a log.
    pub(super) fn expiration_held_bytes(&self, logged: bool) -> u64 {
        let (key, payload) = (usize::from(self.key_len), self.payload().len());
        let store_copy = if logged {
            logged_firing_bytes(key, payload)
        } else {
            0
        };
        expiration_held_bytes(key, payload, self.calendar) + store_copy
    }
}

/// The next deadline of a repeating timer that just fired, as (wall clock, monotonic).
///
/// Counted on the wall clock, in which deadlines are stated: one interval after the previous
/// deadline; or, when firings were missed (a restart, a `deadline` already past, a stall),
/// the first point of the same grid after now, so that missed firings collapse into the one
/// that just happened instead of firing in a burst. The monotonic deadline is then the same
/// distance from now, so the timer fires when its stated deadline says.
pub(super) fn next_repeat(
    record: &TimerRecord,
    previous: u64,
    interval: Duration,
    now: Now,
) -> (u64, u64) {
    let interval = duration_nanos(interval).max(1);
    let next_unix = record.deadline_unix.saturating_add(interval);
    let next_monotonic = previous.saturating_add(interval);
    if next_unix > now.unix && next_monotonic > now.monotonic {
        return (next_unix, next_monotonic);
    }
    let missed = now.unix.saturating_sub(record.deadline_unix) / interval + 1;
    let next_unix = record
        .deadline_unix
        .saturating_add(missed.saturating_mul(interval));
    (next_unix, now.monotonic_at(next_unix))
}

/// The log's view of a pending timer, borrowed from its record.
pub(super) fn timer_fields<'a>(
    namespaces: &'a Namespaces,
    calendars: &'a Calendars,
    traces: &'a Traces,
    record: &'a TimerRecord,
) -> TimerFields<'a> {
    let calendar = record.calendar.then(|| calendars.get(record.id)).flatten();
    let trace = traces.get(record.id);
    TimerFields {
        traceparent: trace.map_or("", |trace| trace.traceparent()),
        tracestate: trace.map_or("", |trace| trace.tracestate()),
        baggage: trace.map_or("", |trace| trace.baggage()),
        cron: calendar.map_or("", |calendar| calendar.expression()),
        time_zone: calendar.map_or("", |calendar| calendar.time_zone()),
        id: record.id,
        namespace: &namespaces[record.namespace].name,
        key: record.key().unwrap_or_default(),
        deadline_unix_nanos: record.deadline_unix,
        payload: record.payload(),
        repeat_nanos: record.repeat.0,
        ttl_nanos: record.ttl.0,
        fired_count: record.fired_count,
    }
}

/// An optional duration in 8 bytes (`Option<Duration>` takes 16): 0 means none, which no
/// repeat interval or ttl can be (both are validated to be positive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct OptionalNanos(pub(super) u64);

impl OptionalNanos {
    pub(super) fn get(self) -> Option<Duration> {
        (self.0 > 0).then(|| Duration::from_nanos(self.0))
    }
}

impl From<Option<Duration>> for OptionalNanos {
    fn from(duration: Option<Duration>) -> Self {
        Self(duration.map_or(0, duration_nanos))
    }
}

pub(super) fn duration_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// An expiration fired before a restart and never settled, as the store kept it, with its
/// schedule from those recovery has read back.
pub(super) fn recovered_expiration(
    fired: durable::Fired,
    schedules: &mut StoredSchedules,
) -> Option<Expiration> {
    let timer = fired.timer?;
    Some(Expiration {
        id: TimerId(timer.id),
        namespace: Arc::from(timer.namespace.as_str()),
        key: (!timer.key.is_empty()).then_some(timer.key),
        payload: timer.payload,
        deadline_unix: timer.deadline_unix_nanos,
        fired_unix: fired.fired_unix_nanos,
        repeat: OptionalNanos(timer.repeat_nanos).get(),
        ttl: OptionalNanos(timer.ttl_nanos).get(),
        fired_count: timer.fired_count,
        calendar: schedules.stored(&timer.cron, &timer.time_zone),
        trace: TraceContext::stored(&timer.traceparent, &timer.tracestate, &timer.baggage),
        late: false,
        memory: Default::default(),
        over_memory_budget: false,
    })
}

/// The schedules of the pending cron timers, by id: most timers have none, so a record
/// keeps a flag (`calendar`) and stays 72 bytes.
pub(super) type Calendars = super::by_id::ById<Calendar>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_72_bytes_and_keeps_key_and_payload_apart() {
        assert_eq!(std::mem::size_of::<TimerRecord>(), 72);
        for (key, payload) in [
            (None, &b""[..]),
            (None, &b"sixteen bytes!!!"[..]),
            (Some("order-42"), &b"close it"[..]),
            (Some("a-key-that-spills-to-the-heap"), &[7u8; 300][..]),
        ] {
            let (key_and_payload, key_len) = TimerRecord::pack(key, payload);
            let record = TimerRecord {
                id: 1,
                deadline_unix: 0,
                repeat: None.into(),
                ttl: None.into(),
                fired_count: 0,
                key_and_payload,
                namespace: 0,
                key_len,
                late: false,
                calendar: false,
            };
            assert_eq!(record.key(), key);
            assert_eq!(record.payload(), payload);
            // Up to 16 bytes together need no allocation of their own.
            let inline = key.map_or(0, str::len) + payload.len() <= 16;
            assert_eq!(!record.key_and_payload.spilled(), inline);
        }
    }
}
