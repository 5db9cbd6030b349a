//! What replicas tell each other through the database, and how a replica passes it on.
//!
//! Two channels: `tickd_due` announces a timer due within the load horizon to its
//! partition's owner (sent by the statement that wrote the row, so it is heard only if
//! that commits); `tickd_fired` tells every replica that a namespace has new expirations.
//! The loader listens on both; [`Wakeups`] wakes the subscriber tasks of a namespace.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

pub(crate) const DUE_CHANNEL: &str = "tickd_due";
pub(crate) const FIRED_CHANNEL: &str = "tickd_fired";

/// What the wheel needs of a timer's row (or of its `tickd_due` announcement).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DueRow<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) id: u64,
    pub(crate) partition: u32,
    pub(crate) deadline_unix: u64,
    pub(crate) version: i64,
}

impl<'a> DueRow<'a> {
    /// From a row whose first columns are `namespace, id, partition, deadline, version`;
    /// `None` when the deadline is NULL (a fired one-shot timer).
    pub(super) fn of_row(row: &'a tokio_postgres::Row) -> Option<Self> {
        Some(DueRow {
            namespace: row.get(0),
            id: row.get::<_, i64>(1) as u64,
            partition: row.get::<_, i32>(2) as u32,
            deadline_unix: row.get::<_, Option<i64>>(3)? as u64,
            version: row.get(4),
        })
    }
}

/// Per-namespace wake-ups for subscriber tasks.
#[derive(Clone, Default)]
pub struct Wakeups {
    namespaces: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
}

impl Wakeups {
    pub(super) fn of(&self, namespace: &str) -> Arc<Notify> {
        let mut namespaces = self.lock();
        namespaces.entry(namespace.to_owned()).or_default().clone()
    }

    pub(crate) fn wake(&self, namespace: &str) {
        if let Some(notify) = self.lock().get(namespace) {
            notify.notify_waiters();
        }
    }

    pub(crate) fn wake_all(&self) {
        for notify in self.lock().values() {
            notify.notify_waiters();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.namespaces
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The payload of a `tickd_due` notification: `partition deadline version id namespace`
/// (the namespace last: it may contain spaces, never control characters).
pub(crate) fn due_payload_sql() -> &'static str {
    "partition::TEXT || ' ' || deadline::TEXT || ' ' || version::TEXT || ' ' || id::TEXT \
     || ' ' || namespace"
}

pub(super) fn parse_due(payload: &str) -> Option<DueRow<'_>> {
    let mut fields = payload.splitn(5, ' ');
    Some(DueRow {
        partition: fields.next()?.parse().ok()?,
        deadline_unix: fields.next()?.parse().ok()?,
        version: fields.next()?.parse().ok()?,
        id: fields.next()?.parse().ok()?,
        namespace: fields.next()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_due_payload_keeps_spaces_in_the_namespace() {
        assert_eq!(
            parse_due("3 1700000000000000000 7 42 billing eu"),
            Some(DueRow {
                partition: 3,
                deadline_unix: 1_700_000_000_000_000_000,
                version: 7,
                id: 42,
                namespace: "billing eu"
            })
        );
        assert_eq!(parse_due("3 x 0 42 ns"), None);
        assert_eq!(parse_due("3 1 0"), None);
    }
}
