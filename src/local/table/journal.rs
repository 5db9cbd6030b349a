//! The worker's side of durability: the records each batch of commands produced, appended
//! with the batch's replies held until the store has made them durable
//! ([`super::durable_replies`]), and the fuzzy snapshot
//! streamed a chunk at a time between batches. It also asks the disk budget
//! ([`crate::local::store::disk_budget`]) before the table applies what would grow the log, and
//! starts compactions early when that budget needs the space.

use std::sync::Arc;

use super::durable_replies::{DeferredReply, DurableReplies, ReplyReleaser};
use crate::budget::MemoryBudget;
use crate::domain::TimerError;
use crate::local::store::disk_budget;
use crate::local::store::frame::TimerFields;
use crate::local::store::records::{record::Kind, Record};
use crate::local::store::{Batch, StoreHandle};

/// Timers written per snapshot chunk: small enough that the worker never pauses long
/// (about a tenth of a millisecond here), so that firing is not held back behind it.
pub(crate) const SNAPSHOT_CHUNK_TIMERS: usize = 1_024;
/// A snapshot chunk also ends once its timers' keys and payloads reach this many bytes.
pub(crate) const SNAPSHOT_CHUNK_BYTES: usize = 256 << 10;
/// The worker writes one snapshot chunk per this many nanoseconds at most: a snapshot
/// goes at up to a million timers a second, taking about a tenth of the worker's time and
/// of the disk's, instead of all of both. Written as fast as possible, a snapshot of a
/// million timers took 200 ms of the worker and the disk; firings and the log's fsyncs
/// queued behind it came 10 to 25 ms late. Paced, the log grows by what is written in the
/// meantime, which the next snapshot's threshold absorbs.
pub(crate) const SNAPSHOT_CHUNK_INTERVAL_NANOS: u64 = 1_000_000;
/// Rounds in a row a due chunk may wait for one that hands no expirations over: a worker
/// that fires something in every round (deadlines already past, rounds longer than a
/// tick) must still finish its snapshot.
pub(crate) const MAX_CHUNK_DEFERRALS: u32 = 4;
/// Snapshot bytes queued for the store thread at most (see `snapshot_backlogged`).
const SNAPSHOT_BACKLOG_BYTES: usize = 4 << 20;

pub(crate) struct Journal {
    store: StoreHandle,
    batch: Batch,
    /// The batch's replies, held once it is appended until it is durable.
    replies: Vec<DeferredReply>,
    durable_replies: DurableReplies,
    bytes_since_snapshot: usize,
    snapshot_after_bytes: usize,
    /// The size of the last snapshot written, and of the one being written.
    last_snapshot_bytes: usize,
    current_snapshot_bytes: usize,
    /// Some while a snapshot is being streamed: the storage position its next chunk starts
    /// at (see [`crate::wheel::Wheel::positions_from`]).
    snapshot_cursor: Option<u32>,
    /// The monotonic time before which the next chunk waits (see
    /// [`SNAPSHOT_CHUNK_INTERVAL_NANOS`]).
    next_chunk_at: u64,
    /// Rounds the chunk due has waited so far (see [`MAX_CHUNK_DEFERRALS`]).
    chunk_deferrals: u32,
    /// Timers removed (cancelled, fired for good) since the last snapshot began, and the
    /// timers the last snapshot held and the one being written holds: whether compacting
    /// early frees enough to be worth it (see [`disk_budget::DiskBudget::wants_compaction`]).
    removed_since_snapshot: u64,
    last_snapshot_timers: u64,
    current_snapshot_timers: u64,
    /// What the batches sent and not yet written are charged to (the table's budget).
    memory: Arc<MemoryBudget>,
}

