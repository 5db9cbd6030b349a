//! What the tickctl tests share: running the built `tickctl` against a server (to completion,
//! or as a long-running child whose output lines are awaited one by one) and reading what it
//! printed and how it exited.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::common::TestServer;

/// Only a safety net, so a broken build fails instead of hanging: never a synchronisation.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

pub(crate) fn tickctl(endpoint: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tickctl"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("TICKCTL_") {
            command.env_remove(name);
        }
    }
    command
        .env("TICKCTL_ENDPOINT", endpoint)
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null());
    command
}

pub(crate) fn endpoint(server: &TestServer) -> String {
    format!("http://{}", server.addr)
}

pub(crate) struct Ran {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Ran {
    pub(crate) fn from(output: Output) -> Self {
        let ran = Ran {
            code: output
                .status
                .code()
                .expect("tickctl was killed by a signal"),
            stdout: String::from_utf8(output.stdout).expect("utf-8 stdout"),
            stderr: String::from_utf8(output.stderr).expect("utf-8 stderr"),
        };
        assert!(
            !ran.stderr.contains("panicked") && !ran.stderr.contains("backtrace"),
            "tickctl panicked:\n{}",
            ran.stderr
        );
        ran
    }

    pub(crate) fn ok(self) -> Self {
        assert_eq!(
            self.code, 0,
            "tickctl failed\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|error| panic!("{error}: not JSON:\n{}", self.stdout))
    }

    /// A failure reported as exactly one line on stderr.
    pub(crate) fn one_error_line(&self) -> &str {
        let lines: Vec<_> = self.stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "expected one line on stderr, got:\n{}",
            self.stderr
        );
        lines[0]
    }

    /// A failure with exit code `code`, reported as one line on stderr: that line.
    pub(crate) fn failed(&self, code: i32) -> &str {
        assert_eq!(self.code, code, "exit code; stderr:\n{}", self.stderr);
        self.one_error_line()
    }
}

/// Runs tickctl to completion (off the async workers, which serve the server).
pub(crate) async fn run(endpoint: &str, args: &[&str]) -> Ran {
    run_with_stdin(endpoint, args, None).await
}

/// Runs tickctl, which must succeed, and returns what it printed.
pub(crate) async fn stdout(endpoint: &str, args: &[&str]) -> String {
    run(endpoint, args).await.ok().stdout
}

/// Runs tickctl, which must succeed printing JSON, and returns that.
pub(crate) async fn json(endpoint: &str, args: &[&str]) -> Value {
    run(endpoint, args).await.ok().json()
}

/// Runs `tickctl add ARGS`, which must succeed printing the new timer's id alone: the id.
pub(crate) async fn add(endpoint: &str, args: &[&str]) -> String {
    let added = stdout(endpoint, &[&["add"], args].concat()).await;
    assert_eq!(added.lines().count(), 1, "add prints the id alone: {added}");
    added.trim().to_owned()
}

pub(crate) async fn run_with_stdin(endpoint: &str, args: &[&str], stdin: Option<&[u8]>) -> Ran {
    let mut command = tickctl(endpoint);
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let stdin = stdin.map(<[u8]>::to_vec);
    if stdin.is_some() {
        command.stdin(Stdio::piped());
    }
    let output = tokio::task::spawn_blocking(move || {
        let mut child = command.spawn().expect("spawn tickctl");
        if let Some(bytes) = stdin {
            let mut pipe = child.stdin.take().unwrap();
            pipe.write_all(&bytes).expect("write stdin");
        }
        child.wait_with_output().expect("wait for tickctl")
    });
    let output = tokio::time::timeout(PATIENCE, output)
        .await
        .unwrap_or_else(|_| panic!("tickctl {args:?} did not finish"))
        .unwrap();
    Ran::from(output)
}

/// A long-running tickctl whose output lines arrive on channels.
pub(crate) struct Running {
    child: Child,
    stdout: mpsc::UnboundedReceiver<String>,
    stderr: mpsc::UnboundedReceiver<String>,
}

pub(crate) fn forward_lines(
    pipe: impl std::io::Read + Send + 'static,
) -> mpsc::UnboundedReceiver<String> {
    let (sender, receiver) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

impl Running {
    pub(crate) fn start(endpoint: &str, args: &[&str]) -> Self {
        let mut child = tickctl(endpoint)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tickctl");
        let stdout = forward_lines(child.stdout.take().unwrap());
        let stderr = forward_lines(child.stderr.take().unwrap());
        Running {
            child,
            stdout,
            stderr,
        }
    }

    pub(crate) async fn stdout_line(&mut self) -> String {
        next_line(&mut self.stdout, "stdout").await
    }

    pub(crate) async fn stderr_line(&mut self) -> String {
        next_line(&mut self.stderr, "stderr").await
    }

    /// Waits for the exit status (the process was told how many lines to print).
    pub(crate) async fn finished(mut self) -> i32 {
        let status = tokio::time::timeout(
            PATIENCE,
            tokio::task::spawn_blocking(move || self.child.wait().expect("wait")),
        )
        .await
        .expect("tickctl did not exit")
        .unwrap();
        status.code().expect("killed by a signal")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub(crate) async fn next_line(lines: &mut mpsc::UnboundedReceiver<String>, name: &str) -> String {
    tokio::time::timeout(PATIENCE, lines.recv())
        .await
        .unwrap_or_else(|_| panic!("no line on tickctl's {name}"))
        .unwrap_or_else(|| panic!("tickctl's {name} closed"))
}

pub(crate) fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}
