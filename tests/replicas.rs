//! Replicated mode: several `tickd` processes sharing one PostgreSQL database (`--store
//! postgres://...`), each firing the timers of the partitions it holds a lease on.
//!
//! Replicas must keep the single-node contract whatever happens to them: every acknowledged
//! registration fires, and fires once. A timer's firing is identified by its `fired_at`:
//! two owners firing the same timer would show two `fired_at` values and two first
//! deliveries (attempt 1). Redeliveries (attempt > 1, same `fired_at`) are allowed, since a
//! claim can be lost with the replica holding it.
//!
//! Each test starts a real PostgreSQL and real `tickd` processes, registers through all
//! replicas, consumes through all of them (acknowledging everything), and then:
//!
//! - shared work: three replicas split the partitions, and fire each timer once;
//! - SIGKILL: the partitions of a dead replica are taken over once its leases lapse, and its
//!   timers still fire once;
//! - SIGSTOP: an owner paused past its lease is fenced off when it resumes, so its wheel
//!   cannot fire again what the new owner already fired;
//! - rolling restart: each replica in turn drains (SIGTERM), releases its partitions and
//!   comes back under the same id, and nothing is lost.
//!
//! Waits poll for the awaited event (database rows, log lines, deliveries) with a generous
//! deadline; nothing here depends on how fast the machine is.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::{ready, Future};
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::daemon::{tickd_command, Daemon};
use common::postgres::{explain, Postgres};
use common::tooling::skip_postgres;
use common::wait;
use common::*;
use tempfile::TempDir;
use tickd::proto::timers_client::TimersClient;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tonic::transport::{Channel, Endpoint};

const NAMESPACE: &str = "replicas";
const PARTITIONS: usize = 16;
/// Short leases, so takeovers happen within seconds.
const LEASE_TTL: &str = "2s";
/// Timers due within this are held in the owner's wheel (test 3 relies on it).
const LOAD_HORIZON: &str = "5s";
/// How long any awaited event may take before the test gives up.
const PATIENCE: Duration = Duration::from_secs(120);
/// How often an awaited condition is checked again.
const POLL: Duration = Duration::from_millis(50);
/// How long a stopping replica may take to drain and exit.
const EXIT_PATIENCE: Duration = Duration::from_secs(30);
const ACK_TIMEOUT_MS: u64 = 5_000;
const MAX_UNACKED: u32 = 1_000;
/// Pause between registrations of a continuous load: a steady trickle, not a flood.
const LOAD_PACE: Duration = Duration::from_millis(20);
/// Pause before a subscriber tries another replica, so a dead one is not hammered.
const RECONNECT_PAUSE: Duration = Duration::from_millis(50);
/// Log lines that explain what a replica did with its partitions (shown on failures).
const NOTABLE_LOG_LINES: [&str; 7] = [
    "partitions acquired",
    "partitions lost",
    "partitions released",
    "firing fenced",
    "WARN",
    "ERROR",
    "panicked",
];

