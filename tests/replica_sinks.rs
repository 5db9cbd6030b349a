//! Push sinks in replicated mode: every replica runs a pusher of the namespace over the
//! cluster's deliveries, so that a push has a claim's guarantees across replicas.
//!
//! - a sink that answers 500 once per expiration: each push is handed back with
//!   `retry_later` (an UPDATE of the claim's deadline), pushed again as attempt 2 under a
//!   new delivery id, then acknowledged; the claims last far longer than the test's
//!   patience, so only `retry_later` can bring the second attempt;
//! - a replica killed (SIGKILL) or stopped (SIGTERM) with pushes in flight: the others
//!   take its partitions and its lapsed claims over, and every acknowledged registration
//!   reaches the sink at least once.
//!
//! Pushes are matched by their idempotency key, `NAMESPACE/TIMERID/FIRING` (the timer id in
//! hex, as the API gives it). Waits are on the sink's pushes or on database rows, with a
//! generous deadline; nothing here depends on how fast the machine is.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::future::ready;
use std::sync::Arc;

use common::http_sink::{always, HttpSink, Push, Script};
use common::metrics::scrape;
use common::poison;
use common::postgres::explain;
use common::replica_set::clients::{Background, Registrar};
use common::replica_set::ledger::{assert_all_registered, registered_at_least, SharedLedger};
use common::replica_set::ReplicaSet;
use common::tooling::skip_postgres;
use common::*;

/// The namespace the sink pushes; no stream subscribes to it.
const NAMESPACE: &str = "pushed";

/// The `--sink` argument pushing [`NAMESPACE`] to `sink`.
fn sink_argument(sink: &HttpSink) -> String {
    format!("{NAMESPACE}={}", sink.url("/timers"))
}

/// The timer id (hex) an idempotency key names.
fn timer_of(push: &Push) -> &str {
    push.key.split('/').nth(1).unwrap_or_default()
}

/// The sink's pushes by idempotency key, in the order received.
fn by_key(pushes: &[Push]) -> BTreeMap<&str, Vec<&Push>> {
    let mut by_key: BTreeMap<&str, Vec<&Push>> = BTreeMap::new();
    for push in pushes {
        by_key.entry(&push.key).or_default().push(push);
    }
    by_key
}

/// The registered timers no push has named yet.
fn not_pushed(registered: &BTreeSet<String>, pushes: &[Push]) -> usize {
    let pushed: BTreeSet<&str> = pushes.iter().map(timer_of).collect();
    registered
        .iter()
        .filter(|id| !pushed.contains(id.as_str()))
        .count()
}

/// Waits until [`NAMESPACE`] has no timer left to fire and no expiration unacknowledged
/// in the database but the dead. (An acknowledged expiration's row goes at once when
/// nobody observes the namespace, as here, so the rows cannot tell its attempts
/// afterwards.)
async fn all_acknowledged(set: &ReplicaSet) {
    set.eventually("every timer fired and every push acknowledged", || async {
        let row = set
            .db
            .query_one(
                "SELECT (SELECT count(*) FROM tickd_timers WHERE namespace = $1),
                        (SELECT count(*) FROM tickd_expirations
                         WHERE namespace = $1 AND acked_at IS NULL AND NOT dead)",
                &[&NAMESPACE],
            )
            .await
            .map_err(|error| explain(&error))?;
        match (row.get::<_, i64>(0), row.get::<_, i64>(1)) {
            (0, 0) => Ok(()),
            (timers, unacked) => Err(format!(
                "{timers} timers pending, {unacked} expirations unacknowledged"
            )),
        }
    })
    .await;
}

/// The replicas' `tickd_sink_pushes_total` of [`NAMESPACE`] with `outcome`, added up.
async fn pushes_counted(set: &ReplicaSet, ids: &[&str], outcome: &str) -> f64 {
    let series =
        format!("tickd_sink_pushes_total{{namespace=\"{NAMESPACE}\",outcome=\"{outcome}\"}}");
    let mut total = 0.0;
    for id in ids {
        total += scrape(set.metrics_addr(id))
            .await
            .get(&series)
            .unwrap_or(0.0);
    }
    total
}

