//! The deterministic simulation's swarm, as part of the suite: runs
//! `cargo test --release --features sim --test simulation` (20,000 seeds of 200 steps by
//! default; see tests/simulation.rs) and fails with the seed to replay if any seed breaks a
//! promise. The simulation needs the `sim` feature and an optimised build to run that many
//! seeds in a few minutes, which the suite's own debug build has neither of; so this test
//! builds it (about eight minutes on two cores the first time, reused after).
//!
//! Environment:
//! - `TICKD_SKIP_SIMULATION=1`: skip (for a quick local loop; CI never sets it).
//! - `TICKD_DST_SEEDS`, `TICKD_DST_FIRST`, `TICKD_DST_STEPS`: passed through.

mod common;

use common::tooling::{cargo_release_test, must, skip_simulation};

#[test]
fn the_simulation_swarm_passes_in_a_release_build() {
    if skip_simulation("the simulation swarm") {
        return;
    }
    let command = cargo_release_test(&[
        "--features",
        "sim",
        "--test",
        "simulation",
        "--",
        "--nocapture",
    ]);
    let output = must(command);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary = stdout
        .lines()
        .find(|line| line.starts_with("simulation seeds="))
        .unwrap_or_else(|| panic!("the simulation printed no summary:\n{stdout}"));
    println!("{summary}");
    let seeds: u64 = summary
        .split_whitespace()
        .find_map(|field| field.strip_prefix("seeds="))
        .and_then(|seeds| seeds.parse().ok())
        .expect("the summary names its seeds");
    let asked = std::env::var("TICKD_DST_SEEDS").map_or(20_000, |seeds| {
        seeds.parse().expect("TICKD_DST_SEEDS is a number")
    });
    assert_eq!(seeds, asked, "the swarm ran another number of seeds");
    assert!(
        stdout.contains("test result: ok. 2 passed"),
        "the simulation's two tests did not both pass:\n{stdout}"
    );
}
