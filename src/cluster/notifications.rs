//! What replicas tell each other through the database, and how a replica passes it on.
//!
//! Two channels: `tickd_due` announces a timer due within the load horizon to its
//! partition's owner (sent by the statement that wrote the row, so it is heard only if
//! that commits); `tickd_fired` tells every replica that a namespace has new expirations.
//! The loader listens on both; [`Wakeups`] wakes the subscriber tasks of a namespace.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::futures::Notified;
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

/// Per-namespace wake-ups for subscriber and observer tasks.
#[derive(Clone, Default)]
pub struct Wakeups {
    namespaces: Arc<Mutex<HashMap<String, Arc<NamespaceWakeup>>>>,
}

impl Wakeups {
    pub(super) fn of(&self, namespace: &str) -> Arc<NamespaceWakeup> {
        let mut namespaces = self.lock();
        namespaces.entry(namespace.to_owned()).or_default().clone()
    }

    pub(crate) fn wake(&self, namespace: &str) {
        if let Some(wakeup) = self.lock().get(namespace) {
            wakeup.wake();
        }
    }

    pub(crate) fn wake_all(&self) {
        for wakeup in self.lock().values() {
            wakeup.wake();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<NamespaceWakeup>>> {
        self.namespaces
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One namespace's wake-up, and whose turn it is to claim after it.
///
/// Why the turn: every wake-up (rows fired unclaimed, handed back or redriven, room
/// freed by an ack) woke all of the namespace's subscribers here, and each ran a claim
/// statement; the first took the rows, and the others walked every row in flight to find
/// nothing (one replica at 10,000 timers/s: 1,341 of 1,348 claims came back empty, the
/// costliest statement of the run). Now a wake-up is one subscriber's to claim after: the
/// first with room to take its turn. If it runs out of room before it runs out of rows,
/// it wakes the namespace again for the next. The poll every `POLL_INTERVAL` still claims
/// without a turn, which bounds how long anything claimable can wait.
#[derive(Default)]
pub(crate) struct NamespaceWakeup {
    notify: Notify,
    /// Wake-ups so far.
    woken: AtomicU64,
    /// The last wake-up a subscriber took its turn for.
    taken: AtomicU64,
}

impl NamespaceWakeup {
    /// Wakes every task waiting (each enables its [`Self::notified`] before it looks, so
    /// a wake-up during a look is not missed).
    pub(crate) fn wake(&self) {
        self.woken.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    pub(crate) fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }

    /// Whether the caller is the first to take its turn since the last wake-up; the
    /// others leave the claiming to it.
    pub(crate) fn take_turn(&self) -> bool {
        let woken = self.woken.load(Ordering::Acquire);
        self.taken.fetch_max(woken, Ordering::AcqRel) < woken
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
    fn each_wake_up_is_one_turn() {
        let wakeup = NamespaceWakeup::default();
        assert!(!wakeup.take_turn(), "a turn before any wake-up");
        wakeup.wake();
        assert!(wakeup.take_turn());
        assert!(!wakeup.take_turn(), "two turns for one wake-up");
        // Wake-ups while nobody took a turn make one turn, not several.
        wakeup.wake();
        wakeup.wake();
        assert!(wakeup.take_turn());
        assert!(!wakeup.take_turn());
    }

    /// Polled by hand, so that a wake-up that reached nobody fails the test instead of
    /// hanging it.
    #[test]
    fn a_wake_up_reaches_every_task_waiting() {
        use std::future::Future;
        use std::task::{Context, Poll, Waker};

        let wakeup = NamespaceWakeup::default();
        let first = wakeup.notified();
        let second = wakeup.notified();
        tokio::pin!(first, second);
        first.as_mut().enable();
        second.as_mut().enable();
        let mut context = Context::from_waker(Waker::noop());
        assert!(first.as_mut().poll(&mut context).is_pending());
        wakeup.wake();
        assert_eq!(first.as_mut().poll(&mut context), Poll::Ready(()));
        assert_eq!(second.as_mut().poll(&mut context), Poll::Ready(()));
    }

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
