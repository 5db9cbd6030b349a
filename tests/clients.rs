//! The client packages under `clients/` (Python, TypeScript/Node, Go, Java), each built and
//! tested by its own `clients/<language>/check` against the tickd binary cargo built for
//! these tests (`TICKD_BIN`). Each check starts, stops and restarts real tickd processes
//! itself: its subscriber and lease keeper are tested across a restart of a durable tickd.
//!
//! What each check needs, installed by the check itself when missing (it says what on
//! stderr), with everything it builds kept under `target/clients/<language>/`:
//! - Python: `python3` 3.11+ and PyPI (a fresh venv, `pip install ./clients/python`).
//! - TypeScript/Node: `node` 18+ and `npm` with the npm registry.
//! - Go: Debian's `golang-go` and Go gRPC packages, `apt-get install`ed (as root).
//! - Java: a JDK, Maven and Debian's gRPC Java packages, `apt-get install`ed (as root);
//!   Maven runs offline against Debian's `/usr/share/maven-repo`.
//!
//! The checks run one at a time: two of them may `apt-get install` at once otherwise (dpkg
//! takes one at a time), and each already keeps both cores busy while it builds.
//!
//! `TICKD_SKIP_POLYGLOT=1` skips these tests (e.g. offline), as tests/polyglot.rs does.

mod common;

use std::process::Command;
use std::sync::Mutex;

use common::tooling::{repo, run, skip_polyglot};

/// Runs `clients/<language>/check` with `TICKD_BIN` naming this build's tickd, and panics
/// with its whole output when it fails.
fn check(language: &str) {
    if skip_polyglot(&format!("clients/{language}")) {
        return;
    }
    // Held while the check runs; a check that failed (and so panicked) leaves it poisoned,
    // which does not concern the next.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut command = Command::new("bash");
    command
        .arg(repo().join("clients").join(language).join("check"))
        .current_dir(repo())
        .env("TICKD_BIN", env!("CARGO_BIN_EXE_tickd"))
        // The checks' own interpreters and tools, not the caller's.
        .env_remove("PYTHONPATH")
        .env_remove("PYTHONHOME")
        .env_remove("NODE_OPTIONS")
        .env_remove("GOFLAGS");
    let output = run(command).unwrap_or_else(|failure| panic!("{failure}"));
    // Shown with --nocapture: the check's summary.
    print!("{}", String::from_utf8_lossy(&output.stdout));
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn python_package() {
    check("python");
}

#[test]
fn node_package() {
    check("node");
}

#[test]
fn go_package() {
    check("go");
}

#[test]
fn java_package() {
    check("java");
}
