//! The disk budget (`--max-disk`): how large the data directory (log segments and
//! snapshots) may grow, with room kept inside it for one compaction.
//!
//! A compaction writes the new snapshot before it deletes the files it replaces, and the
//! snapshot holds every live timer, which may be everything the log holds. So the log may
//! grow to half the budget ([`DiskBudget::log_limit`]) before registrations are refused:
//! the other half is the room the next compaction needs, and the directory then peaks at
//! the budget. The small records of calls that are always served (cancels, acks,
//! heartbeats), and firings, are never refused: they take a reserve of a sixteenth of the
//! budget ([`RESERVE_SHARE`]) above it, and before they can outgrow it a compaction starts
//! ([`DiskBudget::wants_compaction`]); once the budget is reached, cancelling starts one
//! early too. The compaction gives the space back and lifts the refusal. A real full disk
//! (ENOSPC) is another matter: the store stops, as without a budget.
//!
//! Who counts what:
//! - the store thread, which owns the files, sets what is on disk as it writes and deletes
//!   them ([`DiskBudget::set_on_disk`], [`DiskBudget::written`]);
//! - every append counts its bytes as queued until the store has written them
//!   ([`DiskBudget::queued`]), so a burst of registrations is counted before it is on disk;
//! - the worker asks [`DiskBudget::admit`] before it applies a registration, adding what
//!   its own unflushed batch holds, so a refused call changes nothing.
//!
//! Why what is logged during a compaction counts twice: the snapshot is fuzzy (the table
//! is written out while registrations go on), so a timer registered while it is written
//! may land both in the new segment and in the snapshot. Once the snapshot is sealed, the
//! log is that snapshot plus the segments begun with it, and holds those timers twice. Had
//! they been counted once, the log could be past its limit right after the seal (seen: a
//! 16 MiB budget's log at 10.4 MB, after 2 MB of registrations during a compaction), and
//! the next compaction's snapshot beside it took the directory past the budget and the
//! reserve. Counted twice while a snapshot is being written ([`DiskBudget::projected`]),
//! the log after the seal is within its limit whatever the speed of registrations, and so
//! the directory within the budget (the log and a snapshot no larger than it) plus the
//! reserve.

use super::disk::Disk;
use super::error::{io_error, StoreError};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tracing::{info, warn};

use crate::budget::{ByteCount, Refusal};
use crate::domain::TimerError;
use crate::metrics::Metrics;

/// `log_bytes_at_snapshot_start` when no snapshot is being written.
const NO_SNAPSHOT: u64 = u64::MAX;

/// The reserve kept above the budget for records that are never refused, as a share of
/// the budget: `budget / RESERVE_SHARE`.
pub(crate) const RESERVE_SHARE: u64 = 16;

/// What a timer's registration record may take besides its namespace, key and payload:
/// the frame header and the scalar fields with their tags (about 40 bytes), and room for
/// a cron expression and time zone of ordinary length. Admission checks this bound, so a
/// record crosses the limit only by what an unusually long cron expression adds.
const RECORD_OVERHEAD_BYTES: u64 = 256;

/// The bytes a timer's whole record (registration, replacement or reschedule) takes at
/// most in the log.
pub(crate) fn record_bound(namespace: usize, key: usize, payload: usize) -> u64 {
    (namespace + key + payload) as u64 + RECORD_OVERHEAD_BYTES
}

/// Shared by the store thread, every appender and the worker; see the module doc.
pub(crate) struct DiskBudget {
    /// `--max-disk`; 0: no budget.
    limit: u64,
    /// Bytes of the data directory's files, but a snapshot being written: that snapshot is
    /// the room kept for compaction, not part of what the log holds.
    log_bytes: AtomicU64,
    /// Bytes appended and not yet written by the store thread.
    queued: AtomicU64,
    /// `log_bytes` when the snapshot being written began; [`NO_SNAPSHOT`] when none is.
    /// What the log grew by since may be held twice once the snapshot is sealed.
    log_bytes_at_snapshot_start: AtomicU64,
    /// Set by the first refusal (or a count past the limit), cleared once a compaction
    /// brought the log a reserve's worth under it: the transitions are logged once each,
    /// registrations are refused meanwhile and compaction starts early. Held in memory
    /// only: a restart counts the directory anew, and starts reached only if that count
    /// is past the limit (see [`Self::set_on_disk`]).
    reached: AtomicBool,
    metrics: Arc<Metrics>,
}

