//! What the simulation found in the store, each as an example of its own: the fixed
//! behaviour checked directly on the simulated disk, beside the seed that found it.

use std::path::Path;
use std::sync::Arc;

use super::disk::SimDisk;
use super::rng::Rng;
use crate::clock::{Clock, ManualClock};
use crate::local::store::records::{record::Kind, Attempted, Fired, Record, Timer};
use crate::local::store::stepped::SteppedStore;
use crate::local::store::{Batch, RecoveredFiring, SyncMode};
use crate::metrics::Metrics;

const DIR: &str = "/sim/found";

fn open(disk: &SimDisk, sync: SyncMode) -> (SteppedStore, Vec<RecoveredFiring>, u64) {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::starting_at_unix(1));
    let mut timers = 0;
    let (store, unsettled) = SteppedStore::open(
        Arc::new(disk.clone()),
        clock,
        Path::new(DIR),
        sync,
        Metrics::new(),
        |record| timers += u64::from(matches!(record.kind, Some(Kind::Registered(_)))),
    )
    .expect("the store opens");
    (store, unsettled, timers)
}

fn timer(id: u64) -> Timer {
    Timer {
        id,
        namespace: "a".into(),
        deadline_unix_nanos: 1_000,
        fired_count: 1,
        ..Timer::default()
    }
}

/// Appends one record and steps the store; `leaves`: deliveries leave once it is written.
/// Returns whether the store's written mark passed it.
fn append(store: &mut SteppedStore, kind: Kind, leaves: bool) -> bool {
    let mut batch = Batch::default();
    batch.record(&Record { kind: Some(kind) });
    if leaves {
        batch.leaves_once_written();
    }
    let number = store.handle().append(batch);
    store.step();
    let written = store.handle().marks().peek().written;
    written >= number
}

/// Seed 16: a process killed with an unsynced tail (`--sync interval`), started again (a
/// new segment follows), then a power cut. The tail was lost from what had become an older
/// segment, and every later start refused the directory. Recovery now syncs the newest
/// file it read before the new segment exists.
#[test]
fn a_tail_replayed_at_start_survives_a_later_power_cut() {
    for seed in 0..32 {
        let disk = SimDisk::new(Rng::new(seed));
        let (mut store, _, _) = open(&disk, SyncMode::Interval);
        append(&mut store, Kind::Registered(timer(1)), false);
        drop(store);
        disk.crash_process();
        let (store, _, replayed) = open(&disk, SyncMode::Interval);
        assert_eq!(
            replayed, 1,
            "seed {seed}: the killed process's record is replayed"
        );
        drop(store);
        disk.crash_machine();
        let (_, _, replayed) = open(&disk, SyncMode::Interval);
        assert_eq!(
            replayed, 1,
            "seed {seed}: the record a start built on is still there"
        );
    }
}

/// Seed 127: an fsync that fails after deliveries left (their attempt records written):
/// the cut back to what was acknowledged took those records too, so the expiration came
/// back at the same attempt after every restart, never dead. The cut now keeps them.
#[test]
fn attempts_of_deliveries_that_left_survive_a_failed_fsync() {
    let disk = SimDisk::new(Rng::new(7));
    let (mut store, _, _) = open(&disk, SyncMode::Always);
    let fired = Fired {
        timer: Some(timer(1)),
        fired_unix_nanos: 1_000,
        rearmed_deadline_unix_nanos: 0,
    };
    append(&mut store, Kind::Fired(fired), false);
    disk.fail_sync_next();
    let attempted = Attempted {
        id: 1,
        fired_count: 1,
        attempts: 3,
    };
    let left = append(&mut store, Kind::Attempted(attempted), true);
    assert!(left, "the delivery left before the fsync");
    assert!(
        store.handle().has_failed(),
        "the failed fsync stopped the store"
    );
    drop(store);
    disk.crash_process();
    let (_, unsettled, _) = open(&disk, SyncMode::Always);
    let attempts: Vec<u32> = unsettled.iter().map(|(_, attempts)| *attempts).collect();
    assert_eq!(
        attempts,
        [3],
        "the attempt that left is counted after the restart"
    );
}
