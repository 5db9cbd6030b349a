//! What a replica's tasks share: its identity and settings, the partitions it holds (with
//! their lease epochs), its wheel's queue and its clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustc_hash::FxHashMap;
use tokio::sync::watch;

use super::notifications::DueRow;
use super::schedule::{DueTimer, ScheduleCommand};
use crate::clock::SystemClock;
use crate::worker::WorkerHandle;

/// Resolves once `stopping` turns true (or its sender is gone).
pub(super) async fn until_stopped(stopping: &mut watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stopping| *stopping).await;
}

/// The partitions this replica holds, each with the epoch its lease was granted at.
/// Written by [`ownership`], read by everything that must not act on a partition it lost.
#[derive(Clone, Default)]
pub struct Owned {
    epochs: Arc<Mutex<FxHashMap<u32, i64>>>,
}

impl Owned {
    pub(crate) fn epoch(&self, partition: u32) -> Option<i64> {
        self.lock().get(&partition).copied()
    }

    /// Those of `partitions` held, each with its epoch (one lock for all of them).
    pub(crate) fn tenures(&self, partitions: impl IntoIterator<Item = u32>) -> Vec<(u32, i64)> {
        let epochs = self.lock();
        partitions
            .into_iter()
            .filter_map(|partition| Some((partition, *epochs.get(&partition)?)))
            .collect()
    }

    /// [`Owned::tenures`] as the two SQL arrays (`INT4[]`, `INT8[]`) the fencing
    /// statements join on.
    pub(crate) fn tenure_arrays(
        &self,
        partitions: impl IntoIterator<Item = u32>,
    ) -> (Vec<i32>, Vec<i64>) {
        self.tenures(partitions)
            .into_iter()
            .map(|(partition, epoch)| (partition as i32, epoch))
            .unzip()
    }

    pub(crate) fn partitions(&self) -> Vec<u32> {
        let mut partitions: Vec<u32> = self.lock().keys().copied().collect();
        partitions.sort_unstable();
        partitions
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records a lease the database granted (the lease loop's job; tests use it too).
    pub fn insert(&self, partition: u32, epoch: i64) {
        self.lock().insert(partition, epoch);
    }

    pub(super) fn remove(&self, partitions: &[u32]) {
        let mut epochs = self.lock();
        for partition in partitions {
            epochs.remove(partition);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FxHashMap<u32, i64>> {
        self.epochs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What every part of a replica needs to know about the cluster.
#[derive(Clone)]
pub struct Shared {
    pub replica_id: Arc<str>,
    pub partitions: u32,
    pub lease_ttl: Duration,
    pub load_horizon: Duration,
    pub owned: Owned,
    pub schedule: WorkerHandle<ScheduleCommand>,
    pub clock: SystemClock,
}

impl Shared {
    pub(crate) fn partition_of(&self, id: u64) -> u32 {
        (id % u64::from(self.partitions)) as u32
    }

    /// Unix nanoseconds now, on this replica's clock (deadlines are kept in it).
    pub(crate) fn unix_now(&self) -> u64 {
        use crate::clock::Clock;
        self.clock.now().unix
    }

    /// A timer of a partition this replica holds, ready for its wheel (with the epoch it
    /// holds the partition at); `None` if it holds it no longer.
    pub(crate) fn due_timer(&self, row: DueRow<'_>, late: bool) -> Option<DueTimer> {
        Some(DueTimer {
            namespace: Arc::from(row.namespace),
            id: row.id,
            partition: row.partition,
            deadline_unix: row.deadline_unix,
            late,
            epoch: self.owned.epoch(row.partition)?,
            version: row.version,
        })
    }

    /// [`Shared::due_timer`] from a row whose first columns are `namespace, id, partition,
    /// deadline, version`; `None` also when the deadline is NULL (a fired one-shot timer).
    pub(crate) fn due_timer_of_row(
        &self,
        row: &tokio_postgres::Row,
        late: bool,
    ) -> Option<DueTimer> {
        self.due_timer(DueRow::of_row(row)?, late)
    }

    /// The end of the load horizon: timers due by then belong in the owner's wheel.
    pub(crate) fn horizon_end(&self) -> u64 {
        self.unix_now()
            .saturating_add(self.load_horizon.as_nanos() as u64)
    }
}
