//! Replicated mode: cron timers, Reschedule, replacing registrations, Redrive and
//! far-off batches, end to end through real `tickd` replicas sharing a real PostgreSQL.
//!
//! Each keeps the single node's contract: a cron timer fires at its calendar's whole
//! seconds, never early, counting its firings; a rescheduled timer fires once, at its new
//! time (also when its partition changes hands before then), and a fired one-shot cannot
//! be rescheduled; a replacing registration leaves one timer under its key; redriven dead
//! expirations are delivered again from their first attempt.
//!
//! Nothing waits for time to pass as a way of synchronising: tests await deliveries, and
//! poll the database only for states no event announces (a lease taken over, an
//! expiration dead). "Fired once" is checked with a later sentinel timer: deliveries come
//! in firing order on one stream, so everything that fired before the sentinel has been
//! seen once the sentinel arrives. Time is asserted as order ("not before its deadline"),
//! never as a bound on lateness.

mod common;

use common::postgres::explain;
use common::replica_set::{next_in_time, ReplicaSet, LOAD_HORIZON};
use common::tooling::skip_postgres;
use common::*;
use tickd::proto::timers_client::TimersClient;
use tonic::transport::Channel;
use tonic::Code;

const NANOS_PER_SECOND: i128 = 1_000_000_000;

/// Acknowledges `expiration`, which must still be awaiting its ack.
async fn settle(client: &mut TimersClient<Channel>, namespace: &str, expiration: &Expiration) {
    let acked = ack(client, namespace, vec![expiration.delivery_id.clone()]).await;
    assert_eq!(acked.acknowledged, 1, "{acked:?}");
}

/// The expirations on `stream` up to and including the sentinel timer's (each
/// acknowledged), the sentinel's left out.
async fn until_sentinel(
    client: &mut TimersClient<Channel>,
    stream: &mut tonic::Streaming<SubscribeResponse>,
    namespace: &str,
    sentinel_id: &str,
) -> Vec<Expiration> {
    let mut before = Vec::new();
    loop {
        let expiration = next_in_time(stream).await;
        settle(client, namespace, &expiration).await;
        if timer_id(&expiration) == sentinel_id {
            return before;
        }
        before.push(expiration);
    }
}

fn deadline_of(timer: &Timer) -> i128 {
    unix_nanos(timer.deadline.as_ref().expect("deadline"))
}

fn fired_at(expiration: &Expiration) -> i128 {
    unix_nanos(expiration.fired_at.as_ref().expect("fired_at"))
}

fn timer_of(expiration: &Expiration) -> &Timer {
    expiration.timer.as_ref().expect("timer")
}

async fn reschedule(
    client: &mut TimersClient<Channel>,
    timer: Option<TimerRef>,
    delay_ms: u64,
    payload: Option<&[u8]>,
) -> Result<Timer, tonic::Status> {
    let response = client
        .reschedule(RescheduleRequest {
            timer,
            delay: Some(millis(delay_ms)),
            deadline: None,
            payload: payload.map(|payload| payload.to_vec().into()),
        })
        .await?;
    Ok(response.into_inner().timer.expect("timer"))
}

