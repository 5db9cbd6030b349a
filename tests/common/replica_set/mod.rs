//! A few `tickd` replicas on one throwaway PostgreSQL, the one harness of every replica
//! test: start them (some through a [`PgProxy`] that can cut them off from the database),
//! call them, kill (SIGKILL), pause (SIGSTOP), resume (SIGCONT), stop (SIGTERM) or restart
//! one in place, and explain a failure with the partition table and their logs.
//!
//! The rest of the harness sits beside this file: [`partitions`] reads the lease table
//! (who owns what, takeovers, a drained database), [`ledger`] records what clients were
//! told and checks it, [`clients`] registers and consumes through the live replicas, and
//! [`parts`] builds one replica's parts without its tasks.

pub(crate) mod clients;
pub(crate) mod ledger;
pub(crate) mod partitions;
pub(crate) mod parts;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::process::{Command, ExitStatus};
use std::time::Duration;

use tempfile::TempDir;
use tickd::proto::timers_client::TimersClient;
use tonic::transport::{Channel, Endpoint};

use super::daemon::{tickd_command, Daemon};
use super::pg_proxy::PgProxy;
use super::postgres::{explain, Postgres};
use super::wait;
use clients::{Live, ReplicaAddr};

/// Few partitions by default: the tests move all of them from one replica to another.
pub(crate) const PARTITIONS: usize = 8;
/// Short leases, so that a replica stopping hands its partitions over within seconds.
pub(crate) const LEASE_TTL: Duration = Duration::from_secs(2);
/// Timers due within this are held in their owner's wheel.
pub(crate) const LOAD_HORIZON: Duration = Duration::from_secs(5);
/// How long any awaited state may take before the test gives up: a failure bound, never a
/// synchronisation.
pub(crate) const PATIENCE: Duration = Duration::from_secs(120);
/// How often an awaited state is checked again.
pub(crate) const POLL: Duration = Duration::from_millis(50);
/// How long a stopping replica may take to drain and exit.
const EXIT_PATIENCE: Duration = Duration::from_secs(30);
/// Log lines that explain what a replica did with its partitions (shown on failures).
const NOTABLE_LOG_LINES: [&str; 8] = [
    "partitions acquired",
    "partitions lost",
    "partitions released",
    "orphaned leases released",
    "firing fenced",
    "WARN",
    "ERROR",
    "panicked",
];
/// How many of a replica's notable lines a failure report shows (the last ones).
const REPORTED_LINES: usize = 40;

/// How the replicas of one test are started: the partition count and the arguments every
/// replica gets besides the cluster's own.
pub(crate) struct Settings<'a> {
    pub(crate) partitions: usize,
    pub(crate) arguments: &'a [&'a str],
}

impl Default for Settings<'_> {
    fn default() -> Self {
        Settings {
            partitions: PARTITIONS,
            arguments: &[],
        }
    }
}

/// The replicas of one test, the database they share, and the addresses clients may use.
/// Fields drop in order: the replicas are killed before their proxies and the database go.
pub(crate) struct ReplicaSet {
    /// The replicas clients may call now, shared with the test's client tasks.
    pub(crate) live: Live,
    running: BTreeMap<String, Daemon>,
    /// Replicas killed or stopped: their logs still explain a failure.
    retired: Vec<(String, Daemon)>,
    /// The proxies some replicas reach the database through, by replica id.
    proxies: BTreeMap<String, PgProxy>,
    /// The test's own connection, for looking at the replicas' tables.
    pub(crate) db: tokio_postgres::Client,
    postgres: Postgres,
    partitions: usize,
    arguments: Vec<String>,
    /// The replicas' working directory, so nothing they write lands in the source tree.
    work_dir: TempDir,
}

impl ReplicaSet {
    /// A fresh PostgreSQL and a replica for each id (with `arguments`, and the default
    /// [`PARTITIONS`]), one after another.
    pub(crate) async fn start(ids: &[&str], arguments: &[&str]) -> ReplicaSet {
        ReplicaSet::start_with(
            Settings {
                arguments,
                ..Settings::default()
            },
            ids,
        )
        .await
    }

    /// [`ReplicaSet::start`] with other settings.
    pub(crate) async fn start_with(settings: Settings<'_>, ids: &[&str]) -> ReplicaSet {
        let postgres = Postgres::start().await;
        let db = postgres.connect().await;
        let mut set = ReplicaSet {
            live: Live::default(),
            running: BTreeMap::new(),
            retired: Vec::new(),
            proxies: BTreeMap::new(),
            db,
            postgres,
            partitions: settings.partitions,
            arguments: settings.arguments.iter().map(|&a| a.into()).collect(),
            work_dir: tempfile::tempdir().expect("temp dir"),
        };
        for id in ids {
            set.start_replica(id).await;
        }
        set
    }

    /// How many partitions the cluster has.
    pub(crate) fn partition_count(&self) -> usize {
        self.partitions
    }