// ---------------------------------------------------------------- the tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_fixture_answers_queries() {
    if skip_postgres("postgres_fixture_answers_queries") {
        return;
    }
    let postgres = Postgres::start().await;
    let rows = postgres.query("SELECT 40 + 2").await;
    let answer: i32 = rows[0].get(0);
    assert_eq!(answer, 42);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_fire_each_timer_once() {
    if skip_postgres("three_replicas_fire_each_timer_once") {
        return;
    }
    const IDS: [&str; 3] = ["r1", "r2", "r3"];
    let cluster = Cluster::start(&IDS).await;
    let ledger = SharedLedger::default();
    let consumers = consume_on_each(&cluster, &ledger, &IDS);

    Registrar::new(&cluster, &ledger, 200..=3_000)
        .register(300)
        .await;
    assert_all_registered(&ledger, 300);

    cluster.wait_until_delivered(&ledger).await;
    cluster
        .eventually("each of the three replicas owns a partition", || {
            cluster.each_owns_a_partition(&IDS)
        })
        .await;
    settle_and_check(&cluster, &ledger, consumers, FirstDeliveries::ExactlyOne).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_replica_partitions_are_taken_over() {
    if skip_postgres("killed_replica_partitions_are_taken_over") {
        return;
    }
    const IDS: [&str; 3] = ["r1", "r2", "r3"];
    const VICTIM: &str = "r2";
    let mut cluster = Cluster::start(&IDS).await;
    let ledger = SharedLedger::default();
    let consumers = consume_on_each(&cluster, &ledger, &IDS);
    let registrations = Background::new();
    let registrar = Registrar::new(&cluster, &ledger, 500..=4_000);
    registrations.spawn(registrar.run_until(registrations.stop_signal()));

    // Kill only once the victim owns partitions and timers are pending everywhere.
    cluster
        .eventually("each replica owns a partition", || {
            cluster.each_owns_a_partition(&IDS)
        })
        .await;
    cluster
        .eventually("100 registrations acknowledged", || {
            ready(registered_at_least(&ledger, 100))
        })
        .await;
    let victim_epochs = cluster.partitions_owned_by(VICTIM).await;
    assert!(!victim_epochs.is_empty(), "{VICTIM} owns no partition");
    let killed_at = Instant::now();
    cluster.kill(VICTIM);
    let registered_at_kill = ledger.lock().unwrap().registered.len();

    cluster
        .eventually(
            "the killed replica's partitions owned by the others",
            || cluster.taken_over(VICTIM, &victim_epochs),
        )
        .await;
    eprintln!(
        "takeover of {} partitions: {:?} from SIGKILL (lease ttl {LEASE_TTL})",
        victim_epochs.len(),
        killed_at.elapsed()
    );
    assert_epochs_increased(&victim_epochs, &cluster.partitions().await);

    cluster
        .eventually("100 more registrations through the survivors", || {
            ready(registered_at_least(&ledger, registered_at_kill + 100))
        })
        .await;
    registrations.stop().await;
    // The victim may have claimed a first delivery that never reached its subscriber.
    settle_and_check(&cluster, &ledger, consumers, FirstDeliveries::AtMostOne).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_owner_cannot_fire_after_losing_its_lease() {
    if skip_postgres("paused_owner_cannot_fire_after_losing_its_lease") {
        return;
    }
    const PAUSED: &str = "a";
    const SUCCESSOR: &str = "b";
    let mut cluster = Cluster::start(&[PAUSED]).await;
    cluster
        .eventually("the first replica owns every partition", || {
            cluster.owns_every_partition(PAUSED)
        })
        .await;
    let ledger = SharedLedger::default();
    // Due within the load horizon: the paused owner holds them all in its wheel.
    Registrar::new(&cluster, &ledger, 3_800..=4_200)
        .register(50)
        .await;
    assert_all_registered(&ledger, 50);

    cluster.pause(PAUSED);
    let paused_at = Instant::now();
    cluster.start_replica(SUCCESSOR).await;
    let consumers = consume_on_each(&cluster, &ledger, &[SUCCESSOR]);
    cluster
        .eventually("the successor owns every partition", || {
            cluster.owns_every_partition(SUCCESSOR)
        })
        .await;
    eprintln!(
        "successor owns every partition {:?} after the pause",
        paused_at.elapsed()
    );
    cluster.wait_until_delivered(&ledger).await;
    assert_all_delivered_by(&ledger.lock().unwrap(), SUCCESSOR);

    // Resumed, the paused owner finds its timers overdue; it must notice the lost leases.
    cluster.resume(PAUSED);
    consumers.spawn(consume(
        PAUSED.into(),
        cluster.live.clone(),
        ledger.clone(),
        consumers.stop_signal(),
    ));
    cluster
        .eventually(
            "the resumed owner fences its firings or drops its leases",
            || ready(noticed_lost_leases(cluster.daemon(PAUSED))),
        )
        .await;
    // By the time it holds a partition again, any stale firing would have been made.
    cluster
        .eventually("the resumed owner owns a partition again", || {
            cluster.owns_a_partition(PAUSED)
        })
        .await;
    cluster.wait_until_drained().await;
    consumers.stop().await;

    eprintln!(
        "resumed owner's log:\n{}",
        cluster
            .daemon(PAUSED)
            .lines_with(&["partitions lost", "firing fenced"])
            .join("\n")
    );
    let ledger = ledger.lock().unwrap();
    eprintln!("{}", ledger.summary());
    assert_each_timer_fired_once(&ledger, FirstDeliveries::ExactlyOne);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_loses_nothing() {
    if skip_postgres("rolling_restart_loses_nothing") {
        return;
    }
    const IDS: [&str; 3] = ["r1", "r2", "r3"];
    let mut cluster = Cluster::start(&IDS).await;
    let ledger = SharedLedger::default();
    let consumers = consume_on_each(&cluster, &ledger, &IDS);
    Registrar::new(&cluster, &ledger, 1_000..=15_000)
        .register(300)
        .await;
    assert_all_registered(&ledger, 300);
    // Restart only once every replica has partitions to hand over.
    cluster
        .eventually("each replica owns a partition", || {
            cluster.each_owns_a_partition(&IDS)
        })
        .await;
    let registrations = Background::new();
    let registrar = Registrar::new(&cluster, &ledger, 1_000..=5_000);
    registrations.spawn(registrar.run_until(registrations.stop_signal()));

    for id in IDS {
        let started = Instant::now();
        restart(&mut cluster, id).await;
        eprintln!(
            "{id} restarted and owning partitions in {:?}",
            started.elapsed()
        );
    }
    registrations.stop().await;
    // Streams a draining replica ends may take a claimed first delivery with them.
    settle_and_check(&cluster, &ledger, consumers, FirstDeliveries::AtMostOne).await;
}

/// SIGTERM: the replica must exit 0, having released its leases on the way out (not left
/// them to expire); then a new process with the same id must win partitions again.
async fn restart(cluster: &mut Cluster, id: &str) {
    let status = cluster.stop_gracefully(id).await;
    assert!(
        status.success(),
        "{id} exited with {status} after SIGTERM; log:\n{}",
        cluster.retired_daemon(id).log_text()
    );
    if let Err(held) = cluster.holds_no_lease(id).await {
        panic!(
            "{held} after a clean exit; log:\n{}",
            cluster.retired_daemon(id).log_text()
        );
    }
    cluster.start_replica(id).await;
    cluster
        .eventually("the restarted replica owns a partition", || {
            cluster.owns_a_partition(id)
        })
        .await;
}

// ---------------------------------------------------------------- assertions

enum FirstDeliveries {
    /// Nothing was lost in transit: each timer's attempt 1 was seen.
    ExactlyOne,
    /// A replica died or drained holding claims: a first delivery may never have arrived,
    /// and its redelivery came instead.
    AtMostOne,
}

/// Every acknowledged registration was delivered; each timer was fired once (one `fired_at`)
/// and first delivered at most once (or exactly once, per `first`).
/// Ends a test's traffic: waits until every acknowledged timer is delivered and the
/// database holds nothing pending or unacknowledged, stops the consumers, and checks that
/// each timer fired once.
async fn settle_and_check(
    cluster: &Cluster,
    ledger: &SharedLedger,
    consumers: Background,
    first: FirstDeliveries,
) {
    cluster.wait_until_delivered(ledger).await;
    cluster.wait_until_drained().await;
    consumers.stop().await;
    let ledger = ledger.lock().unwrap();
    eprintln!("{}", ledger.summary());
    assert_each_timer_fired_once(&ledger, first);
}

fn assert_each_timer_fired_once(ledger: &Ledger, first: FirstDeliveries) {
    let undelivered = ledger.undelivered();
    assert!(
        undelivered.is_empty(),
        "{} acknowledged registrations never delivered: {undelivered:?}",
        undelivered.len()
    );
    let mut violations = Vec::new();
    for (id, deliveries) in ledger.deliveries_by_timer() {
        let firings: BTreeSet<i128> = deliveries.iter().map(|d| d.fired_at).collect();
        let first_deliveries = deliveries.iter().filter(|d| d.attempt == 1).count();
        let first_ok = match first {
            FirstDeliveries::ExactlyOne => first_deliveries == 1,
            FirstDeliveries::AtMostOne => first_deliveries <= 1,
        };
        if firings.len() != 1 || !first_ok {
            violations.push(format!(
                "timer {id}: {} firings, {first_deliveries} first deliveries: {deliveries:?}",
                firings.len()
            ));
        }
    }
    assert!(
        violations.is_empty(),
        "{} timers fired more than once or delivered first more than once:\n{}",
        violations.len(),
        violations.join("\n")
    );
}

/// With every replica up, every registration is acknowledged.
fn assert_all_registered(ledger: &SharedLedger, count: usize) {
    let ledger = ledger.lock().unwrap();
    assert_eq!(
        ledger.registered.len(),
        count,
        "a healthy cluster refused registrations: {}",
        ledger.summary()
    );
}

fn assert_all_delivered_by(ledger: &Ledger, replica: &str) {
    let elsewhere: Vec<&Delivery> = ledger
        .deliveries
        .iter()
        .filter(|delivery| delivery.replica != replica)
        .collect();
    assert!(
        elsewhere.is_empty(),
        "deliveries from a replica other than {replica}: {elsewhere:?}"
    );
}

/// A takeover moves a partition to a new epoch, which fences the previous owner.
fn assert_epochs_increased(before: &BTreeMap<i32, i64>, after: &[Partition]) {
    for partition in after {
        if let Some(old_epoch) = before.get(&partition.number) {
            assert!(
                partition.epoch > *old_epoch,
                "partition {} taken over by {:?} but its epoch went from {old_epoch} to {}",
                partition.number,
                partition.owner,
                partition.epoch
            );
        }
    }
}

fn registered_at_least(ledger: &SharedLedger, count: usize) -> Result<(), String> {
    let registered = ledger.lock().unwrap().registered.len();
    if registered >= count {
        Ok(())
    } else {
        Err(format!(
            "{registered} of {count} registrations acknowledged"
        ))
    }
}

fn noticed_lost_leases(daemon: &Daemon) -> Result<(), String> {
    logged(daemon, "firing fenced").or_else(|_| logged(daemon, "partitions lost"))
}

fn logged(daemon: &Daemon, needle: &str) -> Result<(), String> {
    if daemon.count(needle) > 0 {
        Ok(())
    } else {
        Err(format!("no \"{needle}\" in the log yet"))
    }
}

// ---------------------------------------------------------------- the cluster

/// The replicas of one test, the database they share, and the addresses clients may use.
///
/// Fields drop in order: the replicas are killed before the database goes.
struct Cluster {
    live: Live,
    replicas: BTreeMap<String, Daemon>,
    /// Replicas killed or stopped: their logs still explain a failure.
    retired: Vec<(String, Daemon)>,
    /// The test's own connection, for looking at the replicas' tables.
    db: tokio_postgres::Client,
    postgres: Postgres,
    /// The replicas' working directory, so nothing they write lands in the source tree.
    work_dir: TempDir,
}

/// One row of `tickd_partitions`.
#[derive(Debug)]
struct Partition {
    number: i32,
    owner: Option<String>,
    epoch: i64,
}

impl Cluster {
    /// A fresh PostgreSQL with a replica for each id, started one after another.
    async fn start(ids: &[&str]) -> Cluster {
        let postgres = Postgres::start().await;
        let db = postgres.connect().await;
        let mut cluster = Cluster {
            live: Live::default(),
            replicas: BTreeMap::new(),
            retired: Vec::new(),
            db,
            postgres,
            work_dir: tempfile::tempdir().expect("temp dir"),
        };
        for id in ids {
            cluster.start_replica(id).await;
        }
        cluster
    }

    /// Starts a replica and waits until it answers calls; clients may use it from then on.
    async fn start_replica(&mut self, id: &str) {
        let command = replica_command(&self.postgres.url(), id, self.work_dir.path());
        let daemon = tokio::task::spawn_blocking(move || Daemon::start(command))
            .await
            .expect("start replica");
        let addr = daemon.addr;
        self.replicas.insert(id.into(), daemon);
        // It logs "tickd serving" once listening, before it has migrated the schema and
        // joined the cluster; calls wait for that.
        self.eventually("the new replica answers calls", || answers_calls(addr))
            .await;
        self.live.insert(ReplicaAddr {
            id: id.into(),
            addr,
        });
    }

    fn daemon(&self, id: &str) -> &Daemon {
        self.replicas
            .get(id)
            .unwrap_or_else(|| panic!("no running replica {id}"))
    }

    /// The last process that ran as `id` and is gone.
    fn retired_daemon(&self, id: &str) -> &Daemon {
        let (_, daemon) = self
            .retired
            .iter()
            .rev()
            .find(|(retired, _)| retired == id)
            .unwrap_or_else(|| panic!("no stopped replica {id}"));
        daemon
    }

    /// Clients stop using it first, so only calls already in flight see it die.
    fn kill(&mut self, id: &str) {
        self.live.remove(id);
        let mut daemon = self.replicas.remove(id).expect("running replica");
        daemon.kill();
        self.retired.push((id.into(), daemon));
    }

    fn pause(&mut self, id: &str) {
        self.live.remove(id);
        self.daemon(id).signal("STOP");
    }

    fn resume(&mut self, id: &str) {
        let daemon = self.daemon(id);
        daemon.signal("CONT");
        let addr = daemon.addr;
        self.live.insert(ReplicaAddr {
            id: id.into(),
            addr,
        });
    }

    /// SIGTERM, and the exit status once it has drained.
    async fn stop_gracefully(&mut self, id: &str) -> ExitStatus {
        self.live.remove(id);
        let mut daemon = self.replicas.remove(id).expect("running replica");
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

    /// Checks `condition` every [`POLL`] until it holds; after [`PATIENCE`], panics with its
    /// last explanation and the state of the database and the replicas.
    async fn eventually<F, Fut>(&self, what: &str, condition: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), String>>,
    {
        wait::eventually(what, PATIENCE, POLL, condition, || self.report()).await
    }

    async fn wait_until_delivered(&self, ledger: &SharedLedger) {
        self.eventually("every acknowledged registration delivered", || {
            let undelivered = ledger.lock().unwrap().undelivered().len();
            ready(match undelivered {
                0 => Ok(()),
                _ => Err(format!("{undelivered} not delivered yet")),
            })
        })
        .await;
    }

    /// Nothing pending and nothing awaiting an ack: whatever was going to fire has fired, and
    /// reached a subscriber.
    async fn wait_until_drained(&self) {
        self.eventually("no timer pending and no expiration unacknowledged", || {
            self.drained()
        })
        .await;
    }

    async fn drained(&self) -> Result<(), String> {
        let timers = self.count_rows("tickd_timers").await;
        // Acknowledged rows stay a while for observers; they are settled.
        let expirations = self
            .count_rows("tickd_expirations WHERE acked_at IS NULL")
            .await;
        if timers == 0 && expirations == 0 {
            Ok(())
        } else {
            Err(format!(
                "{timers} timers pending, {expirations} expirations unacknowledged"
            ))
        }
    }

    async fn count_rows(&self, table: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM {table}");
        let row = self
            .db
            .query_one(&sql, &[])
            .await
            .unwrap_or_else(|error| panic!("{sql}: {}", explain(&error)));
        row.get(0)
    }

    async fn partitions(&self) -> Vec<Partition> {
        let sql = "SELECT partition, owner, epoch FROM tickd_partitions ORDER BY partition";
        let rows = self
            .db
            .query(sql, &[])
            .await
            .unwrap_or_else(|error| panic!("{sql}: {}", explain(&error)));
        rows.iter()
            .map(|row| Partition {
                number: row.get("partition"),
                owner: row.get("owner"),
                epoch: row.get("epoch"),
            })
            .collect()
    }

    /// Partition → epoch, for the partitions `id` owns now.
    async fn partitions_owned_by(&self, id: &str) -> BTreeMap<i32, i64> {
        self.partitions()
            .await
            .into_iter()
            .filter(|partition| partition.owner.as_deref() == Some(id))
            .map(|partition| (partition.number, partition.epoch))
            .collect()
    }

    async fn each_owns_a_partition(&self, ids: &[&str]) -> Result<(), String> {
        let partitions = self.partitions().await;
        let idle: Vec<&str> = ids
            .iter()
            .copied()
            .filter(|id| {
                !partitions
                    .iter()
                    .any(|partition| partition.owner.as_deref() == Some(*id))
            })
            .collect();
        if idle.is_empty() {
            Ok(())
        } else {
            Err(format!("no partition owned by {idle:?}"))
        }
    }

    async fn owns_a_partition(&self, id: &str) -> Result<(), String> {
        self.each_owns_a_partition(&[id]).await
    }

    async fn owns_every_partition(&self, id: &str) -> Result<(), String> {
        let owned = self.partitions_owned_by(id).await.len();
        if owned == PARTITIONS {
            Ok(())
        } else {
            Err(format!("{id} owns {owned} of {PARTITIONS} partitions"))
        }
    }

    /// Every partition `victim` owned before is owned by another replica.
    async fn taken_over(&self, victim: &str, before: &BTreeMap<i32, i64>) -> Result<(), String> {
        let partitions = self.partitions().await;
        let not_yet: Vec<&Partition> = partitions
            .iter()
            .filter(|partition| before.contains_key(&partition.number))
            .filter(|partition| {
                partition
                    .owner
                    .as_deref()
                    .is_none_or(|owner| owner == victim)
            })
            .collect();
        if not_yet.is_empty() && partitions.len() == PARTITIONS {
            Ok(())
        } else {
            Err(format!("not taken over yet: {not_yet:?}"))
        }
    }

    /// No unexpired lease in `id`'s name (its rows may keep the name with a past lease).
    async fn holds_no_lease(&self, id: &str) -> Result<(), String> {
        let sql = "SELECT partition FROM tickd_partitions WHERE owner = $1 AND lease_until > now()";
        let rows = self
            .db
            .query(sql, &[&id])
            .await
            .unwrap_or_else(|error| panic!("{sql}: {}", explain(&error)));
        let held: Vec<i32> = rows.iter().map(|row| row.get(0)).collect();
        if held.is_empty() {
            Ok(())
        } else {
            Err(format!("{id} still holds leases on partitions {held:?}"))
        }
    }

    /// The partition table, the row counts, and each replica's notable log lines. Never
    /// panics: it is written while a test is failing.
    async fn report(&self) -> String {
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
            .replicas
            .iter()
            .map(|(id, daemon)| (id, daemon, "running"));
        let retired = self.retired.iter().map(|(id, daemon)| (id, daemon, "gone"));
        for (id, daemon, state) in running.chain(retired) {
            let lines = daemon.lines_with(&NOTABLE_LOG_LINES);
            let tail = &lines[lines.len().saturating_sub(30)..];
            report.push_str(&format!(
                "\n--- {id} (pid {}, {state}), notable log lines ---\n{}",
                daemon.pid(),
                tail.join("\n")
            ));
        }
        report
    }
}

async fn answers_calls(addr: SocketAddr) -> Result<(), String> {
    let mut client = client_for(addr, Some(Duration::from_secs(5)));
    let request = PendingRequest {
        namespace: NAMESPACE.into(),
        ..Default::default()
    };
    match client.pending(request).await {
        Ok(_) => Ok(()),
        Err(status) => Err(format!("Pending: {status}")),
    }
}

fn replica_command(store: &str, id: &str, work_dir: &Path) -> Command {
    let mut command = tickd_command();
    command
        .args(["--metrics-listen", "127.0.0.1:0", "--store", store])
        .args(["--replica-id", id, "--partitions", &PARTITIONS.to_string()])
        .args(["--lease-ttl", LEASE_TTL, "--load-horizon", LOAD_HORIZON])
        .current_dir(work_dir);
    command
}

/// A replica clients may call.
#[derive(Clone, Debug)]
struct ReplicaAddr {
    id: String,
    addr: SocketAddr,
}

/// The replicas clients may use right now, shared between a test and its client tasks: a
/// replica is taken out before it is killed, paused or stopped.
#[derive(Clone, Default)]
struct Live(Arc<Mutex<Vec<ReplicaAddr>>>);

impl Live {
    fn insert(&self, replica: ReplicaAddr) {
        let mut live = self.0.lock().unwrap();
        live.retain(|other| other.id != replica.id);
        live.push(replica);
    }

    fn remove(&self, id: &str) {
        self.0.lock().unwrap().retain(|replica| replica.id != id);
    }

    /// The live replica for call number `turn`, round robin.
    fn in_turn(&self, turn: usize) -> Option<ReplicaAddr> {
        let live = self.0.lock().unwrap();
        (!live.is_empty()).then(|| live[turn % live.len()].clone())
    }

    /// `home` while it is live, otherwise another live replica, a different one each turn.
    fn home_or_other(&self, home: &str, turn: usize) -> Option<ReplicaAddr> {
        let at_home = self
            .0
            .lock()
            .unwrap()
            .iter()
            .find(|r| r.id == home)
            .cloned();
        at_home.or_else(|| self.in_turn(turn))
    }
}

fn client_for(addr: SocketAddr, timeout: Option<Duration>) -> TimersClient<Channel> {
    let mut endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(1));
    if let Some(timeout) = timeout {
        endpoint = endpoint.timeout(timeout);
    }
    TimersClient::new(endpoint.connect_lazy())
}

// ---------------------------------------------------------------- clients and their ledger

/// One expiration as a subscriber received it.
#[derive(Clone, Debug)]
struct Delivery {
    timer_id: String,
    fired_at: i128,
    attempt: u32,
    /// The replica whose stream it came on.
    replica: String,
}

/// What the clients were told.
#[derive(Default)]
struct Ledger {
    /// Registrations a replica acknowledged: timer id → deadline (unix nanos).
    registered: BTreeMap<String, i128>,
    register_errors: u64,
    deliveries: Vec<Delivery>,
    /// Acks that failed or named a delivery no longer awaiting one, counted by reason: each
    /// means a redelivery.
    lost_acks: BTreeMap<String, u64>,
}

type SharedLedger = Arc<Mutex<Ledger>>;

impl Ledger {
    fn undelivered(&self) -> Vec<String> {
        let delivered: BTreeSet<&str> = self
            .deliveries
            .iter()
            .map(|d| d.timer_id.as_str())
            .collect();
        self.registered
            .keys()
            .filter(|id| !delivered.contains(id.as_str()))
            .cloned()
            .collect()
    }

    fn deliveries_by_timer(&self) -> BTreeMap<&str, Vec<&Delivery>> {
        let mut by_timer: BTreeMap<&str, Vec<&Delivery>> = BTreeMap::new();
        for delivery in &self.deliveries {
            by_timer
                .entry(&delivery.timer_id)
                .or_default()
                .push(delivery);
        }
        by_timer
    }

    fn summary(&self) -> String {
        let mut per_replica: BTreeMap<&str, usize> = BTreeMap::new();
        for delivery in &self.deliveries {
            *per_replica.entry(&delivery.replica).or_default() += 1;
        }
        let redeliveries = self.deliveries.iter().filter(|d| d.attempt > 1).count();
        format!(
            "{} registrations acknowledged ({} failed), {} deliveries ({redeliveries} \
             redeliveries), per replica: {per_replica:?}, lost acks: {:?}",
            self.registered.len(),
            self.register_errors,
            self.deliveries.len(),
            self.lost_acks
        )
    }
}

/// Registers timers through the live replicas in turn, recording each acknowledged one.
struct Registrar {
    live: Live,
    ledger: SharedLedger,
    /// Delays (ms), spread evenly over this range.
    delays: RangeInclusive<u64>,
    clients: HashMap<SocketAddr, TimersClient<Channel>>,
    sequence: u64,
}

impl Registrar {
    fn new(cluster: &Cluster, ledger: &SharedLedger, delays: RangeInclusive<u64>) -> Registrar {
        Registrar {
            live: cluster.live.clone(),
            ledger: ledger.clone(),
            delays,
            clients: HashMap::new(),
            sequence: 0,
        }
    }

    async fn register(&mut self, count: usize) {
        for _ in 0..count {
            self.register_one().await;
        }
    }

    /// Registers at a steady pace until `stop`.
    async fn run_until(mut self, mut stop: watch::Receiver<bool>) {
        while !*stop.borrow() {
            self.register_one().await;
            tokio::select! {
                () = tokio::time::sleep(LOAD_PACE) => {}
                _ = stop.wait_for(|stopped| *stopped) => {}
            }
        }
    }

    /// One registration through the next live replica; an error (the replica died under
    /// the call) leaves the outcome unknown, so the timer is not required to fire.
    async fn register_one(&mut self) {
        self.sequence += 1;
        let Some(replica) = self.live.in_turn(self.sequence as usize) else {
            tokio::time::sleep(POLL).await;
            return;
        };
        let mut client = self
            .clients
            .entry(replica.addr)
            .or_insert_with(|| client_for(replica.addr, Some(Duration::from_secs(10))))
            .clone();
        let request = NewTimeoutRequest {
            timer: Some(spec(NAMESPACE, self.next_delay(), b"")),
        };
        let answer = client.new_timeout(request).await;
        let mut ledger = self.ledger.lock().unwrap();
        match answer {
            Ok(response) => {
                let timer = response.into_inner().timer.expect("timer");
                let deadline = unix_nanos(timer.deadline.as_ref().expect("deadline"));
                ledger.registered.insert(timer.id, deadline);
            }
            Err(_) => ledger.register_errors += 1,
        }
    }

    /// Spreads delays over the range with a stride coprime to most ranges' lengths.
    fn next_delay(&self) -> u64 {
        let span = self.delays.end() - self.delays.start() + 1;
        self.delays.start() + (self.sequence * 7_919) % span
    }
}

/// Subscribes on `home` (or, while it is down, on another live replica), moving to another
/// live replica whenever the stream ends or fails, until `stop`. Each delivery is recorded,
/// then acknowledged at once on the replica it came from.
async fn consume(home: String, live: Live, ledger: SharedLedger, mut stop: watch::Receiver<bool>) {
    let mut turn = 0;
    while !*stop.borrow() {
        turn += 1;
        if let Some(replica) = live.home_or_other(&home, turn) {
            tokio::select! {
                () = consume_from(&replica, &ledger) => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
        }
        tokio::select! {
            () = tokio::time::sleep(RECONNECT_PAUSE) => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
    }
}

/// One subscription, until its stream ends or fails.
async fn consume_from(replica: &ReplicaAddr, ledger: &SharedLedger) {
    // No request timeout: it would cut the stream.
    let mut client = client_for(replica.addr, None);
    let request = SubscribeRequest {
        namespace: NAMESPACE.into(),
        ack_timeout: Some(millis(ACK_TIMEOUT_MS)),
        max_unacked: MAX_UNACKED,
        ..Default::default()
    };
    let Ok(response) = client.subscribe(request).await else {
        return;
    };
    let mut stream = response.into_inner();
    while let Ok(Some(message)) = stream.message().await {
        let Some(expiration) = message.expiration else {
            continue;
        };
        let delivery = Delivery {
            timer_id: expiration.timer.as_ref().expect("timer").id.clone(),
            fired_at: unix_nanos(expiration.fired_at.as_ref().expect("fired_at")),
            attempt: expiration.attempt,
            replica: replica.id.clone(),
        };
        ledger.lock().unwrap().deliveries.push(delivery);
        let answer = client
            .ack(AckRequest {
                namespace: NAMESPACE.into(),
                delivery_ids: vec![expiration.delivery_id],
            })
            .await;
        // A lost ack only means a redelivery later.
        let lost = match answer {
            Ok(response) if response.get_ref().unknown.is_empty() => None,
            Ok(_) => Some("not awaiting an ack".to_string()),
            Err(status) => Some(format!("{:?}: {}", status.code(), status.message())),
        };
        if let Some(reason) = lost {
            *ledger.lock().unwrap().lost_acks.entry(reason).or_default() += 1;
        }
    }
}

/// A subscriber on each of `ids`, running in the background.
fn consume_on_each(cluster: &Cluster, ledger: &SharedLedger, ids: &[&str]) -> Background {
    let consumers = Background::new();
    for id in ids {
        consumers.spawn(consume(
            id.to_string(),
            cluster.live.clone(),
            ledger.clone(),
            consumers.stop_signal(),
        ));
    }
    consumers
}

/// Client tasks sharing one stop signal.
struct Background {
    stop: watch::Sender<bool>,
    tasks: Mutex<JoinSet<()>>,
}

impl Background {
    fn new() -> Background {
        Background {
            stop: watch::Sender::new(false),
            tasks: Mutex::new(JoinSet::new()),
        }
    }

    fn stop_signal(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.lock().unwrap().spawn(task);
    }

    /// Signals stop, and waits for every task (a task's panic fails the test here).
    async fn stop(self) {
        self.stop.send_replace(true);
        let mut tasks = self.tasks.into_inner().unwrap();
        while let Some(result) = tasks.join_next().await {
            if let Err(error) = result {
                std::panic::resume_unwind(error.into_panic());
            }
        }
    }
}

/// A replica killed and started again under the same id (a container restarted in place)
/// finds leases in its name that it does not hold: it must let them go and claim them
/// anew, not renew them forever while never loading their timers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_restarted_in_place_fires_its_old_partitions_timers() {
    if skip_postgres("a_replica_restarted_in_place_fires_its_old_partitions_timers") {
        return;
    }
    const ID: &str = "pod-0";
    let mut cluster = Cluster::start(&[ID]).await;
    cluster
        .eventually("the replica owns every partition", || {
            cluster.owns_every_partition(ID)
        })
        .await;
    let before = cluster.partitions_owned_by(ID).await;
    let ledger = SharedLedger::default();
    Registrar::new(&cluster, &ledger, 1_000..=3_000)
        .register(40)
        .await;
    assert_all_registered(&ledger, 40);
    cluster.kill(ID);
    // At once, while the killed process's leases are still valid.
    cluster.start_replica(ID).await;
    let consumers = consume_on_each(&cluster, &ledger, &[ID]);
    settle_and_check(&cluster, &ledger, consumers, FirstDeliveries::ExactlyOne).await;
    assert_epochs_increased(&before, &cluster.partitions().await);
}

/// The database drops every connection of a replica (a restart, a proxy, an operator's
/// `pg_terminate_backend`): the replica opens them again and goes on registering, firing
/// and delivering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_reconnects_after_its_connections_are_dropped() {
    if skip_postgres("a_replica_reconnects_after_its_connections_are_dropped") {
        return;
    }
    const ID: &str = "r1";
    let cluster = Cluster::start(&[ID]).await;
    cluster
        .eventually("the replica owns every partition", || {
            cluster.owns_every_partition(ID)
        })
        .await;
    let dropped: i64 = cluster
        .db
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .expect("terminating the replica's connections")
        .get(0);
    assert!(dropped > 0, "the replica had no connection to drop");
    let ledger = SharedLedger::default();
    let consumers = consume_on_each(&cluster, &ledger, &[ID]);
    // A call on a connection not yet known to be closed may fail once (UNAVAILABLE, not
    // acknowledged, so not required to fire); then the connection is opened again.
    let mut registrar = Registrar::new(&cluster, &ledger, 200..=1_000);
    let deadline = Instant::now() + PATIENCE;
    while let Err(progress) = registered_at_least(&ledger, 20) {
        assert!(
            Instant::now() < deadline,
            "registrations did not recover: {progress}"
        );
        registrar.register(1).await;
    }
    cluster.wait_until_delivered(&ledger).await;
    consumers.stop().await;
    assert_each_timer_fired_once(&ledger.lock().unwrap(), FirstDeliveries::ExactlyOne);
}

/// Delivery keeps the single node's semantics across replicas: a subscriber holds at most
/// its `max_unacked` claims, an ack made on another replica settles a delivery, what is
/// not acknowledged comes back with the next attempt number until `--max-attempts` (5),
/// and then it is dead, listed by Pending on any replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_are_acked_redelivered_and_buried_across_replicas() {
    if skip_postgres("deliveries_are_acked_redelivered_and_buried_across_replicas") {
        return;
    }
    use tickd::proto::{AckRequest, PendingRequest};
    const SEMANTICS: &str = "semantics";
    // Long enough that the first ack is surely in time on a loaded machine; each
    // redelivery waits this long.
    const ACK_WINDOW_MS: u64 = 3_000;
    let cluster = Cluster::start(&["r1", "r2"]).await;
    cluster
        .eventually("both replicas own partitions", || {
            cluster.each_owns_a_partition(&["r1", "r2"])
        })
        .await;
    let mut on_r1 = client_for(cluster.daemon("r1").addr, None);
    let mut on_r2 = client_for(cluster.daemon("r2").addr, None);
    let mut deliveries = subscribe(&mut on_r1, SEMANTICS, ACK_WINDOW_MS, 2).await;
    for _ in 0..3 {
        register(&mut on_r2, spec(SEMANTICS, 100, b"")).await;
    }
    let first = next_in_time(&mut deliveries).await;
    let second = next_in_time(&mut deliveries).await;
    assert_eq!((first.attempt, second.attempt), (1, 1));
    cluster
        .eventually("all three fired", || async {
            let fired: i64 = cluster
                .db
                .query_one(
                    "SELECT count(*) FROM tickd_expirations WHERE namespace = $1",
                    &[&SEMANTICS],
                )
                .await
                .map_err(|error| explain(&error))?
                .get(0);
            match fired {
                3 => Ok(()),
                fired => Err(format!("{fired} fired")),
            }
        })
        .await;
    // The third waits: this subscriber never holds more than two live claims.
    let live_claims: i64 = cluster
        .db
        .query_one(
            "SELECT count(*) FROM tickd_expirations
             WHERE namespace = $1 AND claim_until > clock_timestamp()",
            &[&SEMANTICS],
        )
        .await
        .expect("counting claims")
        .get(0);
    assert!(live_claims <= 2, "{live_claims} claims for max_unacked 2");

    let acked = on_r2
        .ack(AckRequest {
            namespace: SEMANTICS.into(),
            delivery_ids: vec![first.delivery_id.clone()],
        })
        .await
        .expect("acking on r2")
        .into_inner();
    assert_eq!(acked.acknowledged, 1, "{acked:?}");
    let acked_id = first.timer.expect("timer").id;
    // Everything else is never acknowledged: each remaining timer is delivered five times.
    let mut attempts: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    attempts
        .entry(second.timer.expect("timer").id)
        .or_default()
        .insert(1);
    while attempts.len() < 2 || attempts.values().any(|seen| seen.len() < 5) {
        let delivery = next_in_time(&mut deliveries).await;
        let id = delivery.timer.expect("timer").id;
        assert_ne!(id, acked_id, "an acknowledged expiration came back");
        attempts.entry(id).or_default().insert(delivery.attempt);
    }
    for seen in attempts.values() {
        assert_eq!(seen, &(1..=5).collect::<BTreeSet<u32>>());
    }
    cluster
        .eventually("the two unacknowledged expirations are dead", || {
            let mut on_r2 = on_r2.clone();
            async move {
                let page = on_r2
                    .pending(PendingRequest {
                        namespace: SEMANTICS.into(),
                        include_dead: true,
                        ..Default::default()
                    })
                    .await
                    .map_err(|status| status.to_string())?
                    .into_inner();
                match page.dead_count {
                    2 if page.dead_expirations.len() == 2 => Ok(()),
                    count => Err(format!("{count} dead")),
                }
            }
        })
        .await;
}

/// The API answers the same through a replica as through one node: idempotent keys,
/// Cancel's answers, NOT_FOUND and FAILED_PRECONDITION where one node gives them, leases
/// pushed by Touch, Pending's count and pages (tokens bound to their namespace), and
/// observers that copy without taking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_answers_the_api_like_one_node() {
    if skip_postgres("a_replica_answers_the_api_like_one_node") {
        return;
    }
    use tickd::proto::subscribe_request::Mode;
    use tickd::proto::{
        AckRequest, CancelRequest, GetRequest, NewTimeoutRequest, PendingRequest, SubscribeRequest,
        TouchRequest,
    };
    use tonic::Code;
    const API: &str = "api";
    const OBSERVED: &str = "observed";
    const LEASES: &str = "leases";
    let cluster = Cluster::start(&["r1"]).await;
    let mut client = client_for(cluster.daemon("r1").addr, None);

    let keyed = |key: &str| tickd::proto::TimerSpec {
        key: key.into(),
        ..spec(API, 60_000, b"payload")
    };
    let first = client
        .new_timeout(NewTimeoutRequest {
            timer: Some(keyed("order-1")),
        })
        .await
        .expect("registering")
        .into_inner();
    let again = client
        .new_timeout(NewTimeoutRequest {
            timer: Some(keyed("order-1")),
        })
        .await
        .expect("registering again")
        .into_inner();
    assert!(first.created && !again.created);
    let id = first.timer.expect("timer").id;
    assert_eq!(again.timer.expect("timer").id, id);

    let got = client
        .get(GetRequest {
            timer: by_key(API, "order-1"),
        })
        .await
        .expect("get by key")
        .into_inner()
        .timer
        .expect("timer");
    assert_eq!(
        (got.id.as_str(), &got.payload[..]),
        (id.as_str(), &b"payload"[..])
    );
    let missing = client
        .get(GetRequest {
            timer: by_key(API, "no-such-key"),
        })
        .await
        .expect_err("an unknown key");
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");

    let no_ttl = client
        .touch(TouchRequest {
            timer: by_id(API, &id),
            ttl: None,
        })
        .await
        .expect_err("touching a timer without a ttl");
    assert_eq!(no_ttl.code(), Code::FailedPrecondition, "{no_ttl:?}");
    let touched = client
        .touch(TouchRequest {
            timer: by_id(API, &id),
            ttl: Some(millis(3_600_000)),
        })
        .await
        .expect("touching with a ttl")
        .into_inner()
        .timer
        .expect("timer");
    assert!(touched.ttl.is_some());
    assert!(
        unix_nanos(touched.deadline.as_ref().expect("deadline"))
            > now_unix_nanos() + 3_000_000_000_000
    );

    for _ in 0..4 {
        register(&mut client, spec(API, 60_000, b"")).await;
    }
    let mut listed = BTreeSet::new();
    let mut token = String::new();
    loop {
        let page = client
            .pending(PendingRequest {
                namespace: API.into(),
                page_size: 2,
                page_token: token.clone(),
                include_dead: false,
            })
            .await
            .expect("a page")
            .into_inner();
        assert_eq!(page.count, 5);
        assert!(page.timers.len() <= 2);
        listed.extend(page.timers.into_iter().map(|timer| timer.id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(listed.len(), 5, "{listed:?}");
    let first_page = client
        .pending(PendingRequest {
            namespace: API.into(),
            page_size: 2,
            ..Default::default()
        })
        .await
        .expect("a page")
        .into_inner();
    let foreign = client
        .pending(PendingRequest {
            namespace: "elsewhere".into(),
            page_size: 2,
            page_token: first_page.next_page_token,
            include_dead: false,
        })
        .await
        .expect_err("a token from another namespace");
    assert_eq!(foreign.code(), Code::InvalidArgument, "{foreign:?}");

    let cancelled = |timer| CancelRequest { timer };
    assert!(
        client
            .cancel(cancelled(by_id(API, &id)))
            .await
            .expect("cancel")
            .into_inner()
            .cancelled
    );
    assert!(
        !client
            .cancel(cancelled(by_id(API, &id)))
            .await
            .expect("cancel again")
            .into_inner()
            .cancelled
    );
    let unknown_key = client
        .cancel(cancelled(by_key(API, "order-1")))
        .await
        .expect_err("cancelling a key no longer pending");
    assert_eq!(unknown_key.code(), Code::NotFound, "{unknown_key:?}");

    // An observer copies what fires without taking it: the sharing subscriber still gets
    // each expiration, and the observer sees it even once acknowledged.
    let mut observer = client
        .subscribe(SubscribeRequest {
            namespace: OBSERVED.into(),
            mode: Mode::Observer as i32,
            ..Default::default()
        })
        .await
        .expect("an observer subscription")
        .into_inner();
    let mut sharing = subscribe(&mut client, OBSERVED, 30_000, 100).await;
    let mut registered = BTreeSet::new();
    for _ in 0..3 {
        registered.insert(register(&mut client, spec(OBSERVED, 100, b"")).await.id);
    }
    let mut taken = BTreeSet::new();
    for _ in 0..3 {
        let delivery = next_in_time(&mut sharing).await;
        client
            .ack(AckRequest {
                namespace: OBSERVED.into(),
                delivery_ids: vec![delivery.delivery_id],
            })
            .await
            .expect("acking");
        taken.insert(delivery.timer.expect("timer").id);
    }
    let mut copied = BTreeSet::new();
    for _ in 0..3 {
        copied.insert(next_in_time(&mut observer).await.timer.expect("timer").id);
    }
    assert_eq!(taken, registered);
    assert_eq!(copied, registered);

    // A heartbeat that brings a lease's deadline closer moves it in the owner's wheel too:
    // it fires by the new deadline, well before the one it was loaded with.
    let mut leases = subscribe(&mut client, LEASES, 30_000, 10).await;
    let lease = client
        .new_timeout(NewTimeoutRequest {
            timer: Some(tickd::proto::TimerSpec {
                ttl: Some(millis(4_500)),
                delay: None,
                ..spec(LEASES, 0, b"")
            }),
        })
        .await
        .expect("registering a lease")
        .into_inner()
        .timer
        .expect("timer");
    let first_deadline = unix_nanos(lease.deadline.as_ref().expect("deadline"));
    client
        .touch(TouchRequest {
            timer: by_id(LEASES, &lease.id),
            ttl: Some(millis(500)),
        })
        .await
        .expect("touching the lease closer");
    let expired = next_in_time(&mut leases).await;
    assert_eq!(expired.timer.expect("timer").id, lease.id);
    let fired_at = unix_nanos(expired.fired_at.as_ref().expect("fired_at"));
    assert!(
        fired_at < first_deadline,
        "fired at {fired_at}, not before the deadline it was moved from ({first_deadline})"
    );
}

/// The stream's next expiration, failing the test rather than hanging if none comes.
async fn next_in_time(
    stream: &mut tonic::Streaming<tickd::proto::SubscribeResponse>,
) -> tickd::proto::Expiration {
    tokio::time::timeout(PATIENCE, next_expiration(stream))
        .await
        .unwrap_or_else(|_| panic!("no delivery within {PATIENCE:?}"))
}

/// A migrated database and the shared state of one replica (`stale`, owning nothing),
/// with a real wheel worker: the parts of a replica, without its background tasks, for
/// tests that drive one part directly.
async fn replica_parts(
    postgres: &Postgres,
) -> (
    tickd::cluster::Shared,
    tickd::worker::Worker<tickd::cluster::schedule::Schedule>,
) {
    let mut setup = postgres.connect().await;
    tickd::cluster::schema::migrate(&mut setup, 4)
        .await
        .expect("migrating the schema");
    let worker = tickd::worker::Worker::spawn(
        tickd::cluster::schedule::Schedule::new(1_000_000),
        tickd::worker::clock::SystemClock::new(),
        tickd::worker::WorkerConfig::default(),
        |_| {},
    )
    .expect("starting a wheel worker");
    let shared = tickd::cluster::Shared {
        replica_id: "stale".into(),
        partitions: 4,
        lease_ttl: Duration::from_secs(2),
        load_horizon: Duration::from_secs(5),
        owned: tickd::cluster::Owned::default(),
        schedule: worker.handle(),
        clock: tickd::worker::clock::SystemClock::new(),
    };
    (shared, worker)
}

/// The fence, on its own: a firing by a replica that no longer holds the partition's lease
/// at the epoch it was granted changes nothing, even though the timer's row still matches
/// what its wheel holds (so only the fence stands in the way). The same firing by the
/// lease holder does fire, which shows the check is what refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firing_without_the_current_lease_changes_nothing() {
    if skip_postgres("a_firing_without_the_current_lease_changes_nothing") {
        return;
    }
    use tickd::cluster::firing::Firing;
    use tickd::cluster::schedule::DueTimer;

    let postgres = Postgres::start().await;
    let (shared, worker) = replica_parts(&postgres).await;
    let deadline: i64 = 1_700_000_000_000_000_000;
    postgres
        .query(&format!(
            "INSERT INTO tickd_timers (id, namespace, partition, deadline, payload)
             VALUES (5, 'fence', 1, {deadline}, '')"
        ))
        .await;
    // This replica was granted partition 1 at epoch 1.
    shared.owned.insert(1, 1);
    let mut firing = Firing::new(
        tickd::cluster::Connections::open(&postgres.database(), 1)
            .await
            .expect("connecting"),
        shared,
        tickd::metrics::Metrics::new(),
    );
    let due = [DueTimer {
        namespace: "fence".into(),
        id: 5,
        partition: 1,
        deadline_unix: deadline as u64,
        late: false,
        epoch: 1,
        version: 0,
    }];
    let lease = |owner: &str, epoch: i64, seconds: i64| {
        format!(
            "UPDATE tickd_partitions SET owner = '{owner}', epoch = {epoch},
                 lease_until = clock_timestamp() + {seconds} * INTERVAL '1 second'
             WHERE partition = 1"
        )
    };
    let untouched = || async {
        let timers: i64 = postgres.query("SELECT count(*) FROM tickd_timers").await[0].get(0);
        let expirations: i64 = postgres
            .query("SELECT count(*) FROM tickd_expirations")
            .await[0]
            .get(0);
        (timers, expirations)
    };

    // Taken over: another replica holds it at a later epoch.
    postgres.query(&lease("other", 2, 60)).await;
    assert_eq!(firing.fire(&due).await.expect("firing"), 0);
    assert_eq!(untouched().await, (1, 0), "a stale owner fired");
    // Its own lease, but expired (it was paused past it): nobody may fire from it.
    postgres.query(&lease("stale", 1, -1)).await;
    assert_eq!(firing.fire(&due).await.expect("firing"), 0);
    assert_eq!(untouched().await, (1, 0), "an expired lease fired");
    // The lease it was granted, still valid: the same firing goes through.
    postgres.query(&lease("stale", 1, 60)).await;
    assert_eq!(firing.fire(&due).await.expect("firing"), 1);
    assert_eq!(untouched().await, (0, 1), "the lease holder could not fire");
    drop(worker.stop());
}

/// Dead expirations (attempts used up, no live claim) are kept per namespace up to
/// `--max-dead`, the newest, and Pending counts what it lists; live ones and other
/// namespaces' are not touched. Acknowledged ones are deleted once their retention for
/// observers is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_and_acknowledged_expirations_are_trimmed() {
    if skip_postgres("dead_and_acknowledged_expirations_are_trimmed") {
        return;
    }
    use tickd::cluster::delivery::ClusterDeliveries;
    use tickd::cluster::Wakeups;
    use tickd::delivery::DeliveryConfig;

    let postgres = Postgres::start().await;
    let (shared, worker) = replica_parts(&postgres).await;
    // Five dead in "a" (seq 1..=5), one dead in "b", one still being delivered in "a".
    postgres
        .query(
            "INSERT INTO tickd_expirations
                 (namespace, timer_id, payload, deadline, fired_at, fired_count, late, attempts)
             SELECT CASE WHEN n = 6 THEN 'b' ELSE 'a' END, n, '', 0, 0, 1, false,
                    CASE WHEN n = 7 THEN 1 ELSE 5 END
             FROM generate_series(1, 7) AS n",
        )
        .await;
    let config = DeliveryConfig {
        max_attempts: 5,
        dead_capacity: 2,
        ..DeliveryConfig::default()
    };
    let (_stop, stopping) = watch::channel(false);
    let deliveries = ClusterDeliveries::new(
        tickd::cluster::Connections::open(&postgres.database(), 1)
            .await
            .expect("connecting"),
        tickd::metrics::Metrics::new(),
        shared,
        config,
        Wakeups::default(),
        stopping,
    );
    // Before the trim as after it, Pending counts and lists what the trim keeps: the
    // newest two of each namespace, oldest first; an empty namespace, every namespace's.
    let listed = |dead: tickd::domain::DeadList| {
        let ids: Vec<u64> = dead.dead.iter().map(|dead| dead.expiration.id.0).collect();
        (dead.count, ids)
    };
    for trimmed in [3, 0] {
        let in_a = deliveries.dead(Some("a".into())).await.expect("listing");
        assert_eq!(listed(in_a), (2, vec![4, 5]));
        let everywhere = deliveries.dead(None).await.expect("listing");
        assert_eq!(listed(everywhere), (3, vec![4, 5, 6]));
        assert_eq!(
            deliveries.trim_dead_once().await.expect("trimming"),
            trimmed
        );
    }
    let left: Vec<i64> = postgres
        .query("SELECT timer_id FROM tickd_expirations ORDER BY seq")
        .await
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(left, vec![4, 5, 6, 7]);
    assert_eq!(deliveries.trim_dead_once().await.expect("trimming"), 0);

    // Acknowledged ones stay for observers for a while (30 s), then go.
    postgres
        .query(
            "INSERT INTO tickd_expirations
                 (namespace, timer_id, payload, deadline, fired_at, fired_count, late, attempts,
                  acked_at)
             VALUES ('a', 8, '', 0, 0, 1, false, 1, clock_timestamp() - INTERVAL '1 minute'),
                    ('a', 9, '', 0, 0, 1, false, 1, clock_timestamp())",
        )
        .await;
    assert_eq!(
        deliveries
            .forget_acknowledged_once()
            .await
            .expect("forgetting acknowledged expirations"),
        1
    );
    let left: Vec<i64> = postgres
        .query("SELECT timer_id FROM tickd_expirations WHERE timer_id >= 8")
        .await
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(left, vec![9]);
    drop(worker.stop());
}
