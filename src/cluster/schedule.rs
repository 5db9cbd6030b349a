//! A replica's wheel: which of its partitions' timers are due within the load horizon, and
//! when. The database holds the timers themselves; this holds only enough to know when to
//! ask the database to fire one (namespace, id, the deadline it was loaded with).
//!
//! It is a cache, and may be wrong without harm: a timer cancelled or moved by another
//! replica still fires here, and the fencing statement in [`super::firing`] finds that
//! its row is gone or its deadline changed and fires nothing.
//!
//! Commands reach the worker thread through per-thread lanes, so two commands sent from
//! different tasks may be applied in either order. Each timer therefore carries the epoch
//! at which its partition was held when it was loaded, and forgetting a partition names
//! the epoch it was held at: a late `Forget` cannot wipe timers loaded after the partition
//! was claimed again, and a late `Load` from a lost tenure is ignored.
//!
//! What it holds is charged to the replica's memory budget ([`held_bytes`] a timer) as it
//! is loaded, and released as it fires or is forgotten. A load is never refused: the
//! timer is due, and the database would offer it again at once. A replica whose budget is
//! reached refuses registrations instead (see `timers::register`).

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::budget::MemoryBudget;
use crate::clock::Now;
use crate::wheel::{Handle, Wheel};
use crate::worker::TimerState;

/// One timer as the wheel knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueTimer {
    pub namespace: Arc<str>,
    pub id: u64,
    pub partition: u32,
    /// Unix nanoseconds, exactly as stored: the firing matches on it.
    pub deadline_unix: u64,
    /// Already past when loaded (its owner was down, or the partition changed hands).
    pub late: bool,
    /// The epoch at which this replica held the partition when the timer was loaded.
    pub epoch: i64,
    /// The row's version when it was read: of two loads of one timer, the higher wins.
    pub version: i64,
}

#[derive(Debug)]
pub enum ScheduleCommand {
    /// Adds timers, or moves them to the deadline given (the database's latest word).
    Load(Vec<DueTimer>),
    /// Forgets the timers of partitions this replica no longer owns: (partition, the
    /// epoch it was held at).
    Forget(Vec<(u32, i64)>),
}

pub struct Schedule {
    wheel: Wheel<DueTimer>,
    handles: FxHashMap<u64, Handle>,
    /// Per partition, the latest epoch whose tenure ended.
    forgotten: FxHashMap<u32, i64>,
    memory: Arc<MemoryBudget>,
}

/// What one loaded timer costs beyond its [`DueTimer`]: its wheel slot and its entry in
/// the id index (with their tables' slack), and the header of its namespace's `Arc<str>`.
const ENTRY_OVERHEAD: usize = 96;

/// The bytes a loaded timer holds, as charged to the memory budget.
pub(crate) fn held_bytes(timer: &DueTimer) -> u64 {
    (std::mem::size_of::<DueTimer>() + ENTRY_OVERHEAD + timer.namespace.len()) as u64
}

impl Schedule {
    /// No bound on the timers held: the load horizon bounds them, and a timer the wheel
    /// refused would not be offered again before the partition changed hands.
    pub fn new(tick: u64) -> Self {
        Self {
            wheel: Wheel::new(tick, usize::MAX),
            handles: FxHashMap::default(),
            forgotten: FxHashMap::default(),
            memory: MemoryBudget::unlimited(),
        }
    }

    /// Charges what it holds to `memory` (by default a budget of its own, unlimited).
    pub(crate) fn with_memory(mut self, memory: Arc<MemoryBudget>) -> Self {
        self.memory = memory;
        self
    }

    pub(crate) fn len(&self) -> usize {
        self.wheel.len()
    }

    pub fn is_empty(&self) -> bool {
        self.wheel.is_empty()
    }

    fn load(&mut self, timer: DueTimer, now: Now) {
        if self
            .forgotten
            .get(&timer.partition)
            .is_some_and(|&ended| timer.epoch <= ended)
        {
            return;
        }
        let deadline = now.monotonic_at(timer.deadline_unix);
        if let Some(&handle) = self.handles.get(&timer.id) {
            if let Some((_, loaded)) = self.wheel.get_mut(handle) {
                if (timer.version, timer.epoch) <= (loaded.version, loaded.epoch) {
                    return;
                }
                let moved = loaded.deadline_unix != timer.deadline_unix;
                *loaded = timer;
                if moved {
                    self.wheel.reschedule(handle, deadline);
                }
                return;
            }
        }
        let id = timer.id;
        self.memory.charge(held_bytes(&timer));
        let handle = self
            .wheel
            .insert(deadline, timer)
            .expect("the schedule's wheel has no limit");
        self.handles.insert(id, handle);
    }

    fn forget(&mut self, tenures: &[(u32, i64)]) {
        for &(partition, epoch) in tenures {
            let ended = self.forgotten.entry(partition).or_insert(epoch);
            *ended = (*ended).max(epoch);
        }
        let forgotten: Vec<Handle> = self
            .wheel
            .iter()
            .filter(|(_, _, timer)| {
                tenures
                    .iter()
                    .any(|&(partition, epoch)| timer.partition == partition && timer.epoch <= epoch)
            })
            .map(|(handle, _, _)| handle)
            .collect();
        for handle in forgotten {
            if let Some(timer) = self.wheel.cancel(handle) {
                self.handles.remove(&timer.id);
                self.memory.release(held_bytes(&timer));
            }
        }
    }
}