impl Journal {
    /// `last_snapshot_bytes`: the size of the snapshot the store recovered from, if any.
    /// Returns the journal and the releaser its replies wait in, to be run beside it (see
    /// [`ReplyReleaser::run`]).
    pub(crate) fn new(
        store: StoreHandle,
        snapshot_after_bytes: usize,
        last_snapshot_bytes: usize,
    ) -> (Self, ReplyReleaser) {
        let (durable_replies, releaser) = DurableReplies::new(store.marks());
        let journal = Self {
            store,
            batch: Batch::default(),
            replies: Vec::new(),
            durable_replies,
            bytes_since_snapshot: 0,
            snapshot_after_bytes,
            last_snapshot_bytes,
            current_snapshot_bytes: 0,
            snapshot_cursor: None,
            next_chunk_at: 0,
            chunk_deferrals: 0,
            removed_since_snapshot: 0,
            last_snapshot_timers: 0,
            current_snapshot_timers: 0,
            memory: MemoryBudget::unlimited(),
        };
        (journal, releaser)
    }

    /// Charges the batches in flight to `memory` (see [`Batch::hold`]).
    pub(crate) fn charge_to(&mut self, memory: Arc<MemoryBudget>) {
        self.memory = memory;
    }

    /// Refuses (RESOURCE_EXHAUSTED) a record that would grow the log past the disk budget:
    /// a timer's whole record with a namespace, key and payload of these lengths. Asked
    /// before the table changes anything; records that shrink what is held are not asked.
    pub(crate) fn admit(
        &self,
        namespace: usize,
        key: usize,
        payload: usize,
    ) -> Result<(), TimerError> {
        let record = disk_budget::record_bound(namespace, key, payload);
        self.store
            .disk_budget()
            .admit(self.batch.encoded_bytes() as u64, record)
    }

    pub(crate) fn record(&mut self, kind: Kind) {
        if matches!(kind, Kind::Cancelled(_)) {
            self.removed_since_snapshot += 1;
        }
        self.batch.record(&Record { kind: Some(kind) });
    }

    pub(crate) fn record_registered(&mut self, timer: &TimerFields<'_>) {
        self.batch.record_registered(timer);
    }

    pub(crate) fn record_fired(
        &mut self,
        timer: &TimerFields<'_>,
        fired_unix: u64,
        rearmed_deadline_unix: u64,
    ) {
        if rearmed_deadline_unix == 0 {
            self.removed_since_snapshot += 1;
        }
        self.batch
            .record_fired(timer, fired_unix, rearmed_deadline_unix);
    }

    /// Sends `reply` once the batch being built is durable.
    pub(crate) fn reply_when_durable(&mut self, reply: DeferredReply) {
        self.replies.push(reply);
    }

    /// Hands the batch to the store, its replies to wait for it, and returns its number.
    /// A batch that changed nothing is not appended, and waits for the last batch appended
    /// instead: its answers (say, "that key already exists") must not overtake the records
    /// of earlier batches still waiting for their fsync.
    pub(crate) fn flush(&mut self) -> u64 {
        let number = if self.batch.is_empty() {
            self.store.last_appended()
        } else {
            let next = Batch::with_frames(self.store.frame_buffer());
            let mut batch = std::mem::replace(&mut self.batch, next);
            batch.hold(&self.memory);
            self.bytes_since_snapshot += batch.encoded_bytes();
            self.store.append(batch)
        };
        self.durable_replies
            .hold(number, std::mem::take(&mut self.replies));
        number
    }

    /// Live timers the snapshot in progress (or the last one) has written so far.
    #[cfg(test)]
    pub(crate) fn snapshot_timers_written(&self) -> u64 {
        self.current_snapshot_timers
    }

    pub(crate) fn snapshot_in_progress(&self) -> bool {
        self.snapshot_cursor.is_some()
    }

