//! A batch of records appended together (group commit): the unit the worker's journal and
//! the delivery task hand the store thread. Fired and attempted
//! records keep a copy of their frame, which the store writes again into snapshots until
//! the expiration is settled.

use std::sync::Arc;

use super::frame;
use super::records::{record::Kind, Record};
use crate::budget::{MemoryBudget, MemoryReservation};

/// Records to append together.
#[derive(Default)]
pub struct Batch {
    pub(super) frames: Vec<u8>,
    /// Fired expirations in this batch, by (timer id, fired count), with their frame.
    pub(super) fired: Vec<((u64, u64), Vec<u8>)>,
    pub(super) settled: Vec<(u64, u64)>,
    /// Attempts recorded in this batch, by (timer id, fired count), with their frame.
    pub(super) attempted: Vec<((u64, u64), Vec<u8>)>,
    /// A boot recorded in this batch: its frame, which every later snapshot carries.
    pub(super) boot: Option<Vec<u8>>,
    /// What this batch's attempts mean leaves as soon as it is written, before any fsync
    /// (see [`Batch::leaves_once_written`]).
    pub(super) leaves_once_written: bool,
    /// The memory budget's hold on these frames (see [`Batch::hold`]), given back once they
    /// are written.
    pub(super) held: Vec<MemoryReservation>,
}

impl Batch {
    /// An empty batch that writes its frames into `frames` (emptied first).
    pub(crate) fn with_frames(mut frames: Vec<u8>) -> Self {
        frames.clear();
        Self {
            frames,
            ..Self::default()
        }
    }

    pub fn record(&mut self, record: &Record) {
        match &record.kind {
            Some(Kind::Fired(fired)) => {
                let mut frame = Vec::new();
                frame::encode(record, &mut frame);
                let timer = fired.timer.as_ref();
                let key = timer.map_or((0, 0), |timer| (timer.id, timer.fired_count));
                self.push_fired(key, frame);
            }
            Some(Kind::Settled(settled)) => {
                frame::encode(record, &mut self.frames);
                self.settled.push((settled.id, settled.fired_count));
            }
            Some(Kind::Attempted(attempted)) => {
                let frame = self.encode_kept(record);
                let key = (attempted.id, attempted.fired_count);
                self.attempted.push((key, frame));
            }
            Some(Kind::Boot(_)) => self.boot = Some(self.encode_kept(record)),
            _ => frame::encode(record, &mut self.frames),
        }
    }

    /// Appends a record's frame and returns a copy of it, for the store to keep.
    fn encode_kept(&mut self, record: &Record) -> Vec<u8> {
        let mut frame = Vec::new();
        frame::encode(record, &mut frame);
        self.frames.extend_from_slice(&frame);
        frame
    }

    /// Same as recording `Kind::Registered`, encoded straight from borrowed fields.
    pub(crate) fn record_registered(&mut self, timer: &frame::TimerFields<'_>) {
        frame::encode_registered(timer, &mut self.frames);
    }

    /// Same as recording `Kind::Fired`, encoded straight from borrowed fields.
    pub(crate) fn record_fired(
        &mut self,
        timer: &frame::TimerFields<'_>,
        fired_unix: u64,
        rearmed_deadline_unix: u64,
    ) {
        let mut frame = Vec::new();
        frame::encode_fired(timer, fired_unix, rearmed_deadline_unix, &mut frame);
        self.push_fired((timer.id, timer.fired_count), frame);
    }

    /// Appends a fired record's frame, keeping a copy by (timer id, fired count) so the
    /// store can write it again into snapshots until the expiration is settled.
    fn push_fired(&mut self, key: (u64, u64), frame: Vec<u8>) {
        self.frames.extend_from_slice(&frame);
        self.fired.push((key, frame));
    }

    /// Says that deliveries leave (or a refund is promised) once this batch's frames are
    /// written to the OS, without
    /// waiting for the fsync `--sync always` makes after (the written mark, see
    /// [`super::watermark::Watermark::written`]): a crash of the process then keeps their
    /// attempts (the kernel has them), a crash of the machine may not. For records that
    /// only count, where waiting for the disk would delay every delivery. Should the fsync
    /// after fail, the store keeps these attempts when it cuts the log back (see
    /// `Writer::stop_on_error`).
    pub(crate) fn leaves_once_written(&mut self) {
        self.leaves_once_written = true;
    }

    /// Charges the frames to the memory budget until they are written: the log's buffers in
    /// flight count with what tickd holds, so that many large registrations waiting for one
    /// fsync are refused at the budget rather than piling up past it.
    pub(crate) fn hold(&mut self, memory: &Arc<MemoryBudget>) {
        // Their length, not the buffer's capacity: a reused buffer keeps the capacity of
        // an earlier, larger batch (a few megabytes at most, see `frame_buffers`).
        let bytes = self.frames.len() as u64;
        self.held.push(MemoryReservation::forced(memory, bytes));
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    pub(crate) fn encoded_bytes(&self) -> usize {
        self.frames.len()
    }

    /// The encoded frames alone (for a snapshot chunk).
    pub(crate) fn into_frames(self) -> Vec<u8> {
        self.frames
    }
}
