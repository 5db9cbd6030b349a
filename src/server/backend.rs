//! The parts that hold timers, local or replicated, as the server starts, watches and
//! stops them.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::ServerError;
use crate::budget::container::MemoryLimit;
use crate::budget::{ByteCount, MemoryBudget};
use crate::clock::{Clock, SystemClock};
use crate::cluster::Replica;
use crate::config::Config;
use crate::delivery::DeliveryHandle;
use crate::domain::Expiration;
use crate::domain::{Expirations, Timers};
use crate::metrics::Metrics;
use crate::store::{Store, StoreHandle, SyncMode};
use crate::worker::journal::Journal;
use crate::worker::local::LocalTimers;
use crate::worker::table::TimerTable;
use crate::worker::Worker;

/// What the health watch makes of the backend.
pub(super) enum Health {
    Serving,
    /// The replica cannot reach its database (for this long): not serving until it can.
    Unreachable(Duration),
    /// A part that holds state is gone or its log failed: tickd must stop, and recovery
    /// decide what is true.
    Failed(&'static str),
}

/// The parts that hold timers: a local worker, log and delivery task, or a replica of a
/// shared database.
pub(super) enum Backend {
    Local {
        worker: Worker<TimerTable>,
        /// Boxed: the variant would otherwise be the enum's size many times over.
        delivery: Box<DeliveryHandle>,
        store: Option<(Store, StoreHandle)>,
    },
    Replicated(Box<Replica>),
}

impl Backend {
    pub(super) fn local(
        config: &Config,
        metrics: &Arc<Metrics>,
        memory: (&Arc<MemoryBudget>, &MemoryLimit),
    ) -> Result<Self, ServerError> {
        // The worker must run on the clock the recovery converted deadlines with.
        let clock = SystemClock::new();
        let (table, store, recovered) =
            tokio::task::block_in_place(|| recover(config, clock, metrics, memory))?;
        let store_handle = store.as_ref().map(|(_, handle)| handle.clone());
        let boot = store
            .as_ref()
            .map_or_else(crate::delivery::ids::unlogged_boot, |(store, _)| {
                store.boot()
            });
        let delivery = DeliveryHandle::spawn(
            config.delivery(),
            store_handle.clone(),
            boot,
            recovered,
            (
                metrics.clone(),
                // Namespaces the table creates are let go by delivery: one live set for both.
                table.live_namespaces(),
                Arc::new(clock),
            ),
        );
        let sink = delivery.clone().after_the_log(store_handle);
        let worker = Worker::spawn(table, clock, config.worker(metrics), sink)
            .map_err(ServerError::Worker)?;
        Ok(Backend::Local {
            worker,
            delivery: Box::new(delivery),
            store,
        })
    }

    pub(super) async fn replicated(
        config: &Config,
        url: &str,
        metrics: &Arc<Metrics>,
        memory: &Arc<MemoryBudget>,
    ) -> Result<Self, ServerError> {
        let cluster_config = config.cluster(url, memory)?;
        let replica = Replica::start(cluster_config, metrics.clone()).await?;
        Ok(Backend::Replicated(Box::new(replica)))
    }

    /// What answers the API: the one place that knows there are two backends.
    pub(super) fn api(&self) -> (Arc<dyn Timers>, Arc<dyn Expirations>) {
        match self {
            Backend::Local {
                worker, delivery, ..
            } => (
                Arc::new(LocalTimers::new(worker.handle())),
                Arc::new(DeliveryHandle::clone(delivery)),
            ),
            Backend::Replicated(replica) => (
                Arc::new(replica.timers.clone()),
                Arc::new(replica.deliveries.clone()),
            ),
        }
    }

    /// Whether the parts that hold timers can do their job (see [`Health`]).
    pub(super) fn health(&self) -> Health {
        match self {
            Backend::Local {
                worker,
                delivery,
                store,
            } => {
                if let Some((store, handle)) = store {
                    if handle.has_failed() {
                        return Health::Failed("the log failed to write (see the error above)");
                    }
                    if !store.is_running() {
                        return Health::Failed("the store thread stopped");
                    }
                }
                if !worker.is_running() {
                    return Health::Failed("the timer worker thread stopped");
                }
                if !delivery.is_running() {
                    return Health::Failed("the delivery task stopped");
                }
                Health::Serving
            }
            Backend::Replicated(replica) => {
                if !replica.is_running() {
                    return Health::Failed("the replica's wheel thread stopped");
                }
                match replica.database_unreachable_for() {
                    Some(unreachable) => Health::Unreachable(unreachable),
                    None => Health::Serving,
                }
            }
        }
    }

