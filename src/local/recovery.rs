//! Start-up of the local backend: the timer table rebuilt from the data directory's
//! snapshot and log, the store opened to go on from where they end, and the expirations
//! fired before the restart and never settled, to be delivered again.
//!
//! Recovery charges what it restores to the memory budget, and refuses to start, saying
//! what it needs, rather than restore more than tickd can hold.

use std::sync::Arc;

use tracing::{info, warn};

use super::error::LocalError;
use super::store::{repair, Store, StoreHandle, SyncMode};
use super::table::durable_replies::ReplyReleaser;
use super::table::journal::Journal;
use super::table::{TableConfig, TimerTable};
use crate::budget::container::MemoryLimit;
use crate::budget::{ByteCount, MemoryBudget};
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::domain::Expiration;
use crate::metrics::Metrics;

/// What start-up rebuilt.
pub(super) struct Recovered {
    /// The timers pending, journaling to `store` (unless `--sync none`).
    pub(super) table: TimerTable,
    pub(super) store: Option<(Store, StoreHandle)>,
    /// Where the table's replies wait for the log, to be run on its own thread beside the
    /// worker.
    pub(super) replies: Option<ReplyReleaser>,
    /// Fired before the restart and never settled, each with the deliveries it had.
    pub(super) unsettled: Vec<(Expiration, u32)>,
}

/// Builds the timer table, replaying the data directory into it unless `--sync none`.
pub(super) fn recover(
    config: &Config,
    clock: SystemClock,
    metrics: &Arc<Metrics>,
    (memory, limit): (&Arc<MemoryBudget>, &MemoryLimit),
) -> Result<Recovered, LocalError> {
    let mut table = TimerTable::new(TableConfig::from_config(config), metrics.clone())
        .with_memory_budget(memory.clone());
    if config.sync == SyncMode::None {
        return Ok(Recovered {
            table,
            store: None,
            replies: None,
            unsettled: Vec::new(),
        });
    }
    if config.recover_truncate {
        // The operator's choice: keep what precedes the first damage, the rest set aside.
        repair::set_aside_damage(&config.data_dir)?;
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
        return Err(LocalError::RecoveryTooLarge(format!(
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
    let (journal, replies) = Journal::new(
        handle.clone(),
        config.snapshot_after_bytes,
        store.recovered_snapshot_bytes(),
    );
    table.attach_journal(journal);
    // Fired before the restart and never settled: they are held again until settled, with
    // the deliveries they had.
    let unsettled = table.held_again(unsettled, memory);
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
    Ok(Recovered {
        table,
        store: Some((store, handle)),
        replies: Some(replies),
        unsettled,
    })
}

/// What tickd itself needs beside the timers it holds (runtime, threads, buffers, the
/// binary's pages), kept free when recovery decides whether it can go on.
const RECOVERY_HEADROOM_MIB: u64 = 32;

/// The most recovery restores of a memory limit of `limit` bytes (0: none known): three
/// quarters of it, and never within [`RECOVERY_HEADROOM_MIB`] of it.
fn recovery_ceiling(limit: u64) -> u64 {
    (limit / 4 * 3).min(limit.saturating_sub(RECOVERY_HEADROOM_MIB << 20))
}