impl DiskBudget {
    pub(crate) fn new(limit: u64, metrics: Arc<Metrics>) -> Arc<Self> {
        metrics
            .budgets
            .disk_budget
            .set(i64::try_from(limit).unwrap_or(i64::MAX));
        Arc::new(Self {
            limit,
            log_bytes: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            log_bytes_at_snapshot_start: AtomicU64::new(NO_SNAPSHOT),
            reached: AtomicBool::new(false),
            metrics,
        })
    }

    /// The log's share of the budget: half of it, the other half kept for compaction.
    pub(crate) fn log_limit(&self) -> u64 {
        self.limit / 2
    }

    /// Room above the budget for records that are never refused.
    pub(crate) fn reserve(&self) -> u64 {
        self.limit / RESERVE_SHARE
    }

    /// What the log holds or will once the queued appends are written and the snapshot
    /// being written (if any) is sealed: what was logged since that snapshot began, and
    /// what is queued, counted twice (see the module doc). Queued is read first: the store
    /// adds to the log before it takes from the queue, so a concurrent write is at worst
    /// counted twice more, never missed.
    fn projected(&self) -> u64 {
        let queued = self.queued.load(Ordering::SeqCst);
        let log_bytes = self.log_bytes.load(Ordering::SeqCst);
        let held_twice = match self.log_bytes_at_snapshot_start.load(Ordering::SeqCst) {
            NO_SNAPSHOT => 0,
            at_start => log_bytes.saturating_sub(at_start) + queued,
        };
        queued + log_bytes + held_twice
    }

    /// How many times a record appended now counts: twice while a snapshot is written.
    fn weight(&self) -> u64 {
        match self.log_bytes_at_snapshot_start.load(Ordering::SeqCst) {
            NO_SNAPSHOT => 1,
            _ => 2,
        }
    }

    /// True from the first refusal (or a count past the limit) until a compaction lifts it.
    pub(crate) fn is_reached(&self) -> bool {
        self.reached.load(Ordering::Relaxed)
    }

    /// Admits a record of at most `record` bytes that grows what is held (a registration,
    /// a replacement, a reschedule), on top of `unflushed` bytes the caller holds and has
    /// not appended yet. Refused: RESOURCE_EXHAUSTED naming the budget and the flag,
    /// counted; the caller must then change nothing.
    ///
    /// Once reached, the budget refuses every such record until a compaction has brought
    /// the log a reserve's worth under its limit ([`Self::compacted`]): a log hovering at
    /// the limit would otherwise take and refuse registrations by turns, and log each turn.
    pub(crate) fn admit(&self, unflushed: u64, record: u64) -> Result<(), TimerError> {
        if self.limit == 0 {
            return Ok(());
        }
        let projected = self.projected() + unflushed * self.weight();
        if !self.is_reached() && projected + record * self.weight() <= self.log_limit() {
            return Ok(());
        }
        self.metrics.budgets.refused(Refusal::Disk);
        self.reach(projected);
        Err(TimerError::ResourceExhausted(format!(
            "disk budget reached: the log holds {} and may hold {} (half of --max-disk {}, \
             the other half kept for compaction); registrations resume once compaction \
             brings it under {}: cancel timers to free space, or raise --max-disk",
            ByteCount(projected),
            ByteCount(self.log_limit()),
            ByteCount(self.limit),
            ByteCount(self.resume_below()),
        )))
    }

