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

use std::process::Command;

use common::tooling::{polyglot_python, repo, run, skip_polyglot};
use common::TestServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_registers_subscribes_and_receives() {
    if skip_polyglot("polyglot") {
        return;
    }
    let server = TestServer::start().await;
    let addr = server.addr;

    let outcome = tokio::task::spawn_blocking(move || {
        let python = polyglot_python()?;
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
