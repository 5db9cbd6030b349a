//! The budgets' tests against the release build, as part of the suite: runs
//! `cargo test --release --test disk_budget --test memory_budget` and fails with their
//! output if any fails. Whether a budget holds depends on speed: the release build
//! registers several times faster than the debug one the suite is built as, and it
//! overran the disk budget where the debug build held it (issue 54), so the promise is
//! checked against the build users run. The figures each test prints (the largest
//! directory seen, for one) are passed through.
//!
//! Environment: `TICKD_SKIP_RELEASE_TESTS=1` skips it (for a quick local loop; CI never
//! sets it). The release build shares `target/` with the rest of the suite; the first run
//! builds it (a few minutes on two cores), later runs reuse it.

mod common;

use common::tooling::{cargo_release_test, must, skip_release_tests};

/// The test binaries whose promises depend on how fast tickd runs.
const SPEED_DEPENDENT: [&str; 2] = ["disk_budget", "memory_budget"];

#[test]
fn the_budget_tests_pass_against_the_release_build() {
    if skip_release_tests("the budget tests in the release build") {
        return;
    }
    let mut command = cargo_release_test(&[]);
    for test in SPEED_DEPENDENT {
        command.args(["--test", test]);
    }
    command.args(["--", "--nocapture"]);
    let output = must(command);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let results: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("test result:"))
        .collect();
    assert_eq!(
        results.len(),
        SPEED_DEPENDENT.len(),
        "expected one result line per test binary:\n{stdout}"
    );
    for result in &results {
        assert!(
            result.starts_with("test result: ok.") && result.contains(" 0 failed"),
            "a release-build test failed: {result}\n{stdout}"
        );
    }
    // The figures the tests print (`disk_budget largest_directory=...` and the like).
    for line in stdout.lines().filter(|line| line.contains('=')) {
        if !line.starts_with("test ") {
            println!("release {line}");
        }
    }
}