/// Asserts that `expiration` is the single firing of a rescheduled timer: at its new
/// deadline, not before it, with the new payload, on its first delivery.
fn assert_fired_at_new_time(expiration: &Expiration, rescheduled: &Timer, payload: &[u8]) {
    let fired = timer_of(expiration);
    assert_eq!(fired.id, rescheduled.id);
    assert_eq!(
        deadline_of(fired),
        deadline_of(rescheduled),
        "{expiration:?}"
    );
    assert!(
        fired_at(expiration) >= deadline_of(rescheduled),
        "fired before its new deadline: {expiration:?}"
    );
    assert_eq!(&fired.payload[..], payload);
    assert_eq!((expiration.attempt, fired.fired_count), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_timer_fires_on_whole_seconds_counting_its_firings() {
    if skip_postgres("a_cron_timer_fires_on_whole_seconds_counting_its_firings") {
        return;
    }
    const NAMESPACE: &str = "cron";
    let set = ReplicaSet::start(&["r1", "r2"], &[]).await;
    let mut client = set.client("r1");
    let mut stream = subscribe(&mut set.client("r2"), NAMESPACE, 30_000, 10).await;
    let before = now_unix_nanos();
    let registered = register(
        &mut client,
        TimerSpec {
            namespace: NAMESPACE.into(),
            key: "every-second".into(),
            cron: "*/1 * * * * *".into(),
            time_zone: "Europe/Berlin".into(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        (registered.cron.as_str(), registered.time_zone.as_str()),
        ("*/1 * * * * *", "Europe/Berlin")
    );
    let first_deadline = deadline_of(&registered);
    assert_eq!(first_deadline % NANOS_PER_SECOND, 0, "{registered:?}");
    assert!(first_deadline >= before, "{registered:?}");

    let got = get(&mut client, by_key(NAMESPACE, "every-second"))
        .await
        .expect("get");
    assert_eq!(
        (got.cron.as_str(), got.time_zone.as_str(), got.id.as_str()),
        ("*/1 * * * * *", "Europe/Berlin", registered.id.as_str())
    );

    let mut last_deadline = first_deadline - 1;
    for count in 1..=3 {
        let expiration = next_in_time(&mut stream).await;
        settle(&mut client, NAMESPACE, &expiration).await;
        let timer = timer_of(&expiration);
        let deadline = deadline_of(timer);
        assert_eq!(timer.id, registered.id);
        assert_eq!(timer.fired_count, count, "{expiration:?}");
        assert_eq!(deadline % NANOS_PER_SECOND, 0, "{expiration:?}");
        assert!(deadline > last_deadline, "{expiration:?}");
        assert!(
            fired_at(&expiration) >= deadline,
            "fired early: {expiration:?}"
        );
        assert_eq!(
            (timer.cron.as_str(), timer.time_zone.as_str()),
            ("*/1 * * * * *", "Europe/Berlin")
        );
        last_deadline = deadline;
    }
    // Still pending, at a later second, having fired (at least) three times.
    let got = get(&mut client, by_key(NAMESPACE, "every-second"))
        .await
        .expect("get");
    assert!(
        deadline_of(&got) > last_deadline && got.fired_count >= 3,
        "{got:?}"
    );
    assert!(cancel(&mut client, by_key(NAMESPACE, "every-second")).await);
}

/// One timer moved later and one moved earlier, both inside the load horizon (so their
/// old deadlines are in the owner's wheel): each fires once, at its new deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescheduled_timer_fires_once_at_its_new_time() {
    if skip_postgres("a_rescheduled_timer_fires_once_at_its_new_time") {
        return;
    }
    const NAMESPACE: &str = "moved";
    let set = ReplicaSet::start(&["r1"], &[]).await;
    let mut client = set.client("r1");
    let mut stream = subscribe(&mut client, NAMESPACE, 30_000, 10).await;
    let later = register(&mut client, spec(NAMESPACE, 1_500, b"old")).await;
    let earlier = register(&mut client, spec(NAMESPACE, 4_000, b"old")).await;
    let later = reschedule(
        &mut client,
        by_id(NAMESPACE, &later.id),
        3_000,
        Some(b"new"),
    )
    .await
    .expect("rescheduling later");
    let earlier = reschedule(&mut client, by_id(NAMESPACE, &earlier.id), 1_000, None)
        .await
        .expect("rescheduling earlier");
    assert!(deadline_of(&earlier) < deadline_of(&later));
    let sentinel = register(&mut client, spec(NAMESPACE, 4_500, b"")).await;

    let fired = until_sentinel(&mut client, &mut stream, NAMESPACE, &sentinel.id).await;
    assert_eq!(fired.len(), 2, "{fired:?}");
    assert_fired_at_new_time(&fired[0], &earlier, b"old");
    assert_fired_at_new_time(&fired[1], &later, b"new");
}

/// The partition's owner stops between the reschedule and both deadlines: its successor
/// loads the timer from the database and fires it once, at the new deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescheduled_timer_fires_at_its_new_time_after_its_partition_moves() {
    if skip_postgres("a_rescheduled_timer_fires_at_its_new_time_after_its_partition_moves") {
        return;
    }
    const NAMESPACE: &str = "handed-over";
    let mut set = ReplicaSet::start(&["first"], &[]).await;
    set.eventually("the first replica holds every partition", || {
        set.owns_every_partition("first")
    })
    .await;
    let mut client = set.client("first");
    // Inside the load horizon: the first replica's wheel holds the old deadline.
    let timer = register(&mut client, spec(NAMESPACE, 4_000, b"old")).await;
    // Beyond the horizon at first, so the successor loads it from its scans.
    let moved_ms = LOAD_HORIZON.as_millis() as u64 + 10_000;
    let moved = reschedule(
        &mut client,
        by_id(NAMESPACE, &timer.id),
        moved_ms,
        Some(b"new"),
    )
    .await
    .expect("rescheduling");

    set.start_replica("second").await;
    set.stop("first").await;
    let stopped_at = now_unix_nanos();
    assert!(
        stopped_at < deadline_of(&moved),
        "the test needs the first replica gone before the new deadline"
    );
    set.eventually("the second replica holds every partition", || {
        set.owns_every_partition("second")
    })
    .await;
    let mut client = set.client("second");
    let mut stream = subscribe(&mut client, NAMESPACE, 30_000, 10).await;
    let sentinel_ms = (deadline_of(&moved) - now_unix_nanos()) / 1_000_000 + 1_000;
    let sentinel = register(&mut client, spec(NAMESPACE, sentinel_ms as u64, b"")).await;

    let fired = until_sentinel(&mut client, &mut stream, NAMESPACE, &sentinel.id).await;
    assert_eq!(fired.len(), 1, "{fired:?}\n{}", set.report().await);
    assert_fired_at_new_time(&fired[0], &moved, b"new");
    assert!(fired_at(&fired[0]) > stopped_at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescheduling_a_fired_one_shot_timer_is_not_found() {
    if skip_postgres("rescheduling_a_fired_one_shot_timer_is_not_found") {
        return;
    }
    const NAMESPACE: &str = "gone";
    let set = ReplicaSet::start(&["r1"], &[]).await;
    let mut client = set.client("r1");
    let mut stream = subscribe(&mut client, NAMESPACE, 30_000, 10).await;
    let timer = register(
        &mut client,
        TimerSpec {
            key: "once".into(),
            ..spec(NAMESPACE, 100, b"")
        },
    )
    .await;
    let expiration = next_in_time(&mut stream).await;
    assert_eq!(timer_of(&expiration).id, timer.id);
    settle(&mut client, NAMESPACE, &expiration).await;
    for reference in [by_id(NAMESPACE, &timer.id), by_key(NAMESPACE, "once")] {
        let refused = reschedule(&mut client, reference, 1_000, None)
            .await
            .expect_err("rescheduling a fired timer");
        assert_eq!(refused.code(), Code::NotFound, "{refused:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacing_registration_leaves_one_timer_under_its_key() {
    if skip_postgres("a_replacing_registration_leaves_one_timer_under_its_key") {
        return;
    }
    const NAMESPACE: &str = "replaced";
    let set = ReplicaSet::start(&["r1"], &[]).await;
    let mut client = set.client("r1");
    let keyed = |delay_ms: u64, payload: &[u8]| TimerSpec {
        key: "job".into(),
        replace: true,
        ..spec(NAMESPACE, delay_ms, payload)
    };
    let first = client
        .new_timeout(NewTimeoutRequest {
            timer: Some(keyed(600_000, b"old")),
        })
        .await
        .expect("registering")
        .into_inner();
    // Nothing under the key yet: an ordinary registration.
    assert!(first.created && !first.replaced, "{first:?}");
    let original = first.timer.expect("timer");
    let second = client
        .new_timeout(NewTimeoutRequest {
            timer: Some(keyed(1_000, b"new")),
        })
        .await
        .expect("replacing")
        .into_inner();
    assert!(!second.created && second.replaced, "{second:?}");
    let replacement = second.timer.expect("timer");
    assert_eq!(replacement.id, original.id);
    assert!(deadline_of(&replacement) < deadline_of(&original));

    assert_eq!(pending_count(&mut client, NAMESPACE).await, 1);
    let got = get(&mut client, by_key(NAMESPACE, "job"))
        .await
        .expect("get");
    assert_eq!(
        (&got.payload[..], deadline_of(&got)),
        (&b"new"[..], deadline_of(&replacement))
    );
    let mut stream = subscribe(&mut client, NAMESPACE, 30_000, 10).await;
    let sentinel = register(&mut client, spec(NAMESPACE, 2_000, b"")).await;
    let fired = until_sentinel(&mut client, &mut stream, NAMESPACE, &sentinel.id).await;
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert_fired_at_new_time(&fired[0], &replacement, b"new");
}

/// With one delivery attempt, an expiration whose subscriber never acknowledges it is
/// dead; redriven, it is delivered again from attempt 1, and ids that name no dead
/// expiration come back in `not_dead`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redriven_dead_expiration_is_delivered_again() {
    if skip_postgres("a_redriven_dead_expiration_is_delivered_again") {
        return;
    }
    const NAMESPACE: &str = "redriven";
    let set = ReplicaSet::start(&["r1", "r2"], &["--max-attempts", "1"]).await;
    let mut client = set.client("r1");
    let mut stream = subscribe(&mut set.client("r2"), NAMESPACE, 500, 10).await;
    let timer = register(&mut client, spec(NAMESPACE, 100, b"dead")).await;
    let first = next_in_time(&mut stream).await;
    assert_eq!(
        (timer_of(&first).id.as_str(), first.attempt),
        (timer.id.as_str(), 1)
    );

    // Not acknowledged: dead once its ack deadline passes.
    set.eventually("the expiration is dead", || {
        let mut client = client.clone();
        async move {
            match pending_with_dead(&mut client, NAMESPACE).await.dead_count {
                1 => Ok(()),
                count => Err(format!("{count} dead")),
            }
        }
    })
    .await;
    let dead = pending_with_dead(&mut client, NAMESPACE)
        .await
        .dead_expirations;
    let dead_id = dead[0].delivery_id.clone();
    const NEVER_GIVEN: &str = "00000000000000ff";
    let outcome = client
        .redrive(RedriveRequest {
            namespace: NAMESPACE.into(),
            delivery_ids: vec![dead_id, NEVER_GIVEN.into()],
        })
        .await
        .expect("redrive")
        .into_inner();
    assert_eq!(outcome.redriven, 1, "{outcome:?}");
    assert_eq!(outcome.not_dead, vec![NEVER_GIVEN.to_string()]);

    let again = next_in_time(&mut stream).await;
    assert_eq!(
        (timer_of(&again).id.as_str(), again.attempt),
        (timer.id.as_str(), 1)
    );
    assert_eq!(
        fired_at(&again),
        fired_at(&first),
        "the same firing, not a new one"
    );
    settle(&mut client, NAMESPACE, &again).await;
    let page = pending_with_dead(&mut client, NAMESPACE).await;
    assert_eq!(page.dead_count, 0, "{page:?}");
    // Nothing dead is left to redrive.
    let outcome = client
        .redrive(RedriveRequest {
            namespace: NAMESPACE.into(),
            delivery_ids: Vec::new(),
        })
        .await
        .expect("redrive")
        .into_inner();
    assert_eq!(outcome.redriven, 0, "{outcome:?}");
    let left: i64 = set
        .db
        .query_one(
            "SELECT count(*) FROM tickd_expirations WHERE namespace = $1 AND acked_at IS NULL",
            &[&NAMESPACE],
        )
        .await
        .unwrap_or_else(|error| panic!("{}", explain(&error)))
        .get(0);
    assert_eq!(left, 0);
}

/// A batch of keyless timers due beyond the announcement window (twice the load horizon),
/// so announced to no one: each is stored whole (listed with its payload) and, once its
/// deadline enters the horizon, loaded by the owner's scan and fired once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_off_batch_is_stored_whole_and_fires_once() {
    if skip_postgres("a_far_off_batch_is_stored_whole_and_fires_once") {
        return;
    }
    const NAMESPACE: &str = "far-off";
    let set = ReplicaSet::start(&["r1"], &[]).await;
    let mut client = set.client("r1");
    let mut stream = subscribe(&mut client, NAMESPACE, 30_000, 100).await;
    let far_ms = 2 * LOAD_HORIZON.as_millis() as u64 + 2_000;
    let ids = register_all(&mut client, specs(NAMESPACE, 40, far_ms)).await;
    let listed = list_pending(&mut client, NAMESPACE).await;
    assert_eq!(listed.len(), ids.len());
    for (index, id) in ids.iter().enumerate() {
        let timer = &listed[id];
        assert_eq!(&timer.payload[..], format!("payload-{index}").as_bytes());
    }
    let sentinel = register(&mut client, spec(NAMESPACE, far_ms + 1_000, b"")).await;

    let fired = until_sentinel(&mut client, &mut stream, NAMESPACE, &sentinel.id).await;
    let mut fired_ids: Vec<String> = fired.iter().map(timer_id).collect();
    fired_ids.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(fired_ids, expected, "each fires once");
    for expiration in &fired {
        let id = timer_id(expiration);
        assert_eq!(
            expiration.timer.as_ref().expect("timer").payload,
            listed[&id].payload
        );
    }
}
