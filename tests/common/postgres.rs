//! A throwaway PostgreSQL server for one test: a cluster of its own in a temporary
//! directory, listening on 127.0.0.1 on a free port, stopped (and deleted) when dropped.
//!
//! It runs Debian's binaries (`/usr/lib/postgresql/VERSION/bin`) and installs the
//! `postgresql` package when they are missing, since CI may run on a fresh machine; tests
//! needing it check [`super::tooling::skip_postgres`] first, so `TICKD_SKIP_POSTGRES=1`
//! skips them offline.
//! PostgreSQL refuses to run as root, so under root the cluster belongs to, and the server
//! runs as, the `postgres` user that package creates.
//!
//! [`Postgres::start_tls`] serves TLS too, with a certificate from a throwaway [`TestCa`]
//! ([`ServerTls::signed_by`]), and can refuse plaintext TCP connections (`hostssl` only in
//! `pg_hba.conf`). The test's own connections go through [`tickd::cluster::Database`] with the default
//! `sslmode=prefer`, so they work against either kind of server.

use std::fs::{self, File};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tickd::cluster::Database;
use tokio_postgres::Row;

use super::daemon::send_signal;
use super::pki::TestCa;
use super::tooling::{install_packages, run};

/// Where Debian puts each major version's binaries.
const DEBIAN_POSTGRESQL: &str = "/usr/lib/postgresql";
/// How long a fresh server may take to accept connections.
const READY_PATIENCE: Duration = Duration::from_secs(60);
/// How long a fast shutdown may take before the server is killed.
const STOP_PATIENCE: Duration = Duration::from_secs(10);
/// Another process may take the free port between our probe and the server's bind.
const START_ATTEMPTS: usize = 3;

/// What a TLS-serving cluster is given: its certificate and key (PEM), and whether TCP
/// connections must use TLS (`hostssl` lines only in `pg_hba.conf`).
#[derive(Clone)]
pub(crate) struct ServerTls {
    pub cert_pem: String,
    pub key_pem: String,
    pub tls_only: bool,
}

impl ServerTls {
    /// A server certificate from `ca` for `names` (DNS names or IP addresses) only.
    pub(crate) fn signed_by(ca: &TestCa, names: &[&str], tls_only: bool) -> ServerTls {
        let signed = ca.server("tickd test database", names);
        ServerTls {
            cert_pem: signed.cert_pem,
            key_pem: signed.key_pem,
            tls_only,
        }
    }
}

pub(crate) struct Postgres {
    server: Child,
    port: u16,
    log: PathBuf,
    _dir: TempDir,
}

impl Postgres {
    /// Creates a cluster and starts a server on it; returns once it accepts connections.
    pub(crate) async fn start() -> Postgres {
        Postgres::start_with(None).await
    }

    /// [`Postgres::start`] with `ssl=on` and `tls`'s certificate.
    pub(crate) async fn start_tls(tls: ServerTls) -> Postgres {
        Postgres::start_with(Some(tls)).await
    }