/// What is still loaded goes back to the budget (the replica is stopping).
impl Drop for Schedule {
    fn drop(&mut self) {
        let held: u64 = self
            .wheel
            .iter()
            .map(|(_, _, timer)| held_bytes(timer))
            .sum();
        self.memory.release(held);
    }
}

impl TimerState for Schedule {
    type Command = ScheduleCommand;
    type Fired = DueTimer;

    fn apply(&mut self, command: ScheduleCommand, now: Now) {
        match command {
            ScheduleCommand::Load(timers) => {
                for timer in timers {
                    self.load(timer, now);
                }
            }
            ScheduleCommand::Forget(tenures) => self.forget(&tenures),
        }
    }

    fn fire_due(&mut self, now: Now, fired: &mut Vec<DueTimer>) {
        let mut expired = Vec::new();
        self.wheel.advance(now.monotonic, &mut expired);
        for entry in expired {
            self.handles.remove(&entry.value.id);
            self.memory.release(held_bytes(&entry.value));
            fired.push(entry.value);
        }
    }

    fn next_expiration(&self) -> Option<u64> {
        self.wheel.next_wakeup()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(id: u64, partition: u32, deadline_unix: u64) -> DueTimer {
        DueTimer {
            namespace: Arc::from("orders"),
            id,
            partition,
            deadline_unix,
            late: false,
            epoch: 1,
            version: 0,
        }
    }

    const MS: u64 = 1_000_000;

    fn at(unix: u64) -> Now {
        Now {
            monotonic: unix,
            unix,
        }
    }

    #[test]
    fn a_reload_moves_a_timer_instead_of_adding_a_second_one() {
        let mut schedule = Schedule::new(MS);
        let moved = DueTimer {
            version: 1,
            ..due(1, 0, 20 * MS)
        };
        schedule.apply(ScheduleCommand::Load(vec![due(1, 0, 10 * MS)]), at(0));
        schedule.apply(ScheduleCommand::Load(vec![moved.clone()]), at(0));
        assert_eq!(schedule.len(), 1);
        let mut fired = Vec::new();
        schedule.fire_due(at(15 * MS), &mut fired);
        assert!(fired.is_empty(), "fired at the old deadline: {fired:?}");
        schedule.fire_due(at(20 * MS), &mut fired);
        assert_eq!(fired, vec![moved]);
    }

    #[test]
    fn an_older_version_arriving_late_does_not_move_a_timer_back() {
        let mut schedule = Schedule::new(MS);
        // Touched to an earlier deadline (version 2); the load of version 1 comes after.
        let touched = DueTimer {
            version: 2,
            ..due(1, 0, 5 * MS)
        };
        let stale = DueTimer {
            version: 1,
            ..due(1, 0, 50 * MS)
        };
        schedule.apply(ScheduleCommand::Load(vec![touched.clone()]), at(0));
        schedule.apply(ScheduleCommand::Load(vec![stale]), at(0));
        let mut fired = Vec::new();
        schedule.fire_due(at(5 * MS), &mut fired);
        assert_eq!(fired, vec![touched]);
    }

    #[test]
    fn forgetting_a_partition_drops_only_its_timers() {
        let mut schedule = Schedule::new(MS);
        let timers = vec![due(1, 0, 5 * MS), due(2, 1, 5 * MS), due(3, 2, 5 * MS)];
        schedule.apply(ScheduleCommand::Load(timers), at(0));
        schedule.apply(ScheduleCommand::Forget(vec![(1, 1), (2, 1)]), at(0));
        let mut fired = Vec::new();
        schedule.fire_due(at(5 * MS), &mut fired);
        assert_eq!(fired, vec![due(1, 0, 5 * MS)]);
        // A late load from the ended tenure is ignored; one from the next tenure is not.
        schedule.apply(ScheduleCommand::Load(vec![due(2, 1, 9 * MS)]), at(5 * MS));
        assert_eq!(schedule.len(), 0);
        let next_tenure = DueTimer {
            epoch: 2,
            ..due(2, 1, 9 * MS)
        };
        schedule.apply(ScheduleCommand::Load(vec![next_tenure]), at(5 * MS));
        assert_eq!(schedule.len(), 1);
    }

    #[test]
    fn a_late_forget_keeps_timers_of_the_next_tenure() {
        let mut schedule = Schedule::new(MS);
        let next_tenure = DueTimer {
            epoch: 3,
            ..due(7, 1, 5 * MS)
        };
        schedule.apply(ScheduleCommand::Load(vec![next_tenure.clone()]), at(0));
        // The forget of the tenure at epoch 2 arrives after the reload at epoch 3.
        schedule.apply(ScheduleCommand::Forget(vec![(1, 2)]), at(0));
        let mut fired = Vec::new();
        schedule.fire_due(at(5 * MS), &mut fired);
        assert_eq!(fired, vec![next_tenure]);
    }
}
