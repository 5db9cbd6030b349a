//! `tickd-bench core`: the wheel worker on the workload of `shared/peers/netty/run`, so the
//! two print comparable lines.
//!
//! N timers with seeded uniform random delays in [0, D] are sent from one thread into the
//! worker thread through its command channel (the path every RPC takes), each recording on
//! firing how late it was; then N one-hour timers are inserted and all cancelled, timing
//! insert and cancel alone, on the same worker thread. A warm-up round runs first.
//! bytes_per_timer is the growth of live heap bytes (counted by the allocator) while the N
//! random timers are inserted into a fresh wheel, so that the growth is real.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use tickd::clock::{Clock, Now, SystemClock};
use tickd::wheel::{Handle, Wheel};
use tickd::worker::{TimerState, Worker, WorkerConfig, WorkerHandle};

use crate::allocator;

#[derive(Debug, clap::Args)]
pub(crate) struct CoreArgs {
    #[arg(long, default_value_t = 1_000_000)]
    timers: usize,
    #[arg(long, default_value_t = 2_000)]
    max_delay_ms: u64,
    #[arg(long, default_value_t = 1)]
    tick_ms: u64,
}

enum BenchCommand {
    Insert {
        index: u32,
        deadline: u64,
    },
    Cancel {
        index: u32,
    },
    /// Answers once every command sent before it has been applied. Boxed so that a command
    /// is 16 bytes, like the Netty benchmark's closure capturing an index.
    Sync(Box<mpsc::Sender<()>>),
}

/// The benchmark's worker state: a bare wheel whose value is the timer's index, like the
/// Netty benchmark's closure capturing `idx`.
struct BenchTimers {
    wheel: Wheel<u32>,
    handles: Vec<Handle>,
}

impl TimerState for BenchTimers {
    type Command = BenchCommand;
    type Fired = (u32, u64);

    fn apply(&mut self, command: BenchCommand, _now: Now) {
        match command {
            BenchCommand::Insert { index, deadline } => {
                self.handles[index as usize] =
                    self.wheel.insert(deadline, index).expect("no limit");
            }
            BenchCommand::Cancel { index } => {
                self.wheel.cancel(self.handles[index as usize]);
            }
            BenchCommand::Sync(done) => {
                let _ = done.send(());
            }
        }
    }

    fn fire_due(&mut self, now: Now, fired: &mut Vec<(u32, u64)>) {
        let mut expired = Vec::new();
        self.wheel.advance(now.monotonic, &mut expired);
        fired.extend(
            expired
                .into_iter()
                .map(|entry| (entry.value, entry.deadline)),
        );
    }

    fn next_expiration(&self) -> Option<u64> {
        self.wheel.next_wakeup()
    }
}

struct Round {
    insert_per_s: f64,
    cancel_per_s: f64,
    bytes_per_timer: f64,
    lateness_ms: Vec<f64>,
}

pub(crate) fn run(args: CoreArgs) {
    round(&args);
    let measured = round(&args);
    let percentile = |fraction: f64| {
        let index = ((measured.lateness_ms.len() as f64 * fraction) as usize)
            .min(measured.lateness_ms.len() - 1);
        measured.lateness_ms[index]
    };
    println!(
        "core insert_per_s={:.0} cancel_per_s={:.0} bytes_per_timer={:.1} p50_late_ms={:.3} p99_late_ms={:.3} max_late_ms={:.3}",
        measured.insert_per_s,
        measured.cancel_per_s,
        measured.bytes_per_timer,
        percentile(0.5),
        percentile(0.99),
        measured.lateness_ms.last().copied().unwrap_or(0.0),
    );
}

fn round(args: &CoreArgs) -> Round {
    let count = args.timers;
    let clock = SystemClock::new();
    let delays = seeded_delays(count, args.max_delay_ms * 1_000_000);
    let (lateness_sender, lateness_receiver) = mpsc::channel();
    // Filled with a non-zero value so that every page is touched here, not (page fault by
    // page fault) on the worker thread while it is firing timers.
    let mut lateness_ns = vec![u64::MAX; count];
    let mut fired = 0usize;
    let sink = move |batch: Vec<(u32, u64)>| {
        for (index, deadline) in batch {
            lateness_ns[index as usize] = clock.monotonic().saturating_sub(deadline);
            fired += 1;
            if fired == count {
                let _ = lateness_sender.send(std::mem::take(&mut lateness_ns));
            }
        }
    };
    // One worker serves both phases, as one serves the service: a fresh thread for the
    // second phase could start out sharing a core with the sender.
    let state = BenchTimers {
        wheel: Wheel::new(args.tick_ms * 1_000_000, usize::MAX),
        handles: vec![Handle::from_u64(u64::MAX); count],
    };
    let worker = Worker::spawn(state, clock, WorkerConfig::default(), sink).expect("spawn worker");
    let commands = worker.handle();

    let live_before = allocator::live_bytes();
    for (index, delay) in delays.iter().enumerate() {
        let deadline = clock.monotonic() + delay;
        let index = index as u32;
        commands
            .send(BenchCommand::Insert { index, deadline })
            .expect("worker alive");
    }
    sync(&commands);
    let bytes_per_timer = allocator::live_bytes().saturating_sub(live_before) as f64 / count as f64;
    let lateness = lateness_receiver.recv().expect("every timer fires");
    let mut lateness_ms: Vec<f64> = lateness.iter().map(|&ns| ns as f64 / 1e6).collect();
    lateness_ms.sort_by(f64::total_cmp);

    let hour = Duration::from_secs(3600).as_nanos() as u64;
    let inserting = Instant::now();
    for index in 0..count as u32 {
        let deadline = clock.monotonic() + hour;
        commands
            .send(BenchCommand::Insert { index, deadline })
            .expect("worker alive");
    }
    let inserted = inserting.elapsed();
    sync(&commands);
    let cancelling = Instant::now();
    for index in 0..count as u32 {
        commands
            .send(BenchCommand::Cancel { index })
            .expect("worker alive");
    }
    let cancelled = cancelling.elapsed();
    sync(&commands);
    let state = worker.stop();
    assert!(state.wheel.is_empty(), "every one-hour timer was cancelled");
    Round {
        insert_per_s: count as f64 / inserted.as_secs_f64(),
        cancel_per_s: count as f64 / cancelled.as_secs_f64(),
        bytes_per_timer,
        lateness_ms,
    }
}

fn sync(commands: &WorkerHandle<BenchCommand>) {
    let (done, wait) = mpsc::channel();
    commands
        .send(BenchCommand::Sync(Box::new(done)))
        .expect("worker alive");
    wait.recv().expect("worker answers");
}

/// Uniform delays in [0, max], from a fixed seed so every run schedules the same timers.
fn seeded_delays(count: usize, max: u64) -> Vec<u64> {
    let mut state = 42u64;
    (0..count)
        .map(|_| {
            // splitmix64: tiny, fast, and good enough for spreading benchmark delays.
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut mixed = state;
            mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            mixed ^= mixed >> 31;
            ((mixed >> 11) as f64 / (1u64 << 53) as f64 * max as f64) as u64
        })
        .collect()
}