    /// Starts a snapshot once the log has grown past the threshold since the last one: the
    /// configured size, or the last snapshot's size if that is larger. Scaling with the
    /// live set bounds what snapshots cost to about one byte written per byte logged, and
    /// disk use to about twice the live set plus the threshold (three times at the peak,
    /// while a new snapshot is written before the old files go), however many timers are
    /// pending; a fixed threshold would rewrite a large live set over and over. After the
    /// live set shrinks, one snapshot at the old size brings the threshold back down.
    pub(crate) fn maybe_begin_snapshot(&mut self, next_id: u64) {
        let threshold = self.snapshot_after_bytes.max(self.last_snapshot_bytes);
        let for_disk_budget = || {
            self.store.disk_budget().wants_compaction(
                self.bytes_since_snapshot as u64,
                self.removed_since_snapshot,
                self.last_snapshot_timers,
            )
        };
        // The last snapshot's seal must be over, the files it replaces gone (see
        // `StoreHandle::is_compacting`): a batch after that starts the next one.
        if self.snapshot_in_progress()
            || self.store.is_compacting()
            || (self.bytes_since_snapshot < threshold && !for_disk_budget())
        {
            return;
        }
        self.flush();
        self.store.begin_snapshot();
        let mut chunk = Batch::default();
        chunk.record(&Record {
            kind: Some(Kind::NextId(next_id)),
        });
        self.store.snapshot_chunk(chunk.into_frames());
        self.bytes_since_snapshot = 0;
        self.current_snapshot_bytes = 0;
        self.removed_since_snapshot = 0;
        self.current_snapshot_timers = 0;
        self.snapshot_cursor = Some(0);
        self.next_chunk_at = 0;
        self.chunk_deferrals = 0;
    }

    /// Makes the next batch's end start a snapshot, as if the log had grown past the
    /// threshold (the simulation's way to compact at a step it chooses). A snapshot in
    /// progress, or one still compacting, is left to finish first, as always.
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn ask_for_snapshot(&mut self) {
        let threshold = self.snapshot_after_bytes.max(self.last_snapshot_bytes);
        self.bytes_since_snapshot = self.bytes_since_snapshot.max(threshold);
    }

    /// Where the next snapshot chunk starts, if a snapshot is in progress and the chunk is
    /// due at `now` (monotonic nanoseconds).
    pub(crate) fn snapshot_cursor(&self, now: u64) -> Option<u32> {
        self.snapshot_cursor.filter(|_| now >= self.next_chunk_at)
    }

    /// When the worker should wake for the next snapshot chunk, if one is in progress.
    pub(crate) fn next_chunk_at(&self) -> Option<u64> {
        self.snapshot_cursor.map(|_| self.next_chunk_at)
    }

    /// Whether the chunk due may wait for the next round: true, counted, until it has
    /// waited [`MAX_CHUNK_DEFERRALS`] rounds.
    pub(crate) fn defer_chunk(&mut self) -> bool {
        let defer = self.chunk_deferrals < MAX_CHUNK_DEFERRALS;
        self.chunk_deferrals += u32::from(defer);
        defer
    }

    /// Whether the next snapshot chunk should wait: the chunks sent already hold
    /// [`SNAPSHOT_BACKLOG_BYTES`] or more, unwritten. A snapshot then goes at the disk's
    /// pace, and holds at most that much of the live set twice.
    pub(crate) fn snapshot_backlogged(&self) -> bool {
        self.store.snapshot_backlog() >= SNAPSHOT_BACKLOG_BYTES
    }

    /// Writes one chunk of live timers at `now`; `resume_at` is where the next one starts
    /// (None when this was the last).
    pub(crate) fn write_snapshot_chunk(
        &mut self,
        timers: Vec<TimerFields<'_>>,
        resume_at: Option<u32>,
        now: u64,
    ) {
        self.next_chunk_at = now.saturating_add(SNAPSHOT_CHUNK_INTERVAL_NANOS);
        self.chunk_deferrals = 0;
        let mut chunk = Batch::default();
        for timer in &timers {
            chunk.record_registered(timer);
        }
        let frames = chunk.into_frames();
        self.current_snapshot_bytes += frames.len();
        self.current_snapshot_timers += timers.len() as u64;
        self.store.snapshot_chunk(frames);
        match resume_at {
            Some(position) => self.snapshot_cursor = Some(position),
            None => {
                self.store.end_snapshot();
                self.snapshot_cursor = None;
                self.last_snapshot_bytes = self.current_snapshot_bytes;
                self.last_snapshot_timers = self.current_snapshot_timers;
            }
        }
    }
}
