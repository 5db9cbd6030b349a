//! How delivery reads an expiration's row, and names one attempt to deliver it: the
//! columns every claim, listing and direct hand-over selects, and the delivery id built
//! from a row's `seq` and attempt, which an ack names it by.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio_postgres::Row;

use crate::cluster::timers::stored_calendar;
use crate::cluster::trace_column::stored_trace;
use crate::domain::{Expiration, TimerId};

/// The columns an [`Expiration`] is read from, in [`expiration_of`]'s order.
pub(super) const EXPIRATION_COLUMNS: &str =
    "seq, attempts, namespace, timer_id, key, payload, deadline, fired_at, \
     repeat_nanos, ttl_nanos, fired_count, late, cron, time_zone, trace_context";

/// Delivery ids name one attempt of one expiration, so an ack of an attempt whose deadline
/// passed (and was delivered again) is told apart from an ack of the current one.
pub(super) fn delivery_id(seq: i64, attempt: i32) -> u64 {
    ((seq as u64) << 16) | u64::from(attempt as u16)
}

pub(super) fn split_delivery_id(delivery_id: u64) -> (i64, i32) {
    ((delivery_id >> 16) as i64, (delivery_id & 0xffff) as i32)
}

/// Reads [`EXPIRATION_COLUMNS`].
pub(super) fn expiration_of(row: &Row) -> Expiration {
    expiration_at(row, 0)
}

/// Reads [`EXPIRATION_COLUMNS`] from column `first` on (where `seq` is).
pub(super) fn expiration_at(row: &Row, first: usize) -> Expiration {
    let nanos = |column: usize| {
        row.get::<_, Option<i64>>(first + column)
            .map(|nanos| Duration::from_nanos(nanos as u64))
    };
    Expiration {
        memory: Default::default(),
        over_memory_budget: false,
        namespace: Arc::from(row.get::<_, &str>(first + 2)),
        id: TimerId(row.get::<_, i64>(first + 3) as u64),
        key: row.get(first + 4),
        payload: Bytes::copy_from_slice(row.get::<_, &[u8]>(first + 5)),
        deadline_unix: row.get::<_, i64>(first + 6) as u64,
        fired_unix: row.get::<_, i64>(first + 7) as u64,
        repeat: nanos(8),
        ttl: nanos(9),
        fired_count: row.get::<_, i64>(first + 10) as u64,
        calendar: stored_calendar(row, first + 12),
        trace: stored_trace(row.get(first + 14)),
        late: row.get(first + 11),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_id_carries_its_expiration_and_attempt() {
        for (seq, attempt) in [(1, 1), (123_456_789, 5), ((1 << 47) - 1, 65_535)] {
            assert_eq!(split_delivery_id(delivery_id(seq, attempt)), (seq, attempt));
        }
        assert_ne!(delivery_id(7, 1), delivery_id(7, 2));
    }
}
