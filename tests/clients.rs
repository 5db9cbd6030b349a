//! The client examples under `clients/` (Python, Node.js, Java), each run against a real
//! in-process server. Every example checks its own results and exits non-zero when an
//! expiration does not arrive or arrives wrong; here its exit status and summary lines are
//! checked.
//!
//! What each needs, installed by the test when missing:
//! - Python: `python3` 3.11+; the venv `target/polyglot-venv` that tests/polyglot.rs builds
//!   from tests/python/requirements.txt (PyPI), shared with that test.
//! - Node.js: `node` 18+ and `npm`; `npm ci` fills clients/node/node_modules from the committed
//!   package-lock.json (npm registry), again whenever the lock changes.
//! - Java: a JDK and Debian's gRPC Java packages, `apt-get install`ed (as root) when missing.
//!
//! Environment:
//! - `TICKD_SKIP_POLYGLOT=1`: skip these tests (e.g. offline), as tests/polyglot.rs does.
//! - `TICKD_PYTHON`: the interpreter to build the venv from (default `python3`).

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::tooling::{
    apt_install, install_lock, polyglot_python, repo, run, skip_polyglot, target_dir,
};
use common::TestServer;

/// Runs an example with `TICKD_ADDR` pointing at a fresh server, and checks that it exits 0
/// and prints each expected line.
async fn run_example(
    build: impl FnOnce() -> Result<Command, String> + Send + 'static,
    expected: &[&str],
) {
    let server = TestServer::start().await;
    let addr = format!("127.0.0.1:{}", server.addr.port());
    let outcome = tokio::task::spawn_blocking(move || {
        let mut command = build()?;
        command
            .env("TICKD_ADDR", addr)
            .env("TICKD_PROTO_DIR", repo().join("proto"));
        run(command)
    })
    .await
    .expect("example task panicked");
    let output = outcome.unwrap_or_else(|failure| panic!("{failure}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    let lines: Vec<_> = stdout.lines().collect();
    for line in expected {
        assert!(lines.contains(line), "missing line {line:?} in:\n{stdout}");
    }
    assert_eq!(lines.last(), Some(&"all ok"), "{stdout}");
    server.stop().await;
}

// ---------------------------------------------------------------- Python

fn pins(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn python_requirements_agree_with_the_test_venv() {
    let tested = pins(&repo().join("tests/python/requirements.txt"));
    for pin in pins(&repo().join("clients/python/requirements.txt")) {
        assert!(
            tested.contains(&pin),
            "clients/python/requirements.txt pins {pin:?}, which tests/python/requirements.txt \
             (the venv the example is tested in) does not"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_example() {
    if skip_polyglot("clients") {
        return;
    }
    let build = || {
        let mut command = Command::new(polyglot_python()?);
        command
            .arg(repo().join("clients/python/tickd_example.py"))
            .current_dir(repo())
            // Keep __pycache__ out of the source tree and the caller's Python path out of the venv.
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("PYTHONPATH")
            .env_remove("PYTHONHOME");
        Ok(command)
    };
    run_example(build, &EXAMPLE_LINES).await;
}

/// What the Python and Node examples print when everything checked out.
const EXAMPLE_LINES: [&str; 4] = [
    "timeouts ok: 3 fired in deadline order and were acknowledged; the cancelled one never fired",
    "lease ok: 3 heartbeats kept it alive; it expired once they stopped",
    SCHEDULES_LINE,
    "all ok",
];

/// What every example prints once its cron timer, Reschedule and Redrive calls checked out.
const SCHEDULES_LINE: &str =
    "schedules ok: a cron timer was registered, replaced and rescheduled; redrive found nothing dead";

// ---------------------------------------------------------------- Node.js

/// `npm ci` into clients/node/node_modules unless it already matches package-lock.json.
fn ensure_node_modules() -> Result<(), String> {
    let _lock = install_lock("clients-node")?;
    let dir = repo().join("clients/node");
    let package_lock = dir.join("package-lock.json");
    let expected = fs::read_to_string(&package_lock)
        .map_err(|e| format!("{}: {e}", package_lock.display()))?;
    // Written after a successful `npm ci`: the lock it installed from.
    let marker = dir.join("node_modules/.tickd-package-lock.json");
    if fs::read_to_string(&marker).ok().as_deref() == Some(&expected) {
        return Ok(());
    }
    eprintln!(
        "clients: npm ci in {} (from the npm registry)",
        dir.display()
    );
    let mut install = Command::new("npm");
    install
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&dir);
    run(install).map_err(|e| format!("{e}\n(node 18+ and npm are needed)"))?;
    fs::write(&marker, expected).map_err(|e| format!("{}: {e}", marker.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_example() {
    if skip_polyglot("clients") {
        return;
    }
    let build = || {
        ensure_node_modules()?;
        let mut command = Command::new("node");
        command
            .arg("example.js")
            .current_dir(repo().join("clients/node"));
        Ok(command)
    };
    run_example(build, &EXAMPLE_LINES).await;
}

// ---------------------------------------------------------------- Java

/// Debian packages clients/java/run.sh compiles and runs with, and a file each provides.
const JAVA_PACKAGES: [(&str, &str); 10] = [
    ("default-jdk-headless", "/usr/bin/javac"),
    ("protobuf-compiler", "/usr/bin/protoc"),
    (
        "protobuf-compiler-grpc-java-plugin",
        "/usr/bin/grpc_java_plugin",
    ),
    ("libgrpc-java", "/usr/share/java/grpc-stub.jar"),
    ("libprotobuf-java", "/usr/share/java/protobuf.jar"),
    ("libguava-java", "/usr/share/java/guava.jar"),
    ("libnetty-java", "/usr/share/java/netty-codec-http2.jar"),
    // grpc-java 1.41 needs these at run and compile time, but libgrpc-java does not depend on them.
    ("libperfmark-java", "/usr/share/java/perfmark-api.jar"),
    (
        "libgeronimo-annotation-1.3-spec-java",
        "/usr/share/java/geronimo-annotation-1.3-spec.jar",
    ),
    (
        "libprotobuf-dev",
        "/usr/include/google/protobuf/duration.proto",
    ),
];

/// `apt-get install -y` what is missing.
fn ensure_java_packages() -> Result<(), String> {
    let _lock = install_lock("clients-java-apt")?;
    let missing: Vec<&str> = JAVA_PACKAGES
        .iter()
        .filter(|(_, file)| !Path::new(file).exists())
        .map(|(package, _)| *package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    apt_install(&missing, "the Java example")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_example() {
    if skip_polyglot("clients") {
        return;
    }
    // Each test run compiles into its own directory, so concurrent runs do not collide.
    let out = target_dir()
        .join("clients-java")
        .join(format!("run-{}", std::process::id()));
    let build_out = out.clone();
    let build = move || {
        ensure_java_packages()?;
        let out = build_out;
        let mut command = Command::new("sh");
        command
            .arg(repo().join("clients/java/run.sh"))
            .env("TICKD_JAVA_OUT", &out);
        Ok(command)
    };
    run_example(
        build,
        &[
            "newTimeout ok: 3 tasks ran in deadline order; the cancelled one did not run",
            "lease ok: 3 heartbeats kept it alive; its task ran once they stopped",
            "consume ok: a payload timer from another service was handled and acknowledged",
            SCHEDULES_LINE,
            "all ok",
        ],
    )
    .await;
    let _ = fs::remove_dir_all(out);
}
