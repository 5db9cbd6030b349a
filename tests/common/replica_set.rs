//! A few `tickd` replicas on one throwaway PostgreSQL, for tests of what the replicated
//! mode serves through its API: start them, call them, stop one so that another takes its
//! partitions over, and explain a failure with the partition table and their logs.

use std::collections::BTreeMap;
use std::future::Future;
use std::process::Command;
use std::time::Duration;

use tempfile::TempDir;
use tickd::proto::timers_client::TimersClient;
use tonic::transport::{Channel, Endpoint};

use super::daemon::{tickd_command, Daemon};
use super::postgres::{explain, Postgres};
use super::wait;

/// Few partitions: the tests move all of them from one replica to another.
pub(crate) const PARTITIONS: usize = 8;
/// Short leases, so that a replica stopping hands its partitions over within seconds.
const LEASE_TTL: &str = "2s";
/// Timers due within this are held in their owner's wheel.
pub(crate) const LOAD_HORIZON: Duration = Duration::from_secs(5);
/// How long any awaited state may take before the test gives up.
pub(crate) const PATIENCE: Duration = Duration::from_secs(120);
/// How often an awaited state is checked again.
const POLL: Duration = Duration::from_millis(50);

/// The replicas of one test and the database they share. Fields drop in order: the
/// replicas are killed before the database goes.
pub(crate) struct ReplicaSet {
    running: BTreeMap<String, Daemon>,
    /// Replicas stopped: their logs still explain a failure.
    stopped: Vec<(String, Daemon)>,
    /// The test's own connection, for looking at the replicas' tables.
    pub(crate) db: tokio_postgres::Client,
    postgres: Postgres,
    /// Arguments every replica gets besides the cluster's own.
    arguments: Vec<String>,
    /// The replicas' working directory, so nothing they write lands in the source tree.
    work_dir: TempDir,
}

impl ReplicaSet {
    /// A fresh PostgreSQL and a replica for each id (with `arguments`), one after another.
    pub(crate) async fn start(ids: &[&str], arguments: &[&str]) -> ReplicaSet {
        let postgres = Postgres::start().await;
        let db = postgres.connect().await;
        let mut set = ReplicaSet {
            running: BTreeMap::new(),
            stopped: Vec::new(),
            db,
            postgres,
            arguments: arguments.iter().map(|&argument| argument.into()).collect(),
            work_dir: tempfile::tempdir().expect("temp dir"),
        };
        for id in ids {
            set.start_replica(id).await;
        }
        set
    }

    /// Starts a replica and waits until it answers calls (it serves before it has joined
    /// the cluster; calls wait for that).
    pub(crate) async fn start_replica(&mut self, id: &str) {
        let command = self.command(id);
        let daemon = tokio::task::spawn_blocking(move || Daemon::start(command))
            .await
            .expect("start replica");
        let client = client_at(&daemon, Some(Duration::from_secs(5)));
        self.running.insert(id.into(), daemon);
        self.eventually("the new replica answers calls", || {
            super::rpc::answers_calls(client.clone(), "replica-set")
        })
        .await;
    }

    fn command(&self, id: &str) -> Command {
        let mut command = tickd_command();
        let horizon = format!("{}s", LOAD_HORIZON.as_secs());
        command
            .args([
                "--metrics-listen",
                "127.0.0.1:0",
                "--store",
                &self.postgres.url(),
            ])
            .args(["--replica-id", id, "--partitions", &PARTITIONS.to_string()])
            .args(["--lease-ttl", LEASE_TTL, "--load-horizon", &horizon])
            .args(&self.arguments)
            .current_dir(self.work_dir.path());
        command
    }

    fn daemon(&self, id: &str) -> &Daemon {
        self.running
            .get(id)
            .unwrap_or_else(|| panic!("no running replica {id}"))
    }

    /// The `/metrics` address of replica `id`.
    pub(crate) fn metrics_addr(&self, id: &str) -> std::net::SocketAddr {
        self.daemon(id).metrics_addr()
    }

    /// A client of replica `id`.
    pub(crate) fn client(&self, id: &str) -> TimersClient<Channel> {
        client_at(self.daemon(id), None)
    }

    /// SIGTERM: the replica drains, hands its partitions back and exits; returns once it
    /// has.
    pub(crate) async fn stop(&mut self, id: &str) {
        let mut daemon = self.running.remove(id).expect("running replica");
        daemon.signal("TERM");
        let daemon = tokio::task::spawn_blocking(move || {
            daemon.wait_for_exit(PATIENCE);
            daemon
        })
        .await
        .expect("wait for exit");
        self.stopped.push((id.into(), daemon));
    }

    /// Whether replica `id` holds an unexpired lease on every partition.
    pub(crate) async fn owns_every_partition(&self, id: &str) -> Result<(), String> {
        let owned: i64 = self
            .db
            .query_one(
                "SELECT count(*) FROM tickd_partitions WHERE owner = $1 AND lease_until > now()",
                &[&id],
            )
            .await
            .map_err(|error| explain(&error))?
            .get(0);
        match owned as usize {
            PARTITIONS => Ok(()),
            owned => Err(format!("{id} holds {owned} of {PARTITIONS} partitions")),
        }
    }

    /// Checks `condition` every [`POLL`] until it holds; after [`PATIENCE`], panics with
    /// its last explanation, the partition table and the replicas' logs.
    pub(crate) async fn eventually<F, Fut>(&self, what: &str, condition: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), String>>,
    {
        wait::eventually(what, PATIENCE, POLL, condition, || self.report()).await
    }

    /// The partition table and each replica's log. Never panics: it is written while a
    /// test is failing.
    pub(crate) async fn report(&self) -> String {
        let partitions = self
            .db
            .query(
                "SELECT partition, coalesce(owner, '-'), epoch FROM tickd_partitions ORDER BY 1",
                &[],
            )
            .await
            .map(|rows| {
                rows.iter()
                    .map(|row| {
                        let (number, owner, epoch): (i32, String, i64) =
                            (row.get(0), row.get(1), row.get(2));
                        format!("{number}:{owner}@{epoch}")
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|error| explain(&error));
        let mut report = format!("partitions (number:owner@epoch): {partitions}");
        let running = self
            .running
            .iter()
            .map(|(id, daemon)| (id, daemon, "running"));
        let stopped = self
            .stopped
            .iter()
            .map(|(id, daemon)| (id, daemon, "stopped"));
        for (id, daemon, state) in running.chain(stopped) {
            report.push_str(&format!(
                "\n--- {id} (pid {}, {state}) ---\n{}",
                daemon.pid(),
                daemon.log_text()
            ));
        }
        report
    }
}

fn client_at(daemon: &Daemon, timeout: Option<Duration>) -> TimersClient<Channel> {
    let mut endpoint = Endpoint::from_shared(format!("http://{}", daemon.addr))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(1));
    if let Some(timeout) = timeout {
        endpoint = endpoint.timeout(timeout);
    }
    TimersClient::new(endpoint.connect_lazy())
}
