//! `tickd-bench cron`: cron timers against plain timers on the worker thread, in one run.
//!
//! Each variant gets a fresh [`TimerTable`] on a worker thread over a manual clock, so only
//! the table's own work is timed: `--timers` registrations are sent in `NewTimeouts`-sized
//! batches (the schedule already parsed, as the API parses it before the worker sees it)
//! and timed until the last batch is answered; then the clock is moved past every deadline
//! at once and the firing is timed until the sink has them all. The variants:
//! - `plain`: one-shot timers at a fixed deadline, which fire and are gone;
//! - `repeat`: the same with `repeat = 1s`, re-armed after firing (no calendar);
//! - `cron`: the same deadline as a cron time (`* * * * * *` in Europe/Berlin, then the
//!   other schedules below in turn), each firing computing its next one.
//!
//! The variants alternate over `--rounds` rounds after a warm-up; the median round is
//! printed: `cron_vs_plain plain_register_per_s=.. cron_register_per_s=.. register_ratio=..
//! plain_fire_per_s=.. repeat_fire_per_s=.. cron_fire_per_s=.. fire_ratio=..`, ratios
//! being plain over cron (2.0: cron timers take twice as long).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tickd::clock::ManualClock;
use tickd::cron::CalendarSchedule;
use tickd::domain::{Calendar, Due, NewTimer, Target, TimerRef};
use tickd::domain::{FiredRound, Handoff};
use tickd::local::table::command::Command;
use tickd::local::table::{TableConfig, TimerTable};
use tickd::metrics::Metrics;
use tickd::worker::{Worker, WorkerConfig, WorkerHandle};
use tokio::sync::oneshot;

/// 2025-06-15T10:00:00.5Z: half a second before the deadlines, which are whole seconds.
const START_UNIX: u64 = 1_749_981_600 * 1_000_000_000 + 500_000_000;
/// Every one of these fires at the whole second after `START_UNIX` (Berlin is on CEST).
const SCHEDULES: [(&str, &str); 4] = [
    ("* * * * * *", "Europe/Berlin"),
    ("*/1 * * * * *", "UTC"),
    ("1 0 10 * * *", "UTC"),
    ("1 0 12 15 JUN SUN", "Europe/Berlin"),
];
const BATCH: usize = 1_000;

#[derive(Debug, clap::Args)]
pub(crate) struct CronArgs {
    /// Timers per variant and round.
    #[arg(long, default_value_t = 200_000)]
    timers: usize,
    /// Measured rounds (after one warm-up); the median is printed.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Plain,
    Repeat,
    Cron,
}

/// One variant's round: registrations and firings per second.
#[derive(Clone, Copy)]
struct Rates {
    register_per_s: f64,
    fire_per_s: f64,
}

pub(crate) fn run(args: CronArgs) {
    let calendars: Vec<Calendar> = SCHEDULES
        .iter()
        .map(|&(expression, zone)| {
            let schedule = CalendarSchedule::parse(expression, zone).expect("valid schedule");
            Calendar(Arc::new(schedule))
        })
        .collect();
    let variants = [Variant::Plain, Variant::Repeat, Variant::Cron];
    let mut rounds: Vec<[Rates; 3]> = Vec::new();
    for round in 0..=args.rounds.max(1) {
        let rates = variants.map(|variant| measure(variant, args.timers, &calendars));
        if round > 0 {
            rounds.push(rates);
        }
    }
    let median = |pick: &dyn Fn(&[Rates; 3]) -> f64| {
        let mut values: Vec<f64> = rounds.iter().map(pick).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let plain_register = median(&|r| r[0].register_per_s);
    let cron_register = median(&|r| r[2].register_per_s);
    let plain_fire = median(&|r| r[0].fire_per_s);
    let repeat_fire = median(&|r| r[1].fire_per_s);
    let cron_fire = median(&|r| r[2].fire_per_s);
    println!(
        "cron_vs_plain timers={} rounds={} plain_register_per_s={plain_register:.0} \
         cron_register_per_s={cron_register:.0} register_ratio={:.2} \
         plain_fire_per_s={plain_fire:.0} repeat_fire_per_s={repeat_fire:.0} \
         cron_fire_per_s={cron_fire:.0} fire_ratio={:.2}",
        args.timers,
        rounds.len(),
        plain_register / cron_register,
        plain_fire / cron_fire,
    );
}

/// Registers `count` timers of one variant on a fresh worker, then fires them all.
fn measure(variant: Variant, count: usize, calendars: &[Calendar]) -> Rates {
    let clock = ManualClock::starting_at_unix(START_UNIX);
    let table = TimerTable::new(
        TableConfig {
            tick: Duration::from_millis(1),
            max_pending: count + BATCH,
            max_pending_per_namespace: 0,
            max_namespaces: 0,
        },
        Metrics::new(),
    );
    let (all_fired, wait_fired) = mpsc::channel();
    let fired = AtomicUsize::new(0);
    let sink = move |rounds: Vec<FiredRound>| {
        let in_batch = rounds
            .iter()
            .flat_map(|round| &round.handoffs)
            .filter(|handoff| matches!(handoff, Handoff::Fired(_)))
            .count();
        if fired.fetch_add(in_batch, Ordering::Relaxed) + in_batch == count {
            let _ = all_fired.send(());
        }
    };
    let worker =
        Worker::spawn(table, clock.clone(), WorkerConfig::default(), sink).expect("spawn worker");
    let commands = worker.handle();

    let deadline_unix = START_UNIX.div_ceil(1_000_000_000) * 1_000_000_000;
    let registering = Instant::now();
    let mut answers = Vec::with_capacity(count / BATCH + 1);
    for first in (0..count).step_by(BATCH) {
        let timers = (first..count.min(first + BATCH))
            .map(|index| new_timer(variant, index, deadline_unix, calendars))
            .collect();
        let (reply, answer) = oneshot::channel();
        commands
            .send(Command::Register { timers, reply })
            .expect("worker alive");
        answers.push(answer);
    }
    for answer in answers {
        for registered in answer.blocking_recv().expect("worker answers") {
            registered.expect("registered");
        }
    }
    let registered = registering.elapsed();

    let firing = Instant::now();
    clock.advance(deadline_unix - START_UNIX + 1_000_000);
    wake(&commands);
    wait_fired.recv().expect("every timer fires");
    let fired = firing.elapsed();
    drop(worker.stop());
    Rates {
        register_per_s: count as f64 / registered.as_secs_f64(),
        fire_per_s: count as f64 / fired.as_secs_f64(),
    }
}

fn new_timer(
    variant: Variant,
    index: usize,
    deadline_unix: u64,
    calendars: &[Calendar],
) -> NewTimer {
    NewTimer {
        namespace: "bench".into(),
        key: None,
        due: Due::AtUnix(deadline_unix),
        payload: bytes::Bytes::new(),
        repeat: (variant == Variant::Repeat).then_some(Duration::from_secs(1)),
        ttl: None,
        calendar: (variant == Variant::Cron).then(|| calendars[index % calendars.len()].clone()),
        replace: false,
        trace: None,
    }
}

/// A command the worker answers at once, so that it reads the clock moved by hand.
fn wake(commands: &WorkerHandle<Command>) {
    let (reply, _answer) = oneshot::channel();
    let timer = TimerRef {
        namespace: "bench".into(),
        target: Target::Key("none".into()),
    };
    commands
        .send(Command::Get { timer, reply })
        .expect("worker alive");
}
