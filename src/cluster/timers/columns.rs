//! The columns a registration writes to `tickd_timers`, as one SQL array each: shared by
//! the batched inserts (`inserts`) and the registrations that run a statement of their
//! own (`register`), so that both write a timer the same way.

use tokio_postgres::types::ToSql;

use super::rows::nanos;
use crate::cluster::shared::Shared;
use crate::cluster::trace_column::trace_column;
use crate::domain::NewTimer;

/// The columns a registration writes, in the order of [`TimerColumns::parameters`].
pub(super) const INSERTED_COLUMNS: &str =
    "id, namespace, key, partition, deadline, payload, repeat_nanos, ttl_nanos, cron, time_zone, \
     trace_context";

/// The rows of [`INSERTED_COLUMNS`] built from `$1` to `$11`, one array each.
pub(super) const INSERTED_ROWS: &str = "SELECT * FROM unnest($1::INT8[], $2::TEXT[], $3::TEXT[], \
     $4::INT4[], $5::INT8[], $6::BYTEA[], $7::INT8[], $8::INT8[], $9::TEXT[], $10::TEXT[], \
     $11::BYTEA[])";

/// The announcement limit follows the eleven columns.
pub(super) const ANNOUNCE_LIMIT: usize = 12;

/// A batch's registrations as SQL arrays, one per column of [`INSERTED_COLUMNS`].
pub(super) struct TimerColumns<'a> {
    ids: Vec<i64>,
    namespaces: Vec<&'a str>,
    keys: Vec<Option<&'a str>>,
    partitions: Vec<i32>,
    deadlines: Vec<i64>,
    payloads: Vec<&'a [u8]>,
    repeats: Vec<Option<i64>>,
    ttls: Vec<Option<i64>>,
    crons: Vec<Option<&'a str>>,
    time_zones: Vec<Option<&'a str>>,
    traces: Vec<Option<Vec<u8>>>,
}

impl<'a> TimerColumns<'a> {
    pub(super) fn new(
        shared: &Shared,
        timers: &[&'a NewTimer],
        ids: &[u64],
        deadlines: &[u64],
    ) -> Self {
        let calendars = || timers.iter().map(|t| t.calendar.as_ref());
        Self {
            ids: ids.iter().map(|&id| id as i64).collect(),
            namespaces: timers.iter().map(|t| t.namespace.as_str()).collect(),
            keys: timers.iter().map(|t| t.key.as_deref()).collect(),
            partitions: ids
                .iter()
                .map(|&id| shared.partition_of(id) as i32)
                .collect(),
            deadlines: deadlines.iter().map(|&deadline| deadline as i64).collect(),
            payloads: timers.iter().map(|t| &t.payload[..]).collect(),
            repeats: timers.iter().map(|t| nanos(t.repeat)).collect(),
            ttls: timers.iter().map(|t| nanos(t.ttl)).collect(),
            crons: calendars().map(|c| c.map(|c| c.expression())).collect(),
            time_zones: calendars().map(|c| c.map(|c| c.time_zone())).collect(),
            traces: timers
                .iter()
                .map(|t| trace_column(t.trace.as_deref()))
                .collect(),
        }
    }

    /// `$1` to `$11`, then the announcement limit (`$12`).
    pub(super) fn parameters<'p>(
        &'p self,
        announce_until: &'p i64,
    ) -> [&'p (dyn ToSql + Sync); 12] {
        [
            &self.ids,
            &self.namespaces,
            &self.keys,
            &self.partitions,
            &self.deadlines,
            &self.payloads,
            &self.repeats,
            &self.ttls,
            &self.crons,
            &self.time_zones,
            &self.traces,
            announce_until,
        ]
    }
}