    /// Ends the subscription streams (graceful shutdown).
    pub(super) fn shutdown(&self) {
        match self {
            Backend::Local { delivery, .. } => delivery.shutdown(),
            Backend::Replicated(replica) => replica.end_subscriptions(),
        }
    }

    /// Stops everything; returns the timers still pending in this process's wheel, or why
    /// the stop did not end cleanly (the log failed on its last commits).
    pub(super) async fn stop(self) -> Result<usize, &'static str> {
        match self {
            Backend::Local {
                worker,
                delivery,
                store,
            } => {
                // A worker that panicked leaves no table: what is pending is in the log.
                let table = tokio::task::block_in_place(|| worker.try_stop());
                let pending_timers = table.as_ref().map_or(0, TimerTable::len);
                drop(table);
                // Every handle on the store must go before it can finish its last commit.
                delivery.close().await;
                if let Some((store, handle)) = store {
                    let failed = handle.failure_flag();
                    drop(handle);
                    tokio::task::block_in_place(|| store.join());
                    if failed.load(std::sync::atomic::Ordering::Acquire) {
                        return Err("the log failed to write while stopping");
                    }
                }
                Ok(pending_timers)
            }
            Backend::Replicated(replica) => Ok(replica.stop().await),
        }
    }
}

/// Builds the timer table, replaying the data directory into it unless `--sync none`.
/// Returns the table (journaling), the store, and the expirations to deliver again.
#[allow(clippy::type_complexity)]
fn recover(
    config: &Config,
    clock: SystemClock,
    metrics: &Arc<Metrics>,
    (memory, limit): (&Arc<MemoryBudget>, &MemoryLimit),
) -> Result<
    (
        TimerTable,
        Option<(Store, StoreHandle)>,
        Vec<(Expiration, u32)>,
    ),
    ServerError,
> {
    let mut table =
        TimerTable::new(config.table(), metrics.clone()).with_memory_budget(memory.clone());
    if config.sync == SyncMode::None {
        return Ok((table, None, Vec::new()));
    }
    if config.recover_truncate {
        // The operator's choice: keep what precedes the first damage, the rest set aside.
        crate::store::repair::set_aside_damage(&config.data_dir)?;
    }
    let now = clock.now();
    // Recovery charges what it restores even past the budget (nothing accepted is dropped
    // to fit), but stops restoring short of the memory tickd can really have: better a
    // refusal to start, saying what it needs, than an OOM kill at every restart.
    let ceiling = recovery_ceiling(limit.bytes);
    let mut too_large = false;
    let (store, handle, unsettled) = Store::open(
        &config.data_dir,
        config.sync,
        metrics.clone(),
        config.max_disk.bytes(),
        |record| {
            if too_large {
                return;
            }
            table.replay(record, now);
            too_large = limit.bytes > 0 && memory.used() > ceiling;
        },
    )?;
    if too_large {
        return Err(ServerError::RecoveryTooLarge(format!(
            "recovery stopped: the timers in {} need more than {} of memory, the most tickd \
             can hold within {} ({}) beside its own {RECOVERY_HEADROOM_MIB} MiB; no timer was \
             dropped: start tickd with more memory (a higher container memory limit), then \
             cancel timers until they fit",
            config.data_dir.display(),
            ByteCount(ceiling),
            ByteCount(limit.bytes),
            limit.what,
        )));
    }
    table.attach_journal(Journal::new(
        handle.clone(),
        config.snapshot_after_bytes,
        store.recovered_snapshot_bytes(),
    ));
    // Fired before the restart and never settled: they are held again until settled, with
    // the deliveries they had.
    let recovered = table.held_again(unsettled, memory);
    info!(
        data_dir = %config.data_dir.display(),
        pending_timers = table.len(),
        memory_used = %ByteCount(memory.used()),
        "recovered timers"
    );
    if memory.is_reached() {
        warn!(
            memory_used = %ByteCount(memory.used()),
            max_memory = %ByteCount(memory.limit()),
            "memory budget reached by the recovered timers: registrations are refused until enough of them leave"
        );
    }
    Ok((table, Some((store, handle)), recovered))
}

/// What tickd itself needs beside the timers it holds (runtime, threads, buffers, the
/// binary's pages), kept free when recovery decides whether it can go on.
const RECOVERY_HEADROOM_MIB: u64 = 32;

/// The most recovery restores of a memory limit of `limit` bytes (0: none known): three
/// quarters of it, and never within [`RECOVERY_HEADROOM_MIB`] of it.
fn recovery_ceiling(limit: u64) -> u64 {
    (limit / 4 * 3).min(limit.saturating_sub(RECOVERY_HEADROOM_MIB << 20))
}