    /// Starts a replica and waits until it answers calls (it serves before it has joined
    /// the cluster; calls wait for that); clients may use it from then on.
    pub(crate) async fn start_replica(&mut self, id: &str) {
        let store = self.postgres.url();
        self.start_replica_on(id, &store).await;
    }

    /// Starts a replica whose every connection to the database goes through a proxy of its
    /// own, which [`ReplicaSet::proxy`] then black-holes or resets.
    pub(crate) async fn start_replica_through_proxy(&mut self, id: &str) {
        let proxy = PgProxy::start(self.postgres.port()).await;
        let store = format!("postgres://postgres@{}/postgres", proxy.addr());
        self.proxies.insert(id.into(), proxy);
        self.start_replica_on(id, &store).await;
    }

    /// The proxy replica `id` was started through.
    pub(crate) fn proxy(&self, id: &str) -> &PgProxy {
        self.proxies
            .get(id)
            .unwrap_or_else(|| panic!("{id} was not started through a proxy"))
    }

    /// Each replica's connections carry its id as `application_name`, so that what the
    /// database runs on a replica's behalf (a trigger a test installs, `pg_stat_activity`)
    /// can tell which replica it is.
    async fn start_replica_on(&mut self, id: &str, store: &str) {
        let store = format!("{store}?application_name={id}");
        let command = self.command(id, &store);
        let daemon = tokio::task::spawn_blocking(move || Daemon::start(command))
            .await
            .expect("start replica");
        let addr = daemon.addr;
        self.running.insert(id.into(), daemon);
        self.eventually("the new replica answers calls", || {
            super::rpc::answers_calls(client_for(addr, Some(Duration::from_secs(5))), "replicas")
        })
        .await;
        self.live.insert(ReplicaAddr {
            id: id.into(),
            addr,
        });
    }

    fn command(&self, id: &str, store: &str) -> Command {
        let mut command = tickd_command();
        let horizon = format!("{}s", LOAD_HORIZON.as_secs());
        let ttl = format!("{}ms", LEASE_TTL.as_millis());
        command
            .args(["--metrics-listen", "127.0.0.1:0", "--store", store])
            .args(["--replica-id", id])
            .args(["--partitions", &self.partitions.to_string()])
            .args(["--lease-ttl", &ttl, "--load-horizon", &horizon])
            .args(&self.arguments)
            .current_dir(self.work_dir.path());
        command
    }

    /// The running process of replica `id`.
    pub(crate) fn daemon(&self, id: &str) -> &Daemon {
        self.running
            .get(id)
            .unwrap_or_else(|| panic!("no running replica {id}"))
    }

    /// The last process that ran as `id` and is gone.
    pub(crate) fn retired_daemon(&self, id: &str) -> &Daemon {
        let (_, daemon) = self
            .retired
            .iter()
            .rev()
            .find(|(retired, _)| retired == id)
            .unwrap_or_else(|| panic!("no stopped replica {id}"));
        daemon
    }

    /// The `/metrics` address of replica `id`.
    pub(crate) fn metrics_addr(&self, id: &str) -> SocketAddr {
        self.daemon(id).metrics_addr()
    }

    /// A client of replica `id`, without a request timeout (streams stay open).
    pub(crate) fn client(&self, id: &str) -> TimersClient<Channel> {
        client_for(self.daemon(id).addr, None)
    }

    /// SIGKILL. Clients stop using it first, so only calls already in flight see it die.
    pub(crate) fn kill(&mut self, id: &str) {
        self.live.remove(id);
        let mut daemon = self.running.remove(id).expect("running replica");
        daemon.kill();
        self.retired.push((id.into(), daemon));
    }

    /// SIGSTOP: the process stays, silent; clients stop using it.
    pub(crate) fn pause(&mut self, id: &str) {
        self.live.remove(id);
        self.daemon(id).signal("STOP");
    }

    /// SIGCONT, and clients may use it again.
    pub(crate) fn resume(&mut self, id: &str) {
        let daemon = self.daemon(id);
        daemon.signal("CONT");
        let addr = daemon.addr;
        self.live.insert(ReplicaAddr {
            id: id.into(),
            addr,
        });
    }

    /// SIGTERM, and the exit status once it has drained and exited.
    pub(crate) async fn stop_gracefully(&mut self, id: &str) -> ExitStatus {
        self.live.remove(id);
        let mut daemon = self.running.remove(id).expect("running replica");
        daemon.signal("TERM");
        let (daemon, status) = tokio::task::spawn_blocking(move || {
            let status = daemon.wait_for_exit(EXIT_PATIENCE);
            (daemon, status)
        })
        .await
        .expect("wait for exit");
        self.retired.push((id.into(), daemon));
        status
    }

    /// SIGTERM, requiring a clean exit.
    pub(crate) async fn stop(&mut self, id: &str) {
        let status = self.stop_gracefully(id).await;
        assert!(
            status.success(),
            "{id} exited with {status} after SIGTERM; log:\n{}",
            self.retired_daemon(id).log_text()
        );
    }