    /// Where a reached budget lifts: a reserve's worth under the log's limit.
    fn resume_below(&self) -> u64 {
        self.log_limit().saturating_sub(self.reserve())
    }

    /// Marks the budget reached, logging it the first time (until a compaction lifts it).
    fn reach(&self, used: u64) {
        if !self.reached.swap(true, Ordering::Relaxed) {
            warn!(
                used,
                limit = self.log_limit(),
                budget = self.limit,
                "disk budget reached: refusing registrations until compaction frees space"
            );
        }
    }

    /// Counts bytes handed to the store thread (any append, from any thread).
    pub(crate) fn queued(&self, bytes: u64) {
        self.queued.fetch_add(bytes, Ordering::SeqCst);
    }

    /// The store thread wrote `bytes` of queued appends; `on_disk`, `snapshot_in_progress`:
    /// see [`Self::set_on_disk`].
    pub(crate) fn written(&self, bytes: u64, on_disk: u64, snapshot_in_progress: u64) {
        self.set_on_disk(on_disk, snapshot_in_progress);
        // After the log grew (see `projected`). Saturating: a store that failed drops what
        // it held, and what was queued before a restart of the count is not owed.
        let _ = self
            .queued
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |queued| {
                Some(queued.saturating_sub(bytes))
            });
    }

    /// The store thread's count of the directory: `on_disk` bytes in all, of which
    /// `snapshot_in_progress` belong to a snapshot not yet sealed.
    pub(crate) fn set_on_disk(&self, on_disk: u64, snapshot_in_progress: u64) {
        let log_bytes = on_disk.saturating_sub(snapshot_in_progress);
        // Only the store thread calls this, so a snapshot's start and end are seen in order.
        let snapshot_start = self.log_bytes_at_snapshot_start.load(Ordering::SeqCst);
        match (snapshot_in_progress > 0, snapshot_start == NO_SNAPSHOT) {
            (true, true) => self
                .log_bytes_at_snapshot_start
                .store(self.log_bytes.load(Ordering::SeqCst), Ordering::SeqCst),
            (false, false) => self
                .log_bytes_at_snapshot_start
                .store(NO_SNAPSHOT, Ordering::SeqCst),
            _ => {}
        }
        self.log_bytes.store(log_bytes, Ordering::SeqCst);
        self.metrics
            .budgets
            .disk_used
            .set(i64::try_from(on_disk).unwrap_or(i64::MAX));
        // Past the limit without a refusal: a directory that was already this large at
        // start-up (the budget was lowered), or records that are never refused. Either way
        // registrations are refused from now on, and compaction is looked at early.
        if self.limit > 0 && log_bytes > self.log_limit() {
            self.reach(log_bytes);
        }
    }

    /// After a compaction: lifts the refusal if the log is back a reserve's worth under its
    /// limit.
    pub(crate) fn compacted(&self) {
        if self.is_reached() && self.projected() <= self.resume_below() {
            self.reached.store(false, Ordering::Relaxed);
            info!(
                used = self.projected(),
                limit = self.log_limit(),
                budget = self.limit,
                "disk budget no longer reached: accepting registrations again"
            );
        }
    }

    /// Whether the worker should start a compaction now, on top of its usual threshold.
    /// `since_snapshot`: bytes logged since the last snapshot began; `removed`: timers
    /// removed (cancelled, fired for good) since then; `last_snapshot_timers`: how many
    /// timers the last snapshot held (0 if none was written since the start).
    pub(crate) fn wants_compaction(
        &self,
        since_snapshot: u64,
        removed: u64,
        last_snapshot_timers: u64,
    ) -> bool {
        if self.limit == 0 {
            return false;
        }
        // Near the limit (or past it) is where compacting early pays.
        let near = self.is_reached() || self.projected() >= self.log_limit() / 4 * 3;
        // An eighth of the log's limit (a reserve's worth) written since the last snapshot:
        // history piling up (timers registered and cancelled) is cleared before it
        // refuses anyone, and the records that are never refused cannot outgrow the
        // reserve before a compaction starts.
        let piling_up = since_snapshot >= self.reserve();
        // A sixteenth of the timers removed since: the rewrite frees enough to be worth it,
        // which is how cancelling lifts a refusal.
        let worth_it = removed > 0 && removed.saturating_mul(16) >= last_snapshot_timers;
        near && (piling_up || worth_it)
    }
}

