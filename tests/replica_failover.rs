//! Replicated mode when replicas fail: several `tickd` processes sharing one PostgreSQL
//! database (`--store postgres://...`), each firing the timers of the partitions it holds
//! a lease on, must keep the single-node contract whatever happens to them: every
//! acknowledged registration fires, and fires once.
//!
//! - shared work: three replicas split the partitions, and fire each timer once;
//! - SIGKILL: the partitions of a dead replica are taken over once its leases lapse, and its
//!   timers still fire once;
//! - SIGSTOP: an owner paused past its lease is fenced off when it resumes, so its wheel
//!   cannot fire again what the new owner already fired; a lone replica paused past its
//!   lease, which nobody claimed meanwhile, renews it at the same epoch and fires late;
//! - rolling restart: each replica in turn drains (SIGTERM), releases its partitions and
//!   comes back under the same id, and nothing is lost; a replica killed and restarted in
//!   place lets go of the leases in its name and fires their timers;
//! - dropped connections are opened again; and the fence itself, driven directly, refuses a
//!   firing without the current lease. (A replica cut off from the database by a proxy is
//!   `replica_fence.rs`.)
//!
//! Waits poll for the awaited event (database rows, log lines, deliveries) with a generous
//! deadline; nothing here depends on how fast the machine is.

mod common;

use std::future::ready;
use std::time::Instant;

use common::postgres::Postgres;
use common::replica_set::clients::{consume_on_each, Background, Registrar};
use common::replica_set::ledger::{
    assert_all_delivered_by, assert_all_registered, assert_each_timer_fired_once,
    registered_at_least, FirstDeliveries, SharedLedger,
};
use common::replica_set::partitions::assert_epochs_increased;
use common::replica_set::parts::{connections, generic_plan_connections, replica_parts};
use common::replica_set::{noticed_lost_leases, ReplicaSet, Settings, LEASE_TTL, PATIENCE};
use common::tooling::skip_postgres;

/// More partitions than replicas by far, so that each of three owns several.
const PARTITIONS: usize = 16;

