//! Replicated mode delivers as one node does, wherever subscribers are connected: an ack
//! made on any replica settles a delivery, a subscriber holds at most its `max_unacked`
//! claims, what is not acknowledged comes back with the next attempt number until
//! `--max-attempts` and is then dead (listed by Pending on any replica), and the trim keeps
//! `--max-dead` dead expirations per namespace and forgets acknowledged ones once their
//! retention for observers is over.
//!
//! The first test runs real `tickd` replicas; the trim is driven directly on a replica's
//! parts, so that its outcome can be asserted row by row. Waits poll for the awaited state
//! with a generous deadline.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::postgres::{explain, Postgres};
use common::replica_set::parts::{connections, replica_parts};
use common::replica_set::{next_in_time, ReplicaSet};
use common::tooling::skip_postgres;
use common::*;
use tokio::sync::watch;

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
    let set = ReplicaSet::start(&["r1", "r2"], &[]).await;
    set.eventually("both replicas own partitions", || {
        set.each_owns_a_partition(&["r1", "r2"])
    })
    .await;
    let mut on_r1 = set.client("r1");
    let mut on_r2 = set.client("r2");
    let mut deliveries = subscribe(&mut on_r1, SEMANTICS, ACK_WINDOW_MS, 2).await;
    for _ in 0..3 {
        register(&mut on_r2, spec(SEMANTICS, 100, b"")).await;
    }
    let first = next_in_time(&mut deliveries).await;
    let second = next_in_time(&mut deliveries).await;
    assert_eq!((first.attempt, second.attempt), (1, 1));
    set.eventually("all three fired", || async {
        let fired: i64 = set
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
    let live_claims: i64 = set
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
    let mut delivery_ids: BTreeSet<String> = [&first, &second]
        .iter()
        .map(|delivery| delivery.delivery_id.clone())
        .collect();
    let acked_id = first.timer.expect("timer").id;
    // Everything else is never acknowledged: each remaining timer is delivered five times.
    let mut attempts: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    attempts
        .entry(second.timer.expect("timer").id)
        .or_default()
        .insert(1);
    while attempts.len() < 2 || attempts.values().any(|seen| seen.len() < 5) {
        let delivery = next_in_time(&mut deliveries).await;
        assert!(
            delivery_ids.insert(delivery.delivery_id.clone()),
            "delivery id {} handed out twice",
            delivery.delivery_id
        );
        let id = delivery.timer.expect("timer").id;
        assert_ne!(id, acked_id, "an acknowledged expiration came back");
        attempts.entry(id).or_default().insert(delivery.attempt);
    }
    for seen in attempts.values() {
        assert_eq!(seen, &(1..=5).collect::<BTreeSet<u32>>());
    }
    set.eventually("the two unacknowledged expirations are dead", || {
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

    // Redriven, their attempts start again at 1, under delivery ids never seen before: a
    // late ack of an earlier attempt settles nothing.
    let redriven = on_r1
        .redrive(tickd::proto::RedriveRequest {
            namespace: SEMANTICS.into(),
            delivery_ids: Vec::new(),
        })
        .await
        .expect("redrive")
        .into_inner();
    assert_eq!(redriven.redriven, 2, "{redriven:?}");
    let mut again = Vec::new();
    for _ in 0..2 {
        let delivery = next_in_time(&mut deliveries).await;
        assert_eq!(delivery.attempt, 1);
        assert!(
            !delivery_ids.contains(&delivery.delivery_id),
            "redriven under an earlier delivery id {}",
            delivery.delivery_id
        );
        again.push(delivery.delivery_id);
    }
    let stale: Vec<String> = delivery_ids.into_iter().collect();
    let late = ack_on(&mut on_r2, SEMANTICS, stale.clone()).await;
    assert_eq!(
        (late.acknowledged, late.unknown.len()),
        (0, stale.len()),
        "{late:?}"
    );
    let acked = ack_on(&mut on_r2, SEMANTICS, again).await;
    assert_eq!(acked.acknowledged, 2, "{acked:?}");
}

async fn ack_on(
    client: &mut tickd::proto::timers_client::TimersClient<tonic::transport::Channel>,
    namespace: &str,
    delivery_ids: Vec<String>,
) -> tickd::proto::AckResponse {
    client
        .ack(tickd::proto::AckRequest {
            namespace: namespace.into(),
            delivery_ids,
        })
        .await
        .expect("ack")
        .into_inner()
}

/// A replica that dies holding a delivery: its subscriber's claim lapses, and the
/// expiration comes back through another replica as attempt 2 under a new delivery id;
/// the ack the first subscriber sends late, through the survivor, settles nothing, and
/// the new one's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_holding_a_delivery_leaves_its_attempt_counted() {
    if skip_postgres("a_replica_killed_holding_a_delivery_leaves_its_attempt_counted") {
        return;
    }
    const NAMESPACE: &str = "takeover";
    const ACK_WINDOW_MS: u64 = 2_000;
    let mut set = ReplicaSet::start(&["r1", "r2"], &[]).await;
    let mut on_r1 = set.client("r1");
    let mut on_r2 = set.client("r2");
    let mut first_stream = subscribe(&mut on_r1, NAMESPACE, ACK_WINDOW_MS, 10).await;
    let timer = register(&mut on_r2, spec(NAMESPACE, 100, b"held")).await;
    let first = next_in_time(&mut first_stream).await;
    assert_eq!((timer_id(&first), first.attempt), (timer.id.clone(), 1));
    set.kill("r1");
    drop(first_stream);

    let mut second_stream = subscribe(&mut on_r2, NAMESPACE, ACK_WINDOW_MS, 10).await;
    let second = next_in_time(&mut second_stream).await;
    assert_eq!((timer_id(&second), second.attempt), (timer.id, 2));
    assert_ne!(second.delivery_id, first.delivery_id);
    let late = ack_on(&mut on_r2, NAMESPACE, vec![first.delivery_id.clone()]).await;
    assert_eq!(late.acknowledged, 0, "{late:?}");
    let acked = ack_on(&mut on_r2, NAMESPACE, vec![second.delivery_id]).await;
    assert_eq!(acked.acknowledged, 1, "{acked:?}");
}

/// Dead expirations (attempts used up, no live claim) are kept per namespace up to
/// `--max-dead`, the newest, and Pending counts what it lists, before the trim has marked
/// them dead as after; live ones and other namespaces' are not touched, and a marked row
/// with attempts left again is unmarked. Acknowledged ones are deleted once their
/// retention for observers is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_and_acknowledged_expirations_are_trimmed() {
    if skip_postgres("dead_and_acknowledged_expirations_are_trimmed") {
        return;
    }
    use tickd::cluster::delivery::ClusterDeliveries;
    use tickd::cluster::Wakeups;
    use tickd::domain::DeliveryConfig;

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
        connections(&postgres).await,
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
    // What died unmarked is marked dead now, so that delivery's walks skip it; the one
    // still being delivered is not.
    let marked: Vec<(i64, bool)> = postgres
        .query("SELECT timer_id, dead FROM tickd_expirations ORDER BY seq")
        .await
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(marked, vec![(4, true), (5, true), (6, true), (7, false)]);
    // A row marked dead with attempts left again (as an older replica's Redrive leaves
    // it, or a raised --max-attempts) loses the mark, and is claimable again.
    postgres
        .query(
            "INSERT INTO tickd_expirations
                 (namespace, timer_id, payload, deadline, fired_at, fired_count, late, attempts,
                  dead)
             VALUES ('c', 0, '', 0, 0, 1, false, 0, true)",
        )
        .await;
    assert_eq!(deliveries.trim_dead_once().await.expect("trimming"), 0);
    let revived: Vec<bool> = postgres
        .query("SELECT dead FROM tickd_expirations WHERE namespace = 'c'")
        .await
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(revived, vec![false]);

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