/// Each expiration's first push is answered 500 and handed back with `retry_later`; the
/// second, attempt 2 under its own delivery id, is answered 200 and acknowledged, and no
/// third comes. The claims are made for an hour (`--sink-timeout`), so an UPDATE of
/// `retry_later` that moved no claim would leave every second attempt past the test's
/// patience: the sink's wait fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_push_and_retry_a_sink_that_fails_once() {
    if skip_postgres("replicas_push_and_retry_a_sink_that_fails_once") {
        return;
    }
    const IDS: [&str; 2] = ["r1", "r2"];
    const TIMERS: usize = 20;
    let script: Script = Arc::new(|_, before| (if before == 0 { 500 } else { 200 }, None));
    let sink = HttpSink::start(script).await;
    let sink_flag = sink_argument(&sink);
    let set = ReplicaSet::start(&IDS, &["--sink", &sink_flag, "--sink-timeout", "1h"]).await;
    set.eventually("both replicas own partitions", || {
        set.each_owns_a_partition(&IDS)
    })
    .await;
    let ledger = SharedLedger::default();
    // Due close together, on partitions of both replicas: both pushers take part.
    Registrar::new(&set, &ledger, 500..=1_500)
        .in_namespace(NAMESPACE)
        .register(TIMERS)
        .await;
    assert_all_registered(&ledger, TIMERS);
    let registered: BTreeSet<String> = ledger.lock().unwrap().registered.keys().cloned().collect();

    sink.wait_for("a second attempt of every expiration", |pushes| {
        let second: BTreeSet<&str> = pushes
            .iter()
            .filter(|push| push.attempt == 2)
            .map(timer_of)
            .collect();
        registered.iter().all(|id| second.contains(id.as_str()))
    })
    .await;
    all_acknowledged(&set).await;

    // Acknowledged in the database: nothing can claim them again, and no push is left.
    let pushes = sink.pushes();
    let keys = by_key(&pushes);
    assert_eq!(keys.len(), TIMERS, "one key per expiration: {keys:#?}");
    for (key, pushes) in &keys {
        let attempts: Vec<u32> = pushes.iter().map(|push| push.attempt).collect();
        assert_eq!(attempts, [1, 2], "{key}: pushed as {pushes:#?}");
        assert_ne!(
            pushes[0].delivery_id, pushes[1].delivery_id,
            "{key}: each attempt has its own delivery id"
        );
        assert!(pushes.iter().all(|push| push.namespace == NAMESPACE));
        assert!(
            key.starts_with(&format!("{NAMESPACE}/")) && registered.contains(timer_of(pushes[0])),
            "{key} names no timer registered"
        );
    }
    assert_eq!(pushes_counted(&set, &IDS, "retry").await, TIMERS as f64);
    assert_eq!(pushes_counted(&set, &IDS, "delivered").await, TIMERS as f64);
    let dead = pending_with_dead(&mut set.client("r1"), NAMESPACE).await;
    assert_eq!(dead.dead_count, 0, "{dead:?}");
}

