//! Replicas whose firing is slow keep their leases and their readiness.
//!
//! A firing statement can take long: a large batch (a backlog after an outage), a busy
//! database, a slow disk, or a per-row trigger an operator added for auditing. None of
//! that may cost a replica its leases (the lease round must not wait behind firing) or its
//! readiness (the database still answers registrations and deliveries), and the fence
//! must hold inside the firing transaction all the same.
//!
//! - two replicas at 500 timers/s for 30 s with an audit trigger on `tickd_expirations`
//!   (per row: reads the partition's row in `tickd_partitions`, writes an audit row saying
//!   whether the firing replica's lease, as the trigger sees it, was its own and
//!   unexpired), subscribers acknowledging: every acknowledged registration is delivered,
//!   none twice, no replica turns NOT_SERVING or loses a lease, and the audit finds no
//!   expiration recorded outside its replica's lease;
//! - one replica given 150,000 timers due at one instant (`--lease-ttl 2s`): it fires and
//!   delivers them all without losing a lease or its readiness. How long that takes is
//!   printed, for docs/performance.md; nothing here asserts how fast anything happened.
//!
//! The replicas know themselves in the database by `application_name` (their id), which
//! the harness puts in each one's `--store` URL: that is how the trigger tells who fired.

mod common;

use std::time::{Duration, Instant};

use common::postgres::explain;
use common::replica_set::clients::{consume_on_each, Background, Registrar, NAMESPACE};
use common::replica_set::ledger::{assert_each_timer_fired_once, FirstDeliveries, SharedLedger};
use common::replica_set::{lost_lease_log, not_ready_log, ReplicaSet, Settings, PATIENCE};
use common::tooling::skip_postgres;

const PARTITIONS: usize = 16;
/// The offered load of the trigger test, and for how long.
const RATE: u64 = 500;
const LOAD_FOR: Duration = Duration::from_secs(30);
/// What the audit trigger costs each row, in waiting (its `pg_sleep`).
const TRIGGER_MS: u64 = 5;
/// Timers in the backlog of the drain test.
const BACKLOG: i64 = 150_000;
/// Each test here loads both cores on its own (that is the point of it), so they take
/// turns rather than slow each other down: what they look at is how tickd behaves under
/// its own slow firing, not under the other test's.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An audit trigger of the kind operators add: for every expiration recorded, the
/// partition's row as the firing transaction sees it then (a PL/pgSQL function's queries
/// each take a fresh snapshot, so this is the row as committed at that moment, not as the
/// statement saw it when it began), and whether the replica that recorded it (its
/// `application_name`) held that partition with a lease still running. Each row also
/// costs [`TRIGGER_MS`] of waiting (a slow disk, a heavier audit), so that the two
/// replicas together can fire fewer timers a second than are offered: firing falls
/// behind during the load and works off a backlog after it.
///
/// (Built with JIT on the firing connection, as bd334ee was, the audit alone cost 10 ms a
/// row: see `GENERIC_PLAN_OPTIONS` in `cluster::database`.)
const AUDIT: &str = r"
CREATE TABLE firing_audit (
    seq BIGINT NOT NULL,
    replica TEXT NOT NULL,
    partition INT,
    owner TEXT,
    lease_until TIMESTAMPTZ,
    seen_at TIMESTAMPTZ NOT NULL,
    own_lease BOOL NOT NULL
);
CREATE FUNCTION firing_audit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_partitions INT;
    v_lease tickd_partitions%ROWTYPE;
    v_replica TEXT := current_setting('application_name');
    v_seen TIMESTAMPTZ;
BEGIN
    SELECT c.partitions INTO v_partitions FROM tickd_cluster c;
    PERFORM pg_sleep(TRIGGER_SECONDS);
    v_seen := clock_timestamp();
    SELECT * INTO v_lease FROM tickd_partitions p
    WHERE p.partition = NEW.timer_id % v_partitions;
    INSERT INTO firing_audit
    VALUES (NEW.seq, v_replica, v_lease.partition, v_lease.owner, v_lease.lease_until, v_seen,
            coalesce(v_lease.owner = v_replica AND v_lease.lease_until > v_seen, false));
    RETURN NULL;
