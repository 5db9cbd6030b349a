//! The timer table itself: every pending timer in the wheel, the indexes the API needs
//! (id, key, namespace counts), and the journal its changes go to. What it does with them is in the files beside this one: timers are born and
//! changed in `register`, listed in `page` and `view`, and fire in `fire`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::id_index::IdIndex;
use super::journal::Journal;
use super::namespaces::Namespaces;
use super::record::{self, TimerRecord};
use super::stored_schedules::StoredSchedules;
use crate::budget::MemoryBudget;
use crate::clock::{Clock, Now, SystemClock};
use crate::config::Config;
use crate::domain::TimerView;
use crate::local::store::records::record::Kind;
use crate::metrics::Metrics;
use crate::wheel::Wheel;

/// Storage positions one listing page (or one snapshot chunk) looks at, at most: about a
/// millisecond of the worker's time, so that listing a small namespace among millions of
/// timers never stalls firing. A page may hence come back short, even empty, with a token
/// to continue from.
pub(super) const SCAN_POSITIONS: usize = 65_536;

#[derive(Debug, Clone, Copy)]
pub struct TableConfig {
    pub tick: Duration,
    pub max_pending: usize,
    /// 0: no per-namespace quota.
    pub max_pending_per_namespace: u64,
    /// Live namespaces at most (see [`crate::local::live_namespaces`]); 0: no limit.
    pub max_namespaces: usize,
}

impl TableConfig {
    /// The table's part of the daemon's flags.
    pub fn from_config(config: &Config) -> Self {
        Self {
            tick: config.tick,
            max_pending: config.max_pending,
            max_pending_per_namespace: config.max_pending_per_namespace,
            max_namespaces: config.max_namespaces,
        }
    }
}

pub struct TimerTable {
    pub(super) wheel: Wheel<TimerRecord>,
    /// Every pending timer by id (ids are unique across namespaces; lookups check the
    /// namespace too).
    pub(super) handles: IdIndex,
    pub(super) namespaces: Namespaces,
    /// The schedules of cron timers (see [`calendar`]).
    pub(super) calendars: record::Calendars,
    /// The trace contexts of the timers whose registration carried one.
    pub(super) traces: super::traces::Traces,
    /// Until recovery ends ([`TimerTable::held_again`]): the schedules it has read back.
    pub(super) stored_schedules: StoredSchedules,
    pub(super) next_id: u64,
    /// With a data directory: where records and deferred replies go.
    pub(super) journal: Option<Journal>,
    pub(super) max_pending_per_namespace: u64,
    /// Every pending timer's bytes are charged here on admission and released when it
    /// leaves (a one-shot timer's pass to its expiration as it fires).
    pub(super) memory: Arc<MemoryBudget>,
    /// When the worker last woke (monotonic), to pace a snapshot the disk is behind on.
    pub(super) last_woken: u64,
    pub(super) metrics: Arc<Metrics>,
}

impl TimerTable {
    pub fn new(config: TableConfig, metrics: Arc<Metrics>) -> Self {
        Self::on_clock(config, metrics, &SystemClock::new())
    }

    /// A table whose namespace numbers start at `clock`'s wall-clock time (see
    /// [`Namespaces::new`]): the simulation's clock is its own.
    pub(crate) fn on_clock(config: TableConfig, metrics: Arc<Metrics>, clock: &dyn Clock) -> Self {
        let tick = u64::try_from(config.tick.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        Self {
            wheel: Wheel::new(tick, config.max_pending),
            handles: IdIndex::default(),
            namespaces: Namespaces::new(config.max_namespaces, metrics.clone(), clock),
            calendars: record::Calendars::default(),
            traces: Default::default(),
            stored_schedules: StoredSchedules::default(),
            next_id: 1,
            journal: None,
            max_pending_per_namespace: config.max_pending_per_namespace,
            memory: MemoryBudget::unlimited(),
            last_woken: 0,
            metrics,
        }
    }

    /// From now on every mutation is journaled and replies wait until it is durable.
    pub(crate) fn attach_journal(&mut self, mut journal: Journal) {
        journal.charge_to(self.memory.clone());
        self.journal = Some(journal);
    }

    /// Answers a command: at once in memory mode, else once the batch is durable.
    pub(super) fn respond<T: Send + 'static>(&mut self, reply: oneshot::Sender<T>, value: T) {
        // A dropped receiver means the client went away; there is nobody left to tell.
        match &mut self.journal {
            Some(journal) => journal.reply_when_durable(Box::new(move || {
                let _ = reply.send(value);
            })),
            None => {
                let _ = reply.send(value);
            }
        }
    }

    /// See [`Journal::ask_for_snapshot`].
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn ask_for_snapshot(&mut self) {
        if let Some(journal) = &mut self.journal {
            journal.ask_for_snapshot();
        }
    }

    /// Journals a record, built only when there is a journal.
    pub(super) fn log(&mut self, record: impl FnOnce(&Self) -> Kind) {
        if self.journal.is_some() {
            let kind = record(self);
            if let Some(journal) = &mut self.journal {
                journal.record(kind);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.wheel.len()
    }

    /// The live namespaces, which delivery shares with the table (see
    /// [`crate::local::live_namespaces`]).
    pub(crate) fn live_namespaces(&self) -> Arc<crate::local::live_namespaces::LiveNamespaces> {
        self.namespaces.live()
    }

    pub fn is_empty(&self) -> bool {
        self.wheel.is_empty()
    }

    /// Every pending timer, by deadline: what [`crate::worker::Worker::stop`] leaves behind.
    pub fn into_pending(mut self, now: Now) -> Vec<TimerView> {
        let drained = self.wheel.drain();
        drained
            .into_iter()
            .map(|expired| self.view(&expired.value, expired.deadline, now))
            .collect()
    }
}
