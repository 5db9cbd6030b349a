//! A snapshot goes at a bounded pace, driven by hand-set times: one chunk per
//! `SNAPSHOT_CHUNK_INTERVAL_NANOS` at most, never in a round that fired timers, and the
//! worker is asked back exactly when the next chunk is due.

use std::time::Duration;

use tokio::sync::oneshot;

use super::{TableConfig, TimerTable};
use crate::clock::Now;
use crate::domain::{Due, NewTimer};
use crate::local::store::{Store, StoreHandle, SyncMode};
use crate::local::table::command::Command;
use crate::local::table::journal::{
    Journal, MAX_CHUNK_DEFERRALS, SNAPSHOT_CHUNK_INTERVAL_NANOS, SNAPSHOT_CHUNK_TIMERS,
};
use crate::metrics::Metrics;
use crate::worker::TimerState;

const MILLI: u64 = 1_000_000;

fn at(monotonic: u64) -> Now {
    Now {
        monotonic,
        unix: 1_700_000_000_000_000_000 + monotonic,
    }
}

fn timer(number: usize, delay: Duration) -> NewTimer {
    NewTimer {
        namespace: "pacing".into(),
        key: Some(format!("timer-{number}")),
        due: Due::After(delay),
        payload: Default::default(),
        repeat: None,
        ttl: None,
        calendar: None,
        replace: false,
        trace: None,
    }
}

/// A table journaling to a fresh store (in the directory returned) that snapshots after
/// any write at all.
fn journaled_table() -> (TimerTable, Store, StoreHandle, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let (store, handle, _) =
        Store::open(dir.path(), SyncMode::Always, Metrics::new(), 0, |_| {}).unwrap();
    let mut table = TimerTable::new(
        TableConfig {
            tick: Duration::from_millis(1),
            max_pending: 100_000,
            max_pending_per_namespace: 0,
            max_namespaces: 0,
        },
        Metrics::new(),
    );
    // Replies are not looked at here: their releaser is dropped, and they with it.
    let (journal, _replies) = Journal::new(handle.clone(), 1, 0);
    table.attach_journal(journal);
    (table, store, handle, dir)
}

fn register(table: &mut TimerTable, timers: Vec<NewTimer>, now: Now) {
    let (reply, _answer) = oneshot::channel();
    table.apply(Command::Register { timers, reply }, now);
    table.end_batch();
}

/// Lets the store finish what the table sent it.
fn stop(table: TimerTable, store: Store, handle: StoreHandle) {
    drop(table);
    drop(handle);
    store.join();
}

/// One round of the worker at `now`: how many timers fired (left the table).
fn fire(table: &mut TimerTable, now: Now) -> usize {
    let before = table.len();
    table.fire_due(now, &mut Vec::new());
    before - table.len()
}

fn written(table: &TimerTable) -> u64 {
    table.journal.as_ref().unwrap().snapshot_timers_written()
}

fn in_progress(table: &TimerTable) -> bool {
    table.journal.as_ref().unwrap().snapshot_in_progress()
}

#[test]
fn a_snapshot_writes_one_chunk_per_interval_and_asks_back_when_the_next_is_due() {
    let (mut table, store, handle, _dir) = journaled_table();
    let count = 2 * SNAPSHOT_CHUNK_TIMERS + 100;
    let t0 = 10 * MILLI;
    let timers = (0..count).map(|n| timer(n, Duration::from_secs(3600)));
    register(&mut table, timers.collect(), at(t0));
    assert!(
        in_progress(&table),
        "the batch's log bytes start a snapshot"
    );
    assert_eq!(
        table.next_expiration(),
        Some(0),
        "the first chunk is due at once"
    );

    let mut fired = fire(&mut table, at(t0));
    assert_eq!(written(&table), SNAPSHOT_CHUNK_TIMERS as u64);
    let next = t0 + SNAPSHOT_CHUNK_INTERVAL_NANOS;
    assert_eq!(table.next_expiration(), Some(next));

    // Woken early (say by a command), the worker writes nothing more.
    fired += fire(&mut table, at(next - 1));
    assert_eq!(written(&table), SNAPSHOT_CHUNK_TIMERS as u64);

    fired += fire(&mut table, at(next));
    assert_eq!(written(&table), 2 * SNAPSHOT_CHUNK_TIMERS as u64);
    fired += fire(&mut table, at(next + SNAPSHOT_CHUNK_INTERVAL_NANOS));
    assert_eq!(written(&table), count as u64);
    assert!(!in_progress(&table), "the last chunk ends the snapshot");
    assert_eq!(fired, 0);
    stop(table, store, handle);
}

#[test]
fn a_round_that_fires_timers_leaves_the_chunk_to_the_next_round() {
    let (mut table, store, handle, _dir) = journaled_table();
    let t0 = 10 * MILLI;
    let timers = (0..10).map(|n| timer(n, Duration::from_millis(5)));
    register(&mut table, timers.collect(), at(t0));
    assert!(in_progress(&table));

    let due = t0 + 5 * MILLI;
    assert_eq!(fire(&mut table, at(due)), 10, "the timers fire");
    assert_eq!(written(&table), 0, "no chunk in the round that fired");
    assert_eq!(
        table.next_expiration(),
        Some(0),
        "the chunk is still due at once"
    );

    assert_eq!(fire(&mut table, at(due)), 0);
    assert!(
        !in_progress(&table),
        "the next round writes it (the whole snapshot here)"
    );
    stop(table, store, handle);
}

#[test]
fn a_worker_that_fires_in_every_round_still_finishes_its_snapshot() {
    let (mut table, store, handle, _dir) = journaled_table();
    let t0 = 10 * MILLI;
    let rounds = MAX_CHUNK_DEFERRALS as u64 + 1;
    let timers = (1..=rounds + 1).map(|n| timer(n as usize, Duration::from_millis(n)));
    register(&mut table, timers.collect(), at(t0));
    assert!(in_progress(&table));

    for round in 1..=rounds {
        let fired = fire(&mut table, at(t0 + round * MILLI));
        assert!(fired > 0, "round {round} fires a timer");
        let deferred = round <= MAX_CHUNK_DEFERRALS as u64;
        assert_eq!(
            in_progress(&table),
            deferred,
            "round {round}: the chunk waits {MAX_CHUNK_DEFERRALS} rounds, then goes anyway"
        );
    }
    stop(table, store, handle);
}

#[test]
fn no_snapshot_starts_while_the_last_one_is_still_compacting() {
    let (mut table, store, handle, _dir) = journaled_table();
    // A snapshot the store has begun and not yet sealed, nor deleted what it replaces.
    handle.begin_snapshot();
    assert!(handle.is_compacting());
    let timers = (0..10).map(|n| timer(n, Duration::from_secs(3600)));
    register(&mut table, timers.collect(), at(10 * MILLI));
    assert!(
        !in_progress(&table),
        "past the threshold, but the last snapshot is not done"
    );
    handle.end_snapshot();
    stop(table, store, handle);
}