END $$;
CREATE TRIGGER firing_audit AFTER INSERT ON tickd_expirations
    FOR EACH ROW EXECUTE FUNCTION firing_audit();
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_firing_under_an_audit_trigger_keeps_leases_and_readiness() {
    if skip_postgres("slow_firing_under_an_audit_trigger_keeps_leases_and_readiness") {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().await;
    const IDS: [&str; 2] = ["r1", "r2"];
    let settings = Settings {
        partitions: PARTITIONS,
        ..Settings::default()
    };
    let set = ReplicaSet::start_with(settings, &IDS).await;
    set.eventually("each replica owns a partition", || {
        set.each_owns_a_partition(&IDS)
    })
    .await;
    set.db
        .batch_execute(&AUDIT.replace("TRIGGER_SECONDS", &format!("{}", TRIGGER_MS as f64 / 1e3)))
        .await
        .unwrap_or_else(|error| panic!("installing the audit trigger: {}", explain(&error)));
    let ledger = SharedLedger::default();
    let consumers = consume_on_each(&set, &ledger, &IDS);
    let registrations = Background::new();
    let registrar = Registrar::new(&set, &ledger, 200..=3_000);
    registrations.spawn(registrar.run_at_rate(RATE, registrations.stop_signal()));
    // The load's length, not a synchronisation: the run is this long whatever happens.
    tokio::time::sleep(LOAD_FOR).await;
    registrations.stop().await;
    let registered = ledger.lock().unwrap().registered.len();
    eprintln!(
        "{registered} registrations acknowledged in {LOAD_FOR:?} ({} a second offered)",
        RATE
    );

    let load_ended = Instant::now();
    let settled = settle(&set, &ledger).await;
    eprintln!("settled {:?} after the load ended", load_ended.elapsed());
    consumers.stop().await;
    let audit = Audit::read(&set).await;
    let (summary, undelivered, delivered_twice) = {
        let ledger = ledger.lock().unwrap();
        let delivered_twice = ledger
            .deliveries_by_timer()
            .values()
            .filter(|deliveries| deliveries.len() > 1)
            .count();
        (
            ledger.summary(),
            ledger.undelivered().len(),
            delivered_twice,
        )
    };
    let mut losses = Vec::new();
    let mut not_ready = Vec::new();
    for id in IDS {
        losses.extend(lost_lease_log(set.daemon(id)));
        not_ready.extend(not_ready_log(set.daemon(id)));
    }
    eprintln!(
        "{summary}\nundelivered: {undelivered}; delivered more than once: {delivered_twice}; \
         lease losses logged: {}; NOT_SERVING turns logged: {}; audit: {} expirations \
         recorded, {} outside the recording replica's lease",
        losses.len(),
        not_ready.len(),
        audit.recorded,
        audit.violations
    );
    if let Err(state) = settled {
        panic!(
            "the replicas did not deliver everything acknowledged: {state}\n{}",
            set.report().await
        );
    }
    assert!(
        losses.is_empty(),
        "a replica lost leases:\n{}",
        losses.join("\n")
    );
    assert!(
        not_ready.is_empty(),
        "a replica turned NOT_SERVING:\n{}",
        not_ready.join("\n")
    );
    assert_eq!(
        audit.violations, 0,
        "expirations recorded by a replica whose lease was not its own or had run out, \
         as its firing transaction saw it: {:?}",
        audit.examples
    );
    assert!(
        audit.recorded >= registered as i64,
        "the trigger saw {} expirations for {registered} timers",
        audit.recorded
    );
    assert_each_timer_fired_once(&ledger.lock().unwrap(), FirstDeliveries::ExactlyOne);
    assert_eq!(delivered_twice, 0, "timers delivered more than once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_due_at_one_instant_drains_without_losing_a_lease() {
    if skip_postgres("a_backlog_due_at_one_instant_drains_without_losing_a_lease") {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().await;
    const ID: &str = "solo";
    let settings = Settings {
        partitions: PARTITIONS,
        ..Settings::default()
    };
    let mut set = ReplicaSet::start_with(settings, &[]).await;
    tickd::cluster::schema::migrate(&mut set.db, PARTITIONS as u32)
        .await
        .expect("migrating the schema");
    let ledger = SharedLedger::default();
    let due_at = backlog(&set, &ledger).await;
    eprintln!("{BACKLOG} timers due at {due_at} (unix ns) in the database; starting {ID}");

    let started = Instant::now();
    set.start_replica(ID).await;
    // Four subscribers, so that acknowledging keeps up with a backlog this size.
    let consumers = consume_on_each(&set, &ledger, &[ID, ID, ID, ID]);
    let fired_after = std::sync::Mutex::new(None);
    // Only a hang runs into this bound: a debug build on two loaded cores has taken six
    // minutes to fire and acknowledge all of them.
    let settled = {
        let (set, fired_after) = (&set, &fired_after);
        wait_for(PATIENCE * 5, move || async move {
            let pending = set.count_rows("tickd_timers").await;
            if pending == 0 {
                fired_after
                    .lock()
                    .unwrap()
                    .get_or_insert_with(|| started.elapsed());
            }
            let unacked = set
                .count_rows("tickd_expirations WHERE acked_at IS NULL")
                .await;
            match (pending, unacked) {
                (0, 0) => Ok(()),
                _ => Err(format!("{pending} pending, {unacked} unacknowledged")),
            }
        })
        .await
    };
    let settled_after = started.elapsed();
    consumers.stop().await;
    let losses = lost_lease_log(set.daemon(ID));
    let not_ready = not_ready_log(set.daemon(ID));
    // What the replica warned of: where a delivery that never arrived went.
    let warnings = set.daemon(ID).lines_with(&["WARN"]);
    let summary = ledger.lock().unwrap().summary();
    eprintln!(
        "{summary}\n{BACKLOG} timers due at one instant: all fired {:?} and all \
         acknowledged {settled_after:?} after the replica was started; lease losses logged: \
         {}, NOT_SERVING turns logged: {}; warnings:\n{}",
        fired_after.lock().unwrap(),
        losses.len(),
        not_ready.len(),
        warnings.join("\n")
    );
    if let Err(state) = settled {
        panic!("the backlog did not drain: {state}\n{}", set.report().await);
    }
    assert!(
        losses.is_empty(),
        "the replica lost leases while draining:\n{}",
        losses.join("\n")
    );
    assert!(
        not_ready.is_empty(),
        "the replica turned NOT_SERVING while draining:\n{}",
        not_ready.join("\n")
    );
    assert_each_timer_fired_once(&ledger.lock().unwrap(), FirstDeliveries::ExactlyOne);
}

/// [`BACKLOG`] one-shot timers of [`NAMESPACE`] written straight into `tickd_timers`, all
/// due at the same instant (now, so overdue by the time a replica loads them), as a
/// replica finds them after an outage; each recorded in `ledger` as acknowledged. Their
/// ids are below any the sequence hands out. Returns the deadline.
async fn backlog(set: &ReplicaSet, ledger: &SharedLedger) -> i128 {
    let due_at = common::now_unix_nanos();
    let sql = format!(
        "INSERT INTO tickd_timers (id, namespace, partition, deadline, payload)
         SELECT id, '{NAMESPACE}', id % {PARTITIONS}, {due_at}, 'backlog'::BYTEA
         FROM generate_series(1, {BACKLOG}) AS id;
         SELECT setval('tickd_timer_ids', {BACKLOG} + 1000);"
    );
    set.db
        .batch_execute(&sql)
        .await
        .unwrap_or_else(|error| panic!("writing the backlog: {}", explain(&error)));
    let mut ledger = ledger.lock().unwrap();
    for id in 1..=BACKLOG {
        ledger.registered.insert(format!("{id:016x}"), due_at);
    }
    due_at
}

/// The registrations are over: waits (at most [`PATIENCE`]) until every acknowledged one
/// was delivered and nothing is pending or unacknowledged; the state otherwise.
async fn settle(set: &ReplicaSet, ledger: &SharedLedger) -> Result<(), String> {
    wait_for(PATIENCE, || async {
        let undelivered = ledger.lock().unwrap().undelivered().len();
        let pending = set.count_rows("tickd_timers").await;
        let unacked = set
            .count_rows("tickd_expirations WHERE acked_at IS NULL")
            .await;
        match (undelivered, pending, unacked) {
            (0, 0, 0) => Ok(()),
            _ => Err(format!(
                "{undelivered} acknowledged registrations undelivered, {pending} timers \
                 pending, {unacked} expirations unacknowledged"
            )),
        }
    })
    .await
}

/// `condition` checked every 50 ms until it holds, or its last explanation once
/// `patience` (a failure bound, never a synchronisation) has passed.
async fn wait_for<F, Fut>(patience: Duration, mut condition: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + patience;
    loop {
        match condition().await {
            Ok(()) => return Ok(()),
            Err(state) if Instant::now() > deadline => return Err(state),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// What the audit trigger recorded.
struct Audit {
    recorded: i64,
    violations: i64,
    /// A few of the violations, as rows.
    examples: Vec<String>,
}

impl Audit {
    async fn read(set: &ReplicaSet) -> Audit {
        let counts = set
            .db
            .query_one(
                "SELECT count(*), count(*) FILTER (WHERE NOT own_lease) FROM firing_audit",
                &[],
            )
            .await
            .unwrap_or_else(|error| panic!("reading the audit: {}", explain(&error)));
        let examples = set
            .db
            .query(
                "SELECT format('seq %s by %s: partition %s owned by %s until %s, seen at %s',
                               seq, replica, partition, owner, lease_until, seen_at)
                 FROM firing_audit WHERE NOT own_lease ORDER BY seq LIMIT 10",
                &[],
            )
            .await
            .unwrap_or_else(|error| panic!("reading the audit: {}", explain(&error)))
            .iter()
            .map(|row| row.get(0))
            .collect();
        Audit {
            recorded: counts.get(0),
            violations: counts.get(1),
            examples,
        }
    }
}
