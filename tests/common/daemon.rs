//! A `tickd` process started from the built binary, with its log captured line by line so a
//! test can wait for a line, count lines, or show the whole log when it fails.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a daemon may take to report the address it serves on.
const START_PATIENCE: Duration = Duration::from_secs(30);

/// `tickd --listen 127.0.0.1:0 --log-format text`, logging at info level (or as
/// `TICKD_TEST_LOG` says, `TICKD_LOG`'s syntax) without colours, its output piped: callers add the arguments of the mode under test, then
/// [`Daemon::start`] it. `TICKD_TEST_BIN` runs another binary (the release build, say)
/// instead of the one cargo built for the tests.
pub(crate) fn tickd_command() -> Command {
    tickd_command_listening_on("127.0.0.1:0")
}

/// [`tickd_command`] listening on `listen`: to start tickd again on the port it had.
pub(crate) fn tickd_command_listening_on(listen: &str) -> Command {
    let binary =
        std::env::var_os("TICKD_TEST_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_tickd").into());
    let mut command = Command::new(binary);
    command
        .args(["--listen", listen, "--log-format", "text"])
        .env(
            "TICKD_LOG",
            std::env::var("TICKD_TEST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// A `tickd` process; killed (SIGKILL) when dropped, so a failing test leaves none behind.
pub(crate) struct Daemon {
    child: Child,
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Daemon {
    /// Spawns `command` (from [`tickd_command`]) and waits for its "tickd serving" line, which
    /// says where it listens. Panics with the log if it exits or stays silent instead.
    pub(crate) fn start(mut command: Command) -> Daemon {
        let mut child = command.spawn().expect("spawn tickd");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (address_sender, address) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        capture_lines(stdout, log.clone(), Some(address_sender));
        capture_lines(stderr, log.clone(), None);
        // Fails at once (disconnected) when the process exits before serving.
        let addr = match address.recv_timeout(START_PATIENCE) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                let status = child.wait();
                panic!(
                    "tickd did not report its address ({status:?}); log:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
        };
        Daemon { child, addr, log }
    }

    /// Spawns `command` for a start that must be refused: waits (at most `patience`) for
    /// the process to exit by itself, and returns how it exited with everything it logged.
    /// A refused start never logs "tickd serving", so [`Daemon::start`] would not return.
    pub(crate) fn refused(mut command: Command, patience: Duration) -> (ExitStatus, String) {
        let mut child = command.spawn().expect("spawn tickd");
        let log = Arc::new(Mutex::new(Vec::new()));
        capture_lines(child.stdout.take().expect("stdout"), log.clone(), None);
        capture_lines(child.stderr.take().expect("stderr"), log.clone(), None);
        let mut daemon = Daemon {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            log,
        };
        let status = daemon.wait_for_exit(patience);
        // The output threads finish once the process has exited and its pipes closed.
        let deadline = Instant::now() + patience;
        while Arc::strong_count(&daemon.log) > 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        (status, daemon.log_text())
    }

    /// The `metrics=` address of its "tickd serving" line (started with `--metrics-listen`).
    pub(crate) fn metrics_addr(&self) -> SocketAddr {
        self.lines_with(&["tickd serving"])
            .iter()
            .flat_map(|line| line.split_whitespace())
            .find_map(|field| field.strip_prefix("metrics="))
            .and_then(|addr| addr.parse().ok())
            .unwrap_or_else(|| panic!("no metrics address in the log:\n{}", self.log_text()))
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and wait for the process to be gone.
    pub(crate) fn kill(&mut self) {
        self.child.kill().expect("kill");
        self.child.wait().expect("wait");
    }

    /// Ends the process by `signal`: "KILL" (gone at once), or "TERM", when it must exit
    /// cleanly (the test fails with its log otherwise).
    pub(crate) fn stop_with(&mut self, signal: &str) {
        match signal {
            "KILL" => self.kill(),
            _ => {
                self.signal(signal);
                let status = self.wait_for_exit(super::rpc::PATIENCE);
                assert!(status.success(), "{status}: {}", self.log_text());
            }
        }
    }

    /// Sends a signal by name ("TERM", "STOP", "CONT", ...).
    pub(crate) fn signal(&self, name: &str) {
        send_signal(self.pid(), name);
    }

    /// Waits for the process to exit on its own (after a SIGTERM, say); panics with the log
    /// if it is still running after `patience`.
    pub(crate) fn wait_for_exit(&mut self, patience: Duration) -> ExitStatus {
        let deadline = Instant::now() + patience;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() > deadline {
                panic!(
                    "tickd (pid {}) still running {patience:?} after being asked to stop; log:\n{}",
                    self.pid(),
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Log lines containing `needle` so far.
    pub(crate) fn count(&self, needle: &str) -> usize {
        let log = self.log.lock().unwrap();
        log.iter().filter(|line| line.contains(needle)).count()
    }

    /// Log lines containing any of `needles` so far.
    pub(crate) fn lines_with(&self, needles: &[&str]) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|line| needles.iter().any(|needle| line.contains(needle)))
            .cloned()
            .collect()
    }

    /// Waits (at most [`crate::common::PATIENCE`]) until the log has a line with `needle`:
    /// the output is read by a thread of its own, a moment behind the process.
    pub(crate) async fn logged(&self, needle: &str) {
        crate::common::wait::eventually(
            &format!("the log says {needle:?}"),
            crate::common::PATIENCE,
            Duration::from_millis(10),
            || async {
                (self.count(needle) > 0)
                    .then_some(())
                    .ok_or_else(String::new)
            },
            || async { self.log_text() },
        )
        .await;
    }

    pub(crate) fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub(crate) fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub(crate) fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!(
                "tickd exited on its own ({status}); log:\n{}",
                self.log_text()
            );
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends the signal `name` to `pid` with the shell's built-in `kill`: no crate among the
/// dependencies binds kill(2), and /bin/kill (procps) is not on every machine.
pub(crate) fn send_signal(pid: u32, name: &str) {
    let status = Command::new("sh")
        .args(["-c", "kill -s \"$1\" \"$2\"", "sh", name, &pid.to_string()])
        .status()
        .expect("run sh");
    assert!(status.success(), "kill -s {name} {pid} failed: {status}");
}

/// Reads `output` to the end on a thread of its own (so the daemon never blocks on a full
/// pipe), keeping each line; the address of the "tickd serving" line goes to `address`.
fn capture_lines(
    output: impl Read + Send + 'static,
    log: Arc<Mutex<Vec<String>>>,
    address: Option<Sender<SocketAddr>>,
) {
    // `TICKD_TEST_ECHO=1` also prints every line the daemons log, as they come, for
    // reading a run as it goes (the tests themselves print only what they assert on).
    let echo = std::env::var_os("TICKD_TEST_ECHO").is_some();
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines() {
            let Ok(line) = line else { break };
            let line = strip_ansi(&line);
            if echo {
                eprintln!("{line}");
            }
            let serving = line
                .contains("tickd serving")
                .then(|| listen_addr(&line))
                .flatten();
            // Logged before the address is handed over: whoever waits for it may read the
            // serving line's other fields (`metrics=`) at once.
            log.lock().unwrap().push(line);
            if let (Some(sender), Some(addr)) = (&address, serving) {
                let _ = sender.send(addr);
            }
        }
    });
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ ... final byte in @..~
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) && c != '[' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `... tickd serving listen=127.0.0.1:PORT unix_socket=None ...`
fn listen_addr(line: &str) -> Option<SocketAddr> {
    line.split_whitespace()
        .find_map(|field| field.strip_prefix("listen="))?
        .parse()
        .ok()
}

/// CPU time the process `pid` has used (user + system), in clock ticks.
pub(crate) fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    let fields: Vec<&str> = stat.rsplit_once(") ").expect("stat").1.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// `getconf CLK_TCK`: the clock ticks of [`cpu_ticks`] per second.
pub(crate) fn clock_ticks_per_second() -> u64 {
    let output = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .expect("getconf");
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .expect("CLK_TCK")
}
