//! The local backend: timers held by one process, in its own data directory.
//!
//! A timer is born in [`timers`] (the API's call becomes a command to the worker thread),
//! waits in [`table`] (the worker thread's wheel and indexes), is written by [`store`]
//! before it is answered (the table's replies wait for the store's durable mark), fires in
//! the table, whose round goes to [`delivery`] with the number of the log batch that
//! records it, and is delivered there once that batch is durable, then acknowledged or
//! delivered again.
//! [`recovery`] rebuilds the table and the expirations still unsettled from the data
//! directory at start.
//!
//! [`LocalBackend`] assembles those parts and is what the server holds, as a
//! [`crate::domain::Backend`]; `crate::cluster` is the other one.

pub mod delivery;
mod error;
pub(crate) mod live_namespaces;
mod recovery;
pub(crate) mod sinks;
pub mod store;
pub mod table;
pub(crate) mod timers;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::budget::container::MemoryLimit;
use crate::budget::MemoryBudget;
use crate::clock::SystemClock;
use crate::config::Config;
use crate::config::SyncMode;
use crate::domain::{Backend, Expirations, Health, SinkStore, Stopping, Timers};
use crate::metrics::Metrics;
use crate::worker::Worker;
use delivery::DeliveryHandle;
pub use error::LocalError;
use recovery::Recovered;
use sinks::LocalSinks;
use store::{Store, StoreHandle};
use table::durable_replies::ReplyReleaser;
use table::TimerTable;
use timers::LocalTimers;

/// The worker thread over the timer table, the delivery task, and the log both write to.
pub struct LocalBackend {
    worker: Worker<TimerTable>,
    delivery: DeliveryHandle,
    store: Option<(Store, StoreHandle)>,
    /// The thread that answers the table's calls as the log makes them durable.
    replies: Option<std::thread::JoinHandle<()>>,
    /// The sinks set through the API: `sinks.json` in the data directory, or memory only
    /// with `--sync none`.
    sinks: Arc<LocalSinks>,
}

impl LocalBackend {
    /// Recovers the data directory (unless `--sync none`), then starts the delivery task
    /// and the worker thread over what was recovered. Needs a multi-threaded tokio
    /// runtime: recovery blocks in place, and the delivery task is spawned on it.
    pub fn start(
        config: &Config,
        metrics: &Arc<Metrics>,
        memory: (&Arc<MemoryBudget>, &MemoryLimit),
    ) -> Result<Self, LocalError> {
        // The worker must run on the clock the recovery converted deadlines with.
        let clock = SystemClock::new();
        let Recovered {
            table,
            store,
            replies,
            unsettled,
        } = tokio::task::block_in_place(|| recovery::recover(config, clock, metrics, memory))?;
        let sinks = if config.sync == SyncMode::None {
            LocalSinks::in_memory()
        } else {
            tokio::task::block_in_place(|| LocalSinks::open(&config.data_dir))
                .map_err(LocalError::Sinks)?
        };
        let store_handle = store.as_ref().map(|(_, handle)| handle.clone());
        let boot = store
            .as_ref()
            .map_or_else(delivery::ids::unlogged_boot, |(store, _)| store.boot());
        let delivery = DeliveryHandle::spawn(
            config.delivery(),
            store_handle,
            boot,
            unsettled,
            (
                metrics.clone(),
                // Namespaces the table creates are let go by delivery: one live set for both.
                table.live_namespaces(),
                Arc::new(clock),
            ),
        );
        let replies = replies
            .map(ReplyReleaser::spawn_thread)
            .transpose()
            .map_err(LocalError::Replies)?;
        // What the worker fires goes to delivery, each round with its log batch.
        let to_delivery = delivery.clone();
        let sink = move |rounds| to_delivery.fired(rounds);
        let worker = Worker::spawn(table, clock, config.worker(metrics), sink)
            .map_err(LocalError::Worker)?;
        Ok(Self {
            worker,
            delivery,
            store,
            replies,
            sinks: Arc::new(sinks),
        })
    }
}

impl Backend for LocalBackend {
    fn timers(&self) -> Arc<dyn Timers> {
        Arc::new(LocalTimers::new(self.worker.handle()))
    }

    fn expirations(&self) -> Arc<dyn Expirations> {
        Arc::new(self.delivery.clone())
    }

    fn sinks(&self) -> Arc<dyn SinkStore> {
        Arc::new(self.sinks.clone())
    }

    fn health(&self) -> Health {
        if let Some((store, handle)) = &self.store {
            if handle.has_failed() {
                return Health::Failed("the log failed to write (see the error above)");
            }
            if !store.is_running() {
                return Health::Failed("the store thread stopped");
            }
        }
        if !self.worker.is_running() {
            return Health::Failed("the timer worker thread stopped");
        }
        if !self.delivery.is_running() {
            return Health::Failed("the delivery task stopped");
        }
        Health::Serving
    }

    fn shutdown(&self) {
        self.delivery.shutdown();
    }

    fn stop(self: Box<Self>) -> Stopping {
        let Self {
            worker,
            delivery,
            store,
            replies,
            sinks: _,
        } = *self;
        Box::pin(async move {
            // A worker that panicked leaves no table: what is pending is in the log.
            let table = tokio::task::block_in_place(|| worker.try_stop());
            let pending_timers = table.as_ref().map_or(0, TimerTable::len);
            drop(table);
            // Every handle on the store must go before it can finish its last commit.
            delivery.close().await;
            drop(delivery);
            if let Some((store, handle)) = store {
                let failed = handle.failure_flag();
                drop(handle);
                tokio::task::block_in_place(|| store.join());
                // The store's last marks answer what waited for its last commit.
                if let Some(replies) = replies {
                    let _ = tokio::task::block_in_place(|| replies.join());
                }
                if failed.load(Ordering::Acquire) {
                    return Err("the log failed to write while stopping");
                }
            }
            Ok(pending_timers)
        })
    }
}
