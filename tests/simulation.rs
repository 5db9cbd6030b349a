//! The deterministic simulation, run over many seeds (the `sim` feature): every promise is
//! checked after every step of each seed's run (see `src/sim/`).
//!
//! `TICKD_DST_SEEDS=N` runs N seeds (20,000 by default) from `TICKD_DST_FIRST` (0), each
//! for `TICKD_DST_STEPS` steps (200); `TICKD_DST_SEED=S` replays one seed, printing its
//! trace hash; `TICKD_DST_PLANT=<bug>` plants a known bug, which a seed must then catch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tickd::sim::{run_seed, Report};

/// The allocator tickd itself runs on (see `src/bin/tickd.rs`). The simulation allocates
/// mostly small, short-lived buffers (records, frames, file copies on the simulated disk):
/// on glibc's malloc they took about a fifth of its time.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|value| {
            value
                .parse()
                .unwrap_or_else(|_| panic!("{name}={value} is not a number"))
        })
        .unwrap_or(default)
}

fn replay_line(report: &Report) -> String {
    format!(
        "TICKD_DST_SEED={} TICKD_DST_STEPS={} cargo test --release --features sim --test simulation",
        report.seed, report.steps
    )
}

#[test]
fn every_promise_holds_after_every_step() {
    let steps = setting("TICKD_DST_STEPS", 200);
    if let Ok(seed) = std::env::var("TICKD_DST_SEED") {
        let seed = seed.parse().expect("TICKD_DST_SEED is a number");
        let report = run_seed(seed, steps);
        println!(
            "simulation seed={seed} steps={steps} trace={:016x} firings={} restarts={}",
            report.trace, report.firings, report.restarts
        );
        if let Some((step, violation)) = report.failure {
            panic!("seed {seed} failed at step {step}: {violation}");
        }
        return;
    }
    let seeds = setting("TICKD_DST_SEEDS", 20_000);
    let first = setting("TICKD_DST_FIRST", 0);
    let next = AtomicU64::new(first);
    let failures = Mutex::new(Vec::new());
    let totals = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
    let threads = std::thread::available_parallelism().map_or(1, |count| count.get());
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= first + seeds || !failures.lock().unwrap().is_empty() {
                    return;
                }
                let report = run_seed(seed, steps);
                totals[0].fetch_add(report.firings, Ordering::Relaxed);
                totals[1].fetch_add(report.restarts, Ordering::Relaxed);
                totals[2].fetch_add(u64::from(report.refused_to_start), Ordering::Relaxed);
                if report.failure.is_some() {
                    failures.lock().unwrap().push(report);
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap();
    failures.sort_by_key(|report| report.seed);
    println!(
        "simulation seeds={seeds} steps={steps} firings={} restarts={} refused_damage={} elapsed_ms={}",
        totals[0].load(Ordering::Relaxed),
        totals[1].load(Ordering::Relaxed),
        totals[2].load(Ordering::Relaxed),
        started.elapsed().as_millis()
    );
    if let Some(report) = failures.first() {
        let (step, violation) = report.failure.as_ref().expect("a failure");
        panic!(
            "seed {} failed at step {step}: {violation}\nreplay: {}",
            report.seed,
            replay_line(report)
        );
    }
}

#[test]
fn a_seed_replays_exactly() {
    for seed in [1, 7, 12_345] {
        let first = run_seed(seed, 300);
        let second = run_seed(seed, 300);
        assert_eq!(
            first.trace, second.trace,
            "seed {seed} ran differently twice"
        );
        assert_eq!(first.failure, second.failure);
    }
    assert_ne!(run_seed(1, 300).trace, run_seed(2, 300).trace);
}