    /// SIGKILL and a new process under the same id at once, while the killed one's leases
    /// are still valid (a container restarted in place).
    pub(crate) async fn restart_in_place(&mut self, id: &str) {
        self.kill(id);
        self.start_replica(id).await;
    }

    /// Checks `condition` every [`POLL`] until it holds; after [`PATIENCE`], panics with
    /// its last explanation and [`ReplicaSet::report`].
    pub(crate) async fn eventually<F, Fut>(&self, what: &str, condition: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), String>>,
    {
        wait::eventually(what, PATIENCE, POLL, condition, || self.report()).await
    }

    /// The partition table, the row counts, and each replica's notable log lines. Never
    /// panics: it is written while a test is failing.
    pub(crate) async fn report(&self) -> String {
        let mut report = String::from("partitions (number:owner@epoch):");
        match self
            .db
            .query(
                "SELECT partition, owner, epoch FROM tickd_partitions ORDER BY 1",
                &[],
            )
            .await
        {
            Ok(rows) => {
                for row in rows {
                    let number: Option<i32> = row.try_get(0).ok();
                    let owner: Option<String> = row.try_get(1).ok().flatten();
                    let epoch: Option<i64> = row.try_get(2).ok();
                    report.push_str(&format!(
                        " {}:{}@{}",
                        number.unwrap_or(-1),
                        owner.as_deref().unwrap_or("-"),
                        epoch.unwrap_or(-1)
                    ));
                }
            }
            Err(error) => report.push_str(&format!(" ({})", explain(&error))),
        }
        for table in ["tickd_timers", "tickd_expirations WHERE acked_at IS NULL"] {
            let counted = self
                .db
                .query_one(&format!("SELECT count(*) FROM {table}"), &[])
                .await
                .map(|row| row.get::<_, i64>(0).to_string());
            report.push_str(&format!(
                "\n{table}: {}",
                counted.unwrap_or_else(|error| explain(&error))
            ));
        }
        let running = self
            .running
            .iter()
            .map(|(id, daemon)| (id, daemon, "running"));
        let retired = self.retired.iter().map(|(id, daemon)| (id, daemon, "gone"));
        for (id, daemon, state) in running.chain(retired) {
            let lines = daemon.lines_with(&NOTABLE_LOG_LINES);
            let tail = &lines[lines.len().saturating_sub(REPORTED_LINES)..];
            report.push_str(&format!(
                "\n--- {id} (pid {}, {state}), notable log lines ---\n{}",
                daemon.pid(),
                tail.join("\n")
            ));
        }
        report
    }
}

/// A client of the replica at `addr`; `timeout` bounds each call (none for streams).
pub(crate) fn client_for(addr: SocketAddr, timeout: Option<Duration>) -> TimersClient<Channel> {
    let mut endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(1));
    if let Some(timeout) = timeout {
        endpoint = endpoint.timeout(timeout);
    }
    TimersClient::new(endpoint.connect_lazy())
}

/// The stream's next expiration, failing the test rather than hanging if none comes
/// within [`PATIENCE`].
pub(crate) async fn next_in_time(
    stream: &mut tonic::Streaming<tickd::proto::SubscribeResponse>,
) -> tickd::proto::Expiration {
    tokio::time::timeout(PATIENCE, super::rpc::next_expiration(stream))
        .await
        .unwrap_or_else(|_| panic!("no delivery within {PATIENCE:?}"))
}

/// What a replica logs when it finds it lost partitions: its renewal was refused, or a
/// firing was fenced off.
const LOST_LEASE_LINES: [&str; 2] = ["partitions lost", "firing fenced"];

/// What a replica logs each time its readiness (`tickd.v1.Timers`) turns NOT_SERVING.
const NOT_READY_LINE: &str = "not ready";

/// Every line in which `daemon` said it lost partitions.
pub(crate) fn lost_lease_log(daemon: &Daemon) -> Vec<String> {
    daemon.lines_with(&LOST_LEASE_LINES)
}

/// Every line in which `daemon` said it turned NOT_SERVING.
pub(crate) fn not_ready_log(daemon: &Daemon) -> Vec<String> {
    daemon.lines_with(&[NOT_READY_LINE])
}

/// How many times `daemon` has said it lost partitions so far.
pub(crate) fn lost_lease_lines(daemon: &Daemon) -> usize {
    daemon.lines_with(&LOST_LEASE_LINES).len()
}

/// Whether `daemon` has said it lost partitions more than `before` times.
pub(crate) fn noticed_lost_leases(daemon: &Daemon, before: usize) -> Result<(), String> {
    match lost_lease_lines(daemon) {
        lines if lines > before => Ok(()),
        _ => Err(format!("no new {LOST_LEASE_LINES:?} line in its log yet")),
    }
}