/// Bytes of every file in the data directory (segments, snapshots, and whatever else an
/// operator left there: it takes the same disk).
pub(super) fn directory_bytes(disk: &dyn Disk, dir: &Path) -> Result<u64, StoreError> {
    let files = disk.list(dir).map_err(io_error(dir))?;
    Ok(files.iter().map(|(_, length)| length).sum())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::store::records::{self, record::Kind, Record};
    use crate::local::store::{frame, Batch, Store, StoreHandle, SyncMode};

    const MIB: u64 = 1 << 20;

    fn budget(limit: u64) -> Arc<DiskBudget> {
        DiskBudget::new(limit, Metrics::new())
    }

    fn registered(id: u64) -> Record {
        Record {
            kind: Some(Kind::Registered(records::Timer {
                id,
                namespace: "disk".into(),
                key: format!("key-{id}"),
                payload: vec![7; 1024].into(),
                ..Default::default()
            })),
        }
    }

    /// Waits until everything appended before is durable.
    fn durable(handle: &StoreHandle) {
        crate::local::store::watermark::block_until_passed(handle, |marks| marks.durable);
    }

    /// The store's count, as the gauge shows it, against the files themselves: after
    /// appends, and after a snapshot replaced the files before it.
    #[test]
    fn the_store_counts_the_directory_as_it_writes_and_compacts() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Metrics::new();
        let (store, handle, _) = Store::open(
            dir.path(),
            SyncMode::Always,
            metrics.clone(),
            64 * MIB,
            |_| {},
        )
        .unwrap();
        let used = || metrics.budgets.disk_used.get() as u64;
        let on_disk = || directory_bytes(&super::super::disk::RealDisk, dir.path()).unwrap();
        assert_eq!(metrics.budgets.disk_budget.get() as u64, 64 * MIB);
        assert_eq!(used(), on_disk());
        for id in 1..=100 {
            let mut batch = Batch::default();
            batch.record(&registered(id));
            handle.append(batch);
        }
        durable(&handle);
        let before = used();
        assert_eq!(before, on_disk());
        assert!(before > 100 * 1024, "{before}");
        // Everything queued is written: the log's count is the directory's.
        assert_eq!(handle.disk_budget().projected(), before);

        handle.begin_snapshot();
        let mut chunk = Batch::default();
        for id in 1..=10 {
            chunk.record(&registered(id));
        }
        handle.snapshot_chunk(chunk.into_frames());
        handle.end_snapshot();
        durable(&handle);
        // The snapshot seals on its own thread; a store that stops waits for that seal
        // and counts what it gave back.
        drop(handle);
        store.join();
        let after = used();
        assert_eq!(after, on_disk());
        assert!(after < before / 5, "{after} of {before}");
    }

    #[test]
    fn no_budget_admits_everything_and_never_compacts_early() {
        let budget = budget(0);
        budget.set_on_disk(u64::MAX / 2, 0);
        assert_eq!(budget.admit(u64::MAX / 4, 1 << 20), Ok(()));
        assert!(!budget.wants_compaction(u64::MAX / 2, 1_000, 0));
    }

    #[test]
    fn registrations_fit_in_half_the_budget_counting_queued_and_unflushed_bytes() {
        let budget = budget(64 * MIB);
        budget.set_on_disk(30 * MIB, 0);
        assert_eq!(budget.admit(0, MIB), Ok(()));
        // Queued appends count before the store has written them...
        budget.queued(MIB);
        assert_eq!(budget.admit(0, MIB), Ok(()));
        // ...and so does what the worker has not appended yet: 30 + 1 + 1 + 1 > 32.
        let refused = budget.admit(MIB, MIB).unwrap_err();
        let TimerError::ResourceExhausted(message) = refused else {
            panic!("{refused:?}");
        };
        assert!(message.contains("disk budget"), "{message}");
        assert!(message.contains("--max-disk 64.0 MiB"), "{message}");
        assert!(budget.is_reached());
        // Reached, it refuses even what would fit, until a compaction lifts it.
        assert!(budget.admit(0, 1).is_err());
    }

    #[test]
    fn written_bytes_move_from_the_queue_to_the_log() {
        let budget = budget(64 * MIB);
        budget.queued(2 * MIB);
        budget.written(2 * MIB, 31 * MIB, 0);
        // 31 on disk, nothing queued: a 1 MiB record fits exactly, one byte more does not.
        assert_eq!(budget.admit(0, MIB), Ok(()));
        assert!(budget.admit(0, MIB + 1).is_err());
        assert_eq!(budget.metrics.budgets.disk_used.get(), (31 * MIB) as i64);
    }

    /// A snapshot being written is the room kept for compaction, not the log's; what is
    /// logged, queued or admitted while it is written counts twice, as the sealed snapshot
    /// may hold it too (the module doc).
    #[test]
    fn during_a_snapshot_what_the_log_takes_counts_twice() {
        let budget = budget(64 * MIB);
        budget.set_on_disk(20 * MIB, 0);
        // The snapshot begins: 8 MiB of it written, the log still 20 MiB.
        budget.set_on_disk(28 * MIB, 8 * MIB);
        assert_eq!(budget.projected(), 20 * MIB);
        // 2 MiB logged since it began and 1 MiB queued: 20 + 2 + 1, and 2 + 1 again.
        budget.set_on_disk(40 * MIB, 18 * MIB);
        budget.queued(MIB);
        assert_eq!(budget.projected(), 26 * MIB);
        // 26 + 2 × (1 unflushed + 2) is exactly the limit; one byte more is past it.
        assert_eq!(budget.admit(MIB, 2 * MIB), Ok(()));
        assert!(budget.admit(MIB, 2 * MIB + 1).is_err());
        // Sealed and reaped: the log is what is on disk, each byte once.
        budget.written(MIB, 25 * MIB, 0);
        assert_eq!(budget.projected(), 25 * MIB);
        assert_eq!(budget.metrics.budgets.disk_used.get(), (25 * MIB) as i64);
    }

    /// The bound the module promises, by arithmetic on the worst case: a registration
    /// admitted at every chance while a snapshot of everything the log holds is written,
    /// each registration also landing in that snapshot. After the seal the log is within
    /// its limit, and at no point is the directory past the budget.
    #[test]
    fn registrations_during_a_compaction_keep_the_directory_within_the_budget() {
        let budget = budget(16 * MIB);
        let record = 64 * 1024 + 300;
        let old_log = 6 * MIB;
        budget.set_on_disk(old_log, 0);
        let mut snapshot = frame::FILE_HEADER.len() as u64;
        let mut new_segment = frame::FILE_HEADER.len() as u64;
        budget.set_on_disk(old_log + new_segment + snapshot, snapshot);
        // The snapshot holds every timer of the old log, and each one registered meanwhile.
        snapshot += old_log;
        let mut largest = 0;
        while budget.admit(0, record).is_ok() {
            budget.queued(record);
            new_segment += record;
            snapshot += record;
            let on_disk = old_log + new_segment + snapshot;
            budget.written(record, on_disk, snapshot);
            largest = largest.max(on_disk);
        }
        assert!(largest <= 16 * MIB, "{largest}");
        // Sealed, the files it replaces gone: the log is the snapshot and the new segment.
        let log_after_seal = snapshot + new_segment;
        budget.set_on_disk(log_after_seal, 0);
        assert!(log_after_seal <= budget.log_limit(), "{log_after_seal}");
        // So the next compaction's snapshot (at most the log) beside it stays within.
        assert!(2 * log_after_seal <= 16 * MIB);
    }

    #[test]
    fn a_directory_past_the_limit_counts_as_reached_without_a_refusal() {
        let budget = budget(64 * MIB);
        budget.set_on_disk(32 * MIB, 0);
        assert!(!budget.is_reached());
        // A snapshot being written is not the log's.
        budget.set_on_disk(40 * MIB, 10 * MIB);
        assert!(!budget.is_reached());
        budget.set_on_disk(32 * MIB + 1, 0);
        assert!(budget.is_reached());
        assert!(budget.admit(0, 1).is_err());
    }

    #[test]
    fn a_compaction_that_frees_space_lifts_the_refusal() {
        let budget = budget(64 * MIB);
        budget.set_on_disk(32 * MIB, 0);
        assert!(budget.admit(0, 1).is_err());
        // Nothing freed yet: still reached.
        budget.compacted();
        assert!(budget.is_reached());
        // Under the limit, but by less than the reserve (4 MiB): still reached, refusing.
        budget.set_on_disk(29 * MIB, 0);
        budget.compacted();
        assert!(budget.is_reached());
        assert!(budget.admit(0, 1).is_err());
        budget.set_on_disk(28 * MIB, 0);
        budget.compacted();
        assert!(!budget.is_reached());
        assert_eq!(budget.admit(0, MIB), Ok(()));
    }

    /// What a refusal holds back (until a compaction brings the log a reserve's worth
    /// under its limit) is not carried over a restart: the same directory counted anew
    /// takes a record that fits.
    #[test]
    fn a_restart_counts_the_directory_not_the_refusal_before_it() {
        let before = budget(64 * MIB);
        before.set_on_disk(32 * MIB - MIB / 2, 0);
        assert!(before.admit(0, MIB).is_err());
        // A compaction gives back a megabyte, less than the reserve: still refusing.
        before.set_on_disk(30 * MIB, 0);
        before.compacted();
        assert!(before.admit(0, MIB).is_err());
        // The directory of 30 MiB counted at start-up: 30 + 2 fits, one byte more does not.
        let after = budget(64 * MIB);
        after.set_on_disk(30 * MIB, 0);
        assert!(!after.is_reached());
        assert_eq!(after.admit(0, 2 * MIB), Ok(()));
        assert!(after.admit(0, 2 * MIB + 1).is_err());
    }

    #[test]
    fn compaction_starts_early_when_reached_and_worth_it() {
        let budget = budget(64 * MIB);
        budget.set_on_disk(20 * MIB, 0);
        // Far from the limit: only the usual threshold applies.
        assert!(!budget.wants_compaction(16 * MIB, 1_000, 0));
        // Near it: with a reserve's worth of the log new since the last snapshot, or a
        // sixteenth of the timers removed.
        budget.set_on_disk(25 * MIB, 0);
        assert!(!budget.wants_compaction(MIB, 0, 0));
        assert!(budget.wants_compaction(4 * MIB, 0, 0));
        assert!(!budget.wants_compaction(MIB, 31, 500));
        assert!(budget.wants_compaction(MIB, 32, 500));
        // Reached: a sixteenth of the timers removed, or a reserve's worth written.
        budget.set_on_disk(32 * MIB, 0);
        assert!(budget.admit(0, MIB).is_err());
        assert!(!budget.wants_compaction(0, 0, 500));
        assert!(!budget.wants_compaction(1_000, 31, 500));
        assert!(budget.wants_compaction(1_000, 32, 500));
        assert!(budget.wants_compaction(1_000, 1, 0));
        assert!(!budget.wants_compaction(2 * MIB, 0, 500));
        assert!(budget.wants_compaction(budget.reserve(), 0, 500));
    }
}
