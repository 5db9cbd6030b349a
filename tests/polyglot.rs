//! End to end from another language: the Python tests in `tests/python` (grpcio, with stubs
//! generated from `proto/` at test time) run against a real in-process server.
//!
//! Needs only `python3` (3.11+, with `venv` or `pip`) and access to PyPI the first time:
//! the test creates `target/polyglot-venv` from `tests/python/requirements.txt` and
//! rebuilds it whenever that file (or the Python version) changes.
//!
//! Environment:
//! - `TICKD_PYTHON`: the interpreter to build the venv from (default `python3`).
//! - `TICKD_SKIP_POLYGLOT=1`: skip this test (e.g. offline with no venv yet).

mod common;

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::TestServer;

const MARKER: &str = ".tickd-requirements";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `target/` (or `$CARGO_TARGET_DIR`): the parent of the integration tests' tmp dir.
fn target_dir() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(tmp).to_path_buf()
}

fn base_python() -> String {
    std::env::var("TICKD_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

fn describe(command: &Command) -> String {
    let mut text = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

fn run(mut command: Command) -> Result<Output, String> {
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

fn venv_python(venv: &Path) -> PathBuf {
    venv.join("bin").join("python")
}

/// Makes sure `target/polyglot-venv` holds exactly the pinned requirements, and returns
/// its interpreter. Serialised across processes by a lock file next to the venv.
fn ensure_venv() -> Result<PathBuf, String> {
    let target = target_dir();
    fs::create_dir_all(&target).map_err(|e| format!("create {}: {e}", target.display()))?;
    let venv = target.join("polyglot-venv");
    let requirements = repo().join("tests/python/requirements.txt");

    let lock_path = target.join("polyglot-venv.lock");
    let lock = File::create(&lock_path).map_err(|e| format!("{}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("lock {}: {e}", lock_path.display()))?;

    let base = base_python();
    let mut version = Command::new(&base);
    version.args(["-c", "import sys; print(sys.version)"]);
    let version = run(version)
        .map_err(|e| format!("{e}\n(python3 3.11+ is needed; set TICKD_PYTHON to pick one)"))?;
    let expected = format!(
        "python: {}\n{}",
        String::from_utf8_lossy(&version.stdout).trim(),
        fs::read_to_string(&requirements)
            .map_err(|e| format!("{}: {e}", requirements.display()))?
    );
    let python = venv_python(&venv);
    let marker = venv.join(MARKER);
    if python.exists() && fs::read_to_string(&marker).ok().as_deref() == Some(&expected) {
        return Ok(python);
    }

    eprintln!(
        "polyglot: building {} (pip install from PyPI)",
        venv.display()
    );
    if venv.exists() {
        fs::remove_dir_all(&venv).map_err(|e| format!("remove {}: {e}", venv.display()))?;
    }
    let mut create = Command::new(&base);
    create.arg("-m").arg("venv").arg(&venv);
    // `pip` inside the venv when the interpreter has ensurepip; otherwise (e.g. Debian
    // without python3-venv's ensurepip) an empty venv filled by the system pip.
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
        .arg(&requirements);
    run(install)?;
    // Written last: an interrupted install is redone next time.
    fs::write(&marker, expected).map_err(|e| format!("{}: {e}", marker.display()))?;
    Ok(python)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_registers_subscribes_and_receives() {
    if std::env::var_os("TICKD_SKIP_POLYGLOT").is_some_and(|v| v == "1") {
        eprintln!("polyglot: skipped (TICKD_SKIP_POLYGLOT=1)");
        return;
    }
    let server = TestServer::start().await;
    let addr = server.addr;

    let outcome = tokio::task::spawn_blocking(move || {
        let python = ensure_venv()?;
        let mut pytest = Command::new(python);
        pytest
            .args(["-m", "pytest", "-q", "tests/python"])
            .current_dir(repo())
            .env("TICKD_ADDR", format!("127.0.0.1:{}", addr.port()))
            .env("TICKD_PROTO_DIR", repo().join("proto"))
            // Keep __pycache__ out of the source tree and the caller's Python path out of the venv.
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("PYTHONPATH")
            .env_remove("PYTHONHOME");
        run(pytest)
    })
    .await
    .expect("python task panicked");

    match outcome {
        Ok(output) => println!("{}", String::from_utf8_lossy(&output.stdout)),
        Err(failure) => panic!("{failure}"),
    }
    server.stop().await;
}