/// Replicas push while timers are registered through them; one is killed (SIGKILL) or
/// stopped (SIGTERM) once it has pushed, with pushes in flight (the sink holding its
/// answers). Its partitions are taken over, what it had in flight is pushed again once
/// its claims lapse, and every registration the replicas acknowledged reaches the sink
/// at least once and is acknowledged, none dead.
async fn pushes_survive_losing_a_replica(signal: &str) {
    const IDS: [&str; 3] = ["r1", "r2", "r3"];
    const VICTIM: &str = "r2";
    const SURVIVOR: &str = "r1";
    const TIMERS: usize = 300;
    let sink = HttpSink::start(always(200)).await;
    let sink_flag = sink_argument(&sink);
    // A claim lasts the sink timeout and 5 s: the victim's lapse within seconds. While
    // the sink holds its answers the survivors' pushes time out too, each an attempt:
    // enough attempts that none is buried meanwhile, however long the victim takes to go.
    let arguments = [
        "--sink",
        &sink_flag,
        "--sink-timeout",
        "2s",
        "--max-attempts",
        "50",
    ];
    let mut set = ReplicaSet::start(&IDS, &arguments).await;
    set.eventually("each replica owns a partition", || {
        set.each_owns_a_partition(&IDS)
    })
    .await;
    let ledger = SharedLedger::default();
    let registrations = Background::new();
    let registrar = Registrar::new(&set, &ledger, 300..=4_000).in_namespace(NAMESPACE);
    registrations.spawn(registrar.run_until(registrations.stop_signal()));

    // Lose the victim only once it has pushed, with timers pending on every replica.
    set.eventually("the victim has pushed", || async {
        if pushes_counted(&set, &[VICTIM], "delivered").await > 0.0 {
            Ok(())
        } else {
            Err("no push delivered yet".into())
        }
    })
    .await;
    set.eventually("100 registrations acknowledged", || {
        ready(registered_at_least(&ledger, 100))
    })
    .await;
    let victim_epochs = set.partitions_owned_by(VICTIM).await;
    assert!(!victim_epochs.is_empty(), "{VICTIM} owns no partition");
    // The sink holds its answers, so that the victim goes with pushes in flight, never
    // acknowledged: they must come again through the others.
    sink.hold();
    set.eventually("the victim has pushes in flight", || async {
        let series = format!("tickd_sink_in_flight{{namespace=\"{NAMESPACE}\"}}");
        match scrape(set.metrics_addr(VICTIM)).await.get(&series) {
            Some(in_flight) if in_flight > 0.0 => Ok(()),
            in_flight => Err(format!("{in_flight:?} in flight")),
        }
    })
    .await;
    match signal {
        "KILL" => set.kill(VICTIM),
        _ => set.stop(VICTIM).await,
    }
    sink.release();
    set.eventually("the victim's partitions owned by the others", || {
        set.taken_over(VICTIM, &victim_epochs)
    })
    .await;
    set.eventually("the rest of the ledger registered", || {
        ready(registered_at_least(&ledger, TIMERS))
    })
    .await;
    registrations.stop().await;

    let registered: BTreeSet<String> = ledger.lock().unwrap().registered.keys().cloned().collect();
    sink.wait_for("every timer of the ledger", |pushes| {
        not_pushed(&registered, pushes) == 0
    })
    .await;
    all_acknowledged(&set).await;
    // A timer not in the ledger is one whose registration's answer was lost with the
    // victim (committed, perhaps): no more of those than calls failed.
    let pushes = sink.pushes();
    let refused = ledger.lock().unwrap().register_errors;
    let unknown: BTreeSet<&str> = pushes
        .iter()
        .map(timer_of)
        .filter(|id| !registered.contains(*id))
        .collect();
    assert!(
        pushes
            .iter()
            .all(|push| push.key.starts_with(&format!("{NAMESPACE}/"))),
        "pushes of another namespace"
    );
    assert!(
        unknown.len() as u64 <= refused,
        "pushes of {} timers never registered ({refused} registrations failed): {unknown:?}",
        unknown.len()
    );
    let redelivered = pushes.iter().filter(|push| push.attempt > 1).count();
    eprintln!(
        "{} registered ({refused} failed), {} pushes ({redelivered} again after the {signal})",
        registered.len(),
        pushes.len(),
    );
    assert!(
        redelivered > 0,
        "no push came again (attempt > 1), though {VICTIM} went with pushes in flight"
    );
    let dead = pending_with_dead(&mut set.client(SURVIVOR), NAMESPACE).await;
    assert_eq!(dead.dead_count, 0, "{dead:?}");
}

/// A few expirations the sink fails whatever the attempt, among healthy ones, on two
/// replicas (see `common::poison`): each healthy one is pushed once and acknowledged,
/// each failing one goes dead after `--max-attempts`, whichever replica pushed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_push_healthy_expirations_among_ones_a_sink_always_fails() {
    if skip_postgres("replicas_push_healthy_expirations_among_ones_a_sink_always_fails") {
        return;
    }
    healthy_among_failing_on_replicas(&[]).await;
}

/// The same with more failing expirations than each pusher's window (a window of 4
/// against 10): see the one-node test of the same name in tests/sinks.rs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_push_healthy_ones_among_more_failing_ones_than_the_window() {
    if skip_postgres("replicas_push_healthy_ones_among_more_failing_ones_than_the_window") {
        return;
    }
    healthy_among_failing_on_replicas(&["--sink-max-in-flight", "2"]).await;
}

async fn healthy_among_failing_on_replicas(more: &[&str]) {
    const IDS: [&str; 2] = ["r1", "r2"];
    let sink = HttpSink::start(poison::script()).await;
    let sink_flag = sink_argument(&sink);
    let mut arguments = vec!["--sink", &sink_flag, "--max-attempts", "5"];
    arguments.extend_from_slice(more);
    let set = ReplicaSet::start(&IDS, &arguments).await;
    set.eventually("both replicas own partitions", || {
        set.each_owns_a_partition(&IDS)
    })
    .await;
    let late = poison::run(&mut set.client(IDS[0]), &sink, NAMESPACE, 5).await;
    all_acknowledged(&set).await;
    let delivered = pushes_counted(&set, &IDS, "delivered").await;
    assert_eq!(
        delivered,
        poison::HEALTHY as f64,
        "pushes delivered, both replicas"
    );
    eprintln!(
        "sink_failure_isolation backend=replicas {more:?} healthy={} poison={} median_late_ms={} max_late_ms={}",
        poison::HEALTHY,
        poison::POISON,
        late.median.as_millis(),
        late.max.as_millis()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_resumes_pushes() {
    if skip_postgres("a_takeover_resumes_pushes") {
        return;
    }
    pushes_survive_losing_a_replica("KILL").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_go_on_after_a_replica_drains() {
    if skip_postgres("pushes_go_on_after_a_replica_drains") {
        return;
    }
    pushes_survive_losing_a_replica("TERM").await;
}