async fn start(ids: &[&str]) -> ReplicaSet {
    let settings = Settings {
        partitions: PARTITIONS,
        ..Settings::default()
    };
    ReplicaSet::start_with(settings, ids).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_fire_each_timer_once() {
    if skip_postgres("three_replicas_fire_each_timer_once") {
        return;
    }
    const IDS: [&str; 3] = ["r1", "r2", "r3"];
    let set = start(&IDS).await;
    let ledger = SharedLedger::default();
    let consumers = consume_on_each(&set, &ledger, &IDS);

    Registrar::new(&set, &ledger, 200..=3_000)
        .register(300)
        .await;
    assert_all_registered(&ledger, 300);

    set.wait_until_delivered(&ledger).await;
    set.eventually("each of the three replicas owns a partition", || {
        set.each_owns_a_partition(&IDS)
    })
    .await;
    set.settle_and_check(&ledger, consumers, FirstDeliveries::ExactlyOne)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_replica_partitions_are_taken_over() {
    if skip_postgres("killed_replica_partitions_are_taken_over") {
        return;
    }
    const IDS: [&str; 3] = ["r1", "r2", "r3"];
    const VICTIM: &str = "r2";
    let mut set = start(&IDS).await;
    let ledger = SharedLedger::default();
    let consumers = consume_on_each(&set, &ledger, &IDS);
    let registrations = Background::new();
    let registrar = Registrar::new(&set, &ledger, 500..=4_000);
    registrations.spawn(registrar.run_until(registrations.stop_signal()));

    // Kill only once the victim owns partitions and timers are pending everywhere.
    set.eventually("each replica owns a partition", || {
        set.each_owns_a_partition(&IDS)
    })
    .await;
    set.eventually("100 registrations acknowledged", || {
        ready(registered_at_least(&ledger, 100))
    })
    .await;
    let victim_epochs = set.partitions_owned_by(VICTIM).await;
    assert!(!victim_epochs.is_empty(), "{VICTIM} owns no partition");
    let killed_at = Instant::now();
    set.kill(VICTIM);
    let registered_at_kill = ledger.lock().unwrap().registered.len();

    set.eventually(
        "the killed replica's partitions owned by the others",
        || set.taken_over(VICTIM, &victim_epochs),
    )
    .await;
    eprintln!(
        "takeover of {} partitions: {:?} from SIGKILL (lease ttl {LEASE_TTL:?})",
        victim_epochs.len(),
        killed_at.elapsed()
    );
    assert_epochs_increased(&victim_epochs, &set.partitions().await);

    set.eventually("100 more registrations through the survivors", || {
        ready(registered_at_least(&ledger, registered_at_kill + 100))
    })
    .await;
    registrations.stop().await;
    // The victim may have claimed a first delivery that never reached its subscriber.
    set.settle_and_check(&ledger, consumers, FirstDeliveries::AtMostOne)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_owner_cannot_fire_after_losing_its_lease() {
    if skip_postgres("paused_owner_cannot_fire_after_losing_its_lease") {
        return;
    }
    const PAUSED: &str = "a";
    const SUCCESSOR: &str = "b";
    let mut set = start(&[PAUSED]).await;
    set.eventually("the first replica owns every partition", || {
        set.owns_every_partition(PAUSED)
    })
    .await;
    let ledger = SharedLedger::default();
    // Due within the load horizon: the paused owner holds them all in its wheel.
    Registrar::new(&set, &ledger, 3_800..=4_200)
        .register(50)
        .await;
    assert_all_registered(&ledger, 50);

    set.pause(PAUSED);
    let paused_at = Instant::now();
    set.start_replica(SUCCESSOR).await;
    let consumers = consume_on_each(&set, &ledger, &[SUCCESSOR]);
    set.eventually("the successor owns every partition", || {
        set.owns_every_partition(SUCCESSOR)
    })
    .await;
    eprintln!(
        "successor owns every partition {:?} after the pause",
        paused_at.elapsed()
    );
    set.wait_until_delivered(&ledger).await;
    assert_all_delivered_by(&ledger.lock().unwrap(), SUCCESSOR);

    // Resumed, the paused owner finds its timers overdue; it must notice the lost leases.
    set.resume(PAUSED);
    consumers.consume_on(&set, &ledger, PAUSED);
    set.eventually(
        "the resumed owner fences its firings or drops its leases",
        || ready(noticed_lost_leases(set.daemon(PAUSED), 0)),
    )
    .await;
    // By the time it holds a partition again, any stale firing would have been made.
    set.eventually("the resumed owner owns a partition again", || {
        set.owns_a_partition(PAUSED)
    })
    .await;
    set.wait_until_drained().await;
    consumers.stop().await;

    eprintln!(
        "resumed owner's log:\n{}",
        set.daemon(PAUSED)
            .lines_with(&["partitions lost", "firing fenced"])
            .join("\n")
    );
    let ledger = ledger.lock().unwrap();
    eprintln!("{}", ledger.summary());
    assert_each_timer_fired_once(&ledger, FirstDeliveries::ExactlyOne);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_replica_paused_past_its_lease_renews_it_at_the_same_epoch() {
    if skip_postgres("a_lone_replica_paused_past_its_lease_renews_it_at_the_same_epoch") {
        return;
    }
    const SOLO: &str = "solo";
    let mut set = start(&[SOLO]).await;
    set.eventually("the replica owns every partition", || {
        set.owns_every_partition(SOLO)
    })
    .await;
    let epochs = set.partitions_owned_by(SOLO).await;
    let ledger = SharedLedger::default();
    Registrar::new(&set, &ledger, 3_800..=4_200)
        .register(50)
        .await;
    assert_all_registered(&ledger, 50);

    // Paused until its leases have run out and every timer is overdue, with nobody else
    // to claim the partitions: the leases are expired but still in its name.
    set.pause(SOLO);
    set.eventually("the paused replica's leases ran out", || {
        set.holds_no_lease(SOLO)
    })
    .await;
    set.eventually("every timer is overdue and none fired", || async {
        let now_unix_nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos();
        let not_yet_due = set
            .count_rows(&format!("tickd_timers WHERE deadline > {now_unix_nanos}"))
            .await;
        match set.count_rows("tickd_timers").await {
            50 if not_yet_due == 0 => Ok(()),
            pending => Err(format!("{pending} pending, {not_yet_due} not yet due")),
        }
    })
    .await;

    set.resume(SOLO);
    let consumers = consume_on_each(&set, &ledger, &[SOLO]);
    set.wait_until_delivered(&ledger).await;
    set.wait_until_drained().await;
    consumers.stop().await;

    // The same epochs: renewed, not lost and claimed again (which would have thrown the
    // wheel's timers out and loaded them anew).
    assert_eq!(set.partitions_owned_by(SOLO).await, epochs);
    let losses = set.daemon(SOLO).lines_with(&["partitions lost"]);
    assert!(
        losses.is_empty(),
        "the lone replica lost its leases: {losses:?}"
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
    let mut set = start(&IDS).await;
    let ledger = SharedLedger::default();
    let consumers = consume_on_each(&set, &ledger, &IDS);
    Registrar::new(&set, &ledger, 1_000..=15_000)
        .register(300)
        .await;
    assert_all_registered(&ledger, 300);
    // Restart only once every replica has partitions to hand over.
    set.eventually("each replica owns a partition", || {
        set.each_owns_a_partition(&IDS)
    })
    .await;
    let registrations = Background::new();
    let registrar = Registrar::new(&set, &ledger, 1_000..=5_000);
    registrations.spawn(registrar.run_until(registrations.stop_signal()));

    for id in IDS {
        let started = Instant::now();
        restart(&mut set, id).await;
        eprintln!(
            "{id} restarted and owning partitions in {:?}",
            started.elapsed()
        );
    }
    registrations.stop().await;
    // Streams a draining replica ends may take a claimed first delivery with them.
    set.settle_and_check(&ledger, consumers, FirstDeliveries::AtMostOne)
        .await;
}

/// SIGTERM: the replica must exit 0, having released its leases on the way out (not left
/// them to expire); then a new process with the same id must win partitions again.
async fn restart(set: &mut ReplicaSet, id: &str) {
    set.stop(id).await;
    if let Err(held) = set.holds_no_lease(id).await {
        panic!(
            "{held} after a clean exit; log:\n{}",
            set.retired_daemon(id).log_text()
        );
    }
    set.start_replica(id).await;
    set.eventually("the restarted replica owns a partition", || {
        set.owns_a_partition(id)
    })
    .await;
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
    let mut set = start(&[ID]).await;
    set.eventually("the replica owns every partition", || {
        set.owns_every_partition(ID)
    })
    .await;
    let before = set.partitions_owned_by(ID).await;
    let ledger = SharedLedger::default();
    Registrar::new(&set, &ledger, 1_000..=3_000)
        .register(40)
        .await;
    assert_all_registered(&ledger, 40);
    // At once, while the killed process's leases are still valid.
    set.restart_in_place(ID).await;
    let consumers = consume_on_each(&set, &ledger, &[ID]);
    set.settle_and_check(&ledger, consumers, FirstDeliveries::ExactlyOne)
        .await;
    assert_epochs_increased(&before, &set.partitions().await);
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
    let set = start(&[ID]).await;
    set.eventually("the replica owns every partition", || {
        set.owns_every_partition(ID)
    })
    .await;
    let dropped: i64 = set
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
    let consumers = consume_on_each(&set, &ledger, &[ID]);
    // A call on a connection not yet known to be closed may fail once (UNAVAILABLE, not
    // acknowledged, so not required to fire); then the connection is opened again.
    let mut registrar = Registrar::new(&set, &ledger, 200..=1_000);
    let deadline = Instant::now() + PATIENCE;
    while let Err(progress) = registered_at_least(&ledger, 20) {
        assert!(
            Instant::now() < deadline,
            "registrations did not recover: {progress}"
        );
        registrar.register(1).await;
    }
    set.wait_until_delivered(&ledger).await;
    consumers.stop().await;
    assert_each_timer_fired_once(&ledger.lock().unwrap(), FirstDeliveries::ExactlyOne);
}

/// The fence, on its own: a firing by a replica that no longer holds the partition's lease
/// at the epoch it was granted changes nothing, even though the timer's row still matches
/// what its wheel holds (so only the fence stands in the way). The same firing by the
/// lease holder does fire, which shows the check is what refused. Both ways a replica
/// plans the statement: afresh at each run, and the generic plan it keeps for small
/// batches (the fence must not depend on which plan the server picked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firing_without_the_current_lease_changes_nothing() {
    if skip_postgres("a_firing_without_the_current_lease_changes_nothing") {
        return;
    }
    for generic_plan in [false, true] {
        let postgres = Postgres::start().await;
        let connections = if generic_plan {
            generic_plan_connections(&postgres).await
        } else {
            connections(&postgres).await
        };
        fence_holds(&postgres, connections).await;
    }
}

/// [`a_firing_without_the_current_lease_changes_nothing`] on one connection set.
async fn fence_holds(postgres: &Postgres, connections: tickd::cluster::Connections) {
    use tickd::cluster::firing::Firing;
    use tickd::cluster::schedule::DueTimer;

    let (shared, worker) = replica_parts(postgres).await;
    let deadline: i64 = 1_700_000_000_000_000_000;
    postgres
        .query(&format!(
            "INSERT INTO tickd_timers (id, namespace, partition, deadline, payload)
             VALUES (5, 'fence', 1, {deadline}, '')"
        ))
        .await;
    // This replica was granted partition 1 at epoch 1.
    shared.owned.insert(1, 1);
    let mut firing = Firing::new(connections, shared, tickd::metrics::Metrics::new());
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
