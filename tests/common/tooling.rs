//! What the polyglot and deployment tests share: running commands with readable failures,
//! cross-process install locks, and Python virtual environments built from pinned
//! requirements under `target/`.
//!
//! Environment: `TICKD_PYTHON` picks the interpreter venvs are built from (default
//! `python3`); `TICKD_SKIP_POLYGLOT=1` skips the tests that need other languages (and so
//! PyPI, npm or a JDK); `TICKD_SKIP_POSTGRES=1` skips the tests that need PostgreSQL (which
//! they would otherwise install with apt when it is missing).

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

/// An exclusive lock on `target/NAME.lock`, held until dropped: serialises installs across
/// test processes.
pub(crate) fn install_lock(name: &str) -> Result<File, String> {
    let target = target_dir();
    fs::create_dir_all(&target).map_err(|e| format!("create {}: {e}", target.display()))?;
    let path = target.join(format!("{name}.lock"));
    let file = File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    file.lock()
        .map_err(|e| format!("lock {}: {e}", path.display()))?;
    Ok(file)
}

/// `apt-get install -y PACKAGES` (with `apt-get update` first only if that fails). Needs
/// root; callers hold an [`install_lock`] and check first whether the packages are needed.
pub(crate) fn apt_get_install(packages: &[&str]) -> Result<(), String> {
    eprintln!("apt-get install -y {}", packages.join(" "));
    let install = || {
        let mut command = Command::new("apt-get");
        command
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive");
        run(command)
    };
    if install().is_err() {
        let mut update = Command::new("apt-get");
        update.args(["update", "-q"]);
        run(update)?;
        install().map_err(|e| format!("{e}\n(installing Debian packages needs root)"))?;
    }
    Ok(())
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

/// The venv the Python tests and the Python client example share.
pub(crate) fn polyglot_python() -> Result<PathBuf, String> {
    python_venv(
        "polyglot-venv",
        &repo().join("tests/python/requirements.txt"),
    )
}