    async fn start_with(tls: Option<ServerTls>) -> Postgres {
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let tls = tls.clone();
            let mut postgres = tokio::task::spawn_blocking(move || Postgres::spawn(tls.as_ref()))
                .await
                .expect("start postgres");
            match postgres.wait_until_ready().await {
                Ok(()) => return postgres,
                Err(failure) => failures.push(failure),
            }
        }
        panic!("PostgreSQL did not start:\n{}", failures.join("\n\n"));
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`: trusted, no password.
    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Sends `signal` ("STOP", "CONT", ...) to the server and every process it started, so
    /// that the whole database pauses or resumes (its connections too).
    pub(crate) fn signal_all(&self, signal: &str) {
        let postmaster = self.server.id();
        let mut pids = vec![postmaster];
        for entry in fs::read_dir("/proc").expect("read /proc").flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let stat = fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let parent = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.split(' ').nth(1))
                .and_then(|parent| parent.parse::<u32>().ok());
            if parent == Some(postmaster) {
                pids.push(pid);
            }
        }
        for pid in pids {
            super::daemon::send_signal(pid, signal);
        }
    }

    /// [`Postgres::url`] as tickd reads it: TLS if the server offers it, unverified.
    pub(crate) fn database(&self) -> Database {
        Database::new(&self.url(), None).expect("the fixture's own URL")
    }

    /// A new connection (its driver runs on a task of its own).
    pub(crate) async fn connect(&self) -> tokio_postgres::Client {
        self.database()
            .connect()
            .await
            .unwrap_or_else(|error| panic!("connect to {}: {error}", self.url()))
    }

    /// Runs one statement without parameters on a connection of its own.
    pub(crate) async fn query(&self, sql: &str) -> Vec<Row> {
        self.connect()
            .await
            .query(sql, &[])
            .await
            .unwrap_or_else(|error| panic!("{sql}: {}", explain(&error)))
    }

    /// The server's own log so far (for failure messages).
    pub(crate) fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_else(|error| format!("(no log: {error})"))
    }

    /// initdb in a new temporary directory, then the server on a port free a moment ago.
    fn spawn(tls: Option<&ServerTls>) -> Postgres {
        let bin = binaries();
        let dir = tempfile::tempdir().expect("temp dir");
        let as_root = fs::metadata(dir.path()).expect("stat temp dir").uid() == 0;
        if as_root {
            let mut chown = Command::new("chown");
            chown.arg("postgres:postgres").arg(dir.path());
            run(chown).unwrap_or_else(|failure| panic!("{failure}"));
        }
        let data = dir.path().join("data");
        let mut initdb = as_cluster_owner(&bin.join("initdb"), as_root);
        initdb
            .args(["-A", "trust", "-U", "postgres", "--no-sync"])
            .args(["-E", "UTF8", "--locale=C", "-D"])
            .arg(&data);
        run(initdb).unwrap_or_else(|failure| panic!("{failure}"));
        if let Some(tls) = tls {
            install_tls(&data, tls, as_root);
        }
        let port = free_port();
        let log = dir.path().join("postgres.log");
        let log_file = File::create(&log).expect("create postgres.log");
        let mut server = as_cluster_owner(&bin.join("postgres"), as_root);
        server
            .arg("-D")
            .arg(&data)
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-k"])
            .arg(dir.path())
            .args(["-c", "fsync=off", "-c", "max_connections=200"])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("clone log file"))
            .stderr(log_file);
        if tls.is_some() {
            server.args(["-c", "ssl=on"]);
        }
        let server = server.spawn().expect("spawn postgres");
        Postgres {
            server,
            port,
            log,
            _dir: dir,
        }
    }

    /// Retries connecting until the server answers; an error if it exits first (its port was
    /// taken, say) or stays unreachable for [`READY_PATIENCE`].
    async fn wait_until_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_PATIENCE;
        loop {
            if let Some(status) = self.server.try_wait().expect("try_wait postgres") {
                return Err(format!(
                    "postgres exited ({status}); log:\n{}",
                    self.log_text()
                ));
            }
            let attempt = self.database().connect().await;
            match attempt {
                Ok(_) => return Ok(()),
                Err(error) if Instant::now() > deadline => {
                    return Err(format!(
                        "postgres not accepting connections after {READY_PATIENCE:?} ({error}); \
                         log:\n{}",
                        self.log_text()
                    ));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

impl Drop for Postgres {
    /// SIGINT asks for a fast shutdown; SIGKILL if it takes too long.
    fn drop(&mut self) {
        if let Ok(None) = self.server.try_wait() {
            send_signal(self.server.id(), "INT");
            let deadline = Instant::now() + STOP_PATIENCE;
            while matches!(self.server.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// The server's message for a failed statement (the error's own text is only "db error").
pub(crate) fn explain(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{}: {} ({})", db.severity(), db.message(), db.code().code()),
        None => error.to_string(),
    }
}

/// Puts the certificate and key where `ssl=on` looks for them by default (`server.crt` and
/// `server.key` in the data directory), the key readable by its owner alone and owned by
/// the user the server runs as, as PostgreSQL insists; with `tls_only`, a `pg_hba.conf`
/// that accepts TCP connections only over TLS (and the Unix socket as before).
fn install_tls(data: &Path, tls: &ServerTls, as_root: bool) {
    let cert = data.join("server.crt");
    let key = data.join("server.key");
    fs::write(&cert, &tls.cert_pem).expect("write server.crt");
    fs::write(&key, &tls.key_pem).expect("write server.key");
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).expect("chmod server.key");
    let mut written = vec![cert, key];
    if tls.tls_only {
        let hba = data.join("pg_hba.conf");
        fs::write(
            &hba,
            "local all all trust\n\
             hostssl all all 127.0.0.1/32 trust\n\
             hostssl all all ::1/128 trust\n",
        )
        .expect("write pg_hba.conf");
        written.push(hba);
    }
    if as_root {
        let mut chown = Command::new("chown");
        chown.arg("postgres:postgres").args(&written);
        run(chown).unwrap_or_else(|failure| panic!("{failure}"));
    }
}

/// `program` run as the `postgres` user when we are root (setpriv execs it, so the child's
/// pid is the program's), or as ourselves otherwise.
fn as_cluster_owner(program: &Path, as_root: bool) -> Command {
    if !as_root {
        return Command::new(program);
    }
    let mut command = Command::new("setpriv");
    command
        .args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--",
        ])
        .arg(program);
    command
}

/// A port nobody listened on a moment ago.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// The newest installed version's bin directory, installing PostgreSQL first if needed.
fn binaries() -> PathBuf {
    if let Some(bin) = installed_binaries() {
        return bin;
    }
    install_postgresql().unwrap_or_else(|failure| panic!("{failure}"));
    installed_binaries().unwrap_or_else(|| {
        panic!("no {DEBIAN_POSTGRESQL}/*/bin/postgres even after installing postgresql")
    })
}

fn installed_binaries() -> Option<PathBuf> {
    let versions = fs::read_dir(DEBIAN_POSTGRESQL).ok()?;
    versions
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            let complete = ["initdb", "postgres"]
                .iter()
                .all(|program| bin.join(program).exists());
            complete.then_some((version, bin))
        })
        .max_by_key(|(version, _)| *version)
        .map(|(_, bin)| bin)
}

/// Debian's `postgresql` when it is missing (tests/tools/install-packages: one install at a
/// time on the machine; a second caller finds it installed).
fn install_postgresql() -> Result<(), String> {
    install_packages("postgresql", "the replica tests")
}
