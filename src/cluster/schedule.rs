//! A replica's wheel: which of its partitions' timers are due within the load horizon, and
//! when. The database holds the timers themselves; this holds only enough to know when to
//! ask the database to fire one (namespace, id, the deadline it was loaded with).
//!
//! It is a cache, and may be wrong without harm: a timer cancelled or moved by another
//! replica still fires here, and the fencing transaction in [`super::firing`] finds that
//! its row is gone or its deadline changed and fires nothing.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::wheel::{Handle, Wheel};
use crate::worker::clock::Now;
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
}

#[derive(Debug)]
pub enum ScheduleCommand {
    /// Adds timers, or moves them to the deadline given (the database's latest word).
    Load(Vec<DueTimer>),
    /// Forgets the timers of partitions this replica no longer owns.
    Forget(Vec<u32>),
}

pub struct Schedule {
    wheel: Wheel<DueTimer>,
    handles: FxHashMap<u64, Handle>,
}

impl Schedule {
    /// `tick` and `max_pending` as for the single-node wheel.
    pub fn new(tick: u64, max_pending: usize) -> Self {
        Self {
            wheel: Wheel::new(tick, max_pending),
            handles: FxHashMap::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.wheel.len()
    }

    pub fn is_empty(&self) -> bool {
        self.wheel.is_empty()
    }

    fn load(&mut self, timer: DueTimer, now: Now) {
        let deadline = now.monotonic_at(timer.deadline_unix);
        if let Some(&handle) = self.handles.get(&timer.id) {
            if let Some((_, loaded)) = self.wheel.get_mut(handle) {
                if loaded.deadline_unix != timer.deadline_unix {
                    *loaded = timer;
                    self.wheel.reschedule(handle, deadline);
                }
                return;
            }
        }
        let id = timer.id;
        // A full wheel leaves the timer in the database: the next scan offers it again.
        if let Ok(handle) = self.wheel.insert(deadline, timer) {
            self.handles.insert(id, handle);
        }
    }

    fn forget(&mut self, partitions: &[u32]) {
        let forgotten: Vec<Handle> = self
            .wheel
            .iter()
            .filter(|(_, _, timer)| partitions.contains(&timer.partition))
            .map(|(handle, _, _)| handle)
            .collect();
        for handle in forgotten {
            if let Some(timer) = self.wheel.cancel(handle) {
                self.handles.remove(&timer.id);
            }
        }
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
            ScheduleCommand::Forget(partitions) => self.forget(&partitions),
        }
    }

    fn fire_due(&mut self, now: Now, fired: &mut Vec<DueTimer>) {
        let mut expired = Vec::new();
        self.wheel.advance(now.monotonic, &mut expired);
        for entry in expired {
            self.handles.remove(&entry.value.id);
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
        let mut schedule = Schedule::new(MS, 100);
        schedule.apply(ScheduleCommand::Load(vec![due(1, 0, 10 * MS)]), at(0));
        schedule.apply(ScheduleCommand::Load(vec![due(1, 0, 20 * MS)]), at(0));
        assert_eq!(schedule.len(), 1);
        let mut fired = Vec::new();
        schedule.fire_due(at(15 * MS), &mut fired);
        assert!(fired.is_empty(), "fired at the old deadline: {fired:?}");
        schedule.fire_due(at(20 * MS), &mut fired);
        assert_eq!(fired, vec![due(1, 0, 20 * MS)]);
    }

    #[test]
    fn forgetting_a_partition_drops_only_its_timers() {
        let mut schedule = Schedule::new(MS, 100);
        let timers = vec![due(1, 0, 5 * MS), due(2, 1, 5 * MS), due(3, 2, 5 * MS)];
        schedule.apply(ScheduleCommand::Load(timers), at(0));
        schedule.apply(ScheduleCommand::Forget(vec![1, 2]), at(0));
        let mut fired = Vec::new();
        schedule.fire_due(at(5 * MS), &mut fired);
        assert_eq!(fired, vec![due(1, 0, 5 * MS)]);
        // A forgotten timer can be loaded again when its partition comes back.
        schedule.apply(ScheduleCommand::Load(vec![due(2, 1, 9 * MS)]), at(5 * MS));
        assert_eq!(schedule.len(), 1);
    }
}
