//! Throwaway message brokers for the broker sinks' tests: a NATS server with JetStream
//! ([`NatsServer`]) and a Redis server ([`RedisServer`]), each on 127.0.0.1 on a free
//! port with its files in a temporary directory, killed when dropped.
//!
//! They run Debian's `nats-server` and `redis-server`, installing the package when the
//! binary is missing (as [`super::postgres`] does PostgreSQL); tests needing them check
//! [`super::tooling::skip_brokers`] first, so `TICKD_SKIP_BROKERS=1` skips them offline.
//! A server counts as started when it logs that it is ready: no polling.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tempfile::TempDir;

use super::daemon::send_signal;
use super::tooling::install_packages;

/// How long a server may take to say it is ready.
const READY_PATIENCE: Duration = Duration::from_secs(30);
/// Another process may take the free port between our probe and the server's bind.
const START_ATTEMPTS: usize = 3;

/// A broker process with its output kept line by line.
struct Broker {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Broker {
    /// Spawns `command` and waits for a line of its output containing `ready`; an error
    /// with the log if it exits or stays silent first.
    fn start(mut command: Command, ready: &'static str) -> Result<Broker, String> {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(|error| format!("spawn {command:?}: {error}"))?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let (ready_sender, readiness) = mpsc::channel();
        keep_lines(
            child.stdout.take().expect("stdout"),
            &log,
            ready,
            ready_sender.clone(),
        );
        keep_lines(
            child.stderr.take().expect("stderr"),
            &log,
            ready,
            ready_sender,
        );
        let broker = Broker { child, log };
        // Both readers gone (the process exited) disconnects the channel at once.
        match readiness.recv_timeout(READY_PATIENCE) {
            Ok(()) => Ok(broker),
            Err(_) => Err(format!(
                "{command:?} did not log {ready:?}; log:\n{}",
                broker.log_text()
            )),
        }
    }

    fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// SIGTERM (a clean shutdown) and wait for the exit.
    fn stop(&mut self) {
        send_signal(self.child.id(), "TERM");
        let _ = self.child.wait();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads `output` on a thread of its own into `log`; the first line containing `ready`
/// is announced on `sender`.
fn keep_lines(
    output: impl Read + Send + 'static,
    log: &Arc<Mutex<Vec<String>>>,
    ready: &'static str,
    sender: mpsc::Sender<()>,
) {
    let log = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines() {
            let Ok(line) = line else { break };
            let is_ready = line.contains(ready);
            log.lock().unwrap().push(line);
            if is_ready {
                let _ = sender.send(());
            }
        }
    });
}

/// A port nobody listened on a moment ago.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// `program` (a Debian path), installing the package `group` of tests/tools/packages first
/// if it is missing.
fn installed(program: &str, group: &str) -> PathBuf {
    let path = PathBuf::from(program);
    if path.exists() {
        return path;
    }
    install_packages(group, "the broker sink tests").unwrap_or_else(|failure| panic!("{failure}"));
    assert!(path.exists(), "no {program} after installing group {group}");
    path
}

/// `nats-server -js` on 127.0.0.1, its JetStream store in a temporary directory.
pub(crate) struct NatsServer {
    broker: Broker,
    pub port: u16,
    _dir: TempDir,
}

impl NatsServer {
    pub(crate) fn start() -> NatsServer {
        let binary = installed("/usr/sbin/nats-server", "nats");
        let dir = tempfile::tempdir().expect("temp dir");
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            let mut command = Command::new(&binary);
            command
                .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
                .arg(dir.path());
            match Broker::start(command, "Server is ready") {
                Ok(broker) => {
                    return NatsServer {
                        broker,
                        port,
                        _dir: dir,
                    }
                }
                Err(failure) => failures.push(failure),
            }
        }
        panic!("nats-server did not start:\n{}", failures.join("\n\n"));
    }

    pub(crate) fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// SIGSTOP or SIGCONT: the server stops reading its connections, or resumes.
    pub(crate) fn signal(&self, name: &str) {
        send_signal(self.broker.child.id(), name);
    }

    pub(crate) fn log_text(&self) -> String {
        self.broker.log_text()
    }
}

/// `redis-server` on 127.0.0.1 with an append-only file written at every command, so that
/// a stopped server started again on its directory has every entry it acknowledged.
pub(crate) struct RedisServer {
    broker: Option<Broker>,
    pub port: u16,
    dir: TempDir,
}

impl RedisServer {
    pub(crate) fn start() -> RedisServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            match Self::spawn(dir.path(), port) {
                Ok(broker) => {
                    return RedisServer {
                        broker: Some(broker),
                        port,
                        dir,
                    }
                }
                Err(failure) => failures.push(failure),
            }
        }
        panic!("redis-server did not start:\n{}", failures.join("\n\n"));
    }

    fn spawn(dir: &Path, port: u16) -> Result<Broker, String> {
        let binary = installed("/usr/bin/redis-server", "redis");
        let mut command = Command::new(binary);
        command
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .args(["--daemonize", "no", "--dir"])
            .arg(dir);
        Broker::start(command, "Ready to accept connections")
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Shuts the server down (SIGTERM): its port refuses connections until [`Self::restart`].
    pub(crate) fn stop(&mut self) {
        if let Some(mut broker) = self.broker.take() {
            broker.stop();
        }
    }

    /// Starts the server again on its port and directory.
    pub(crate) fn restart(&mut self) {
        assert!(self.broker.is_none(), "stop it first");
        let broker = Self::spawn(self.dir.path(), self.port)
            .unwrap_or_else(|failure| panic!("redis-server did not start again: {failure}"));
        self.broker = Some(broker);
    }

    pub(crate) async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("the fixture's URL")
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the test's redis-server")
    }
}
