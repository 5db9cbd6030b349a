//! Delivery semantics end to end: sharing, acknowledgement, redelivery, dead expirations,
//! buffering while nobody listens, bounded windows, observers and auto-ack.
//!
//! Every receive is bounded by [`RECEIVE_TIMEOUT`] so a bug fails the test instead of hanging
//! it; no assertion depends on how fast anything runs.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::*;
use tickd::proto::timers_client::TimersClient;
use tonic::transport::Channel;

/// How long a test waits for one event before declaring it missing.
const RECEIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// An ack timeout long enough never to expire during a test.
const LONG_ACK_MS: u64 = 600_000;

/// The next expiration on `stream`, or a test failure naming `what` if none comes.
async fn recv(stream: &mut tonic::Streaming<SubscribeResponse>, what: &str) -> Expiration {
    tokio::time::timeout(RECEIVE_TIMEOUT, next_expiration(stream))
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// The next expiration on either of two sharing subscriptions, and which one (0 or 1) it
/// came on; a test failure saying how far it got (`progress`) if none comes.
async fn recv_either(
    a: &mut tonic::Streaming<SubscribeResponse>,
    b: &mut tonic::Streaming<SubscribeResponse>,
    progress: impl FnOnce() -> String,
) -> (usize, Expiration) {
    tokio::time::timeout(RECEIVE_TIMEOUT, async {
        tokio::select! {
            expiration = next_expiration(a) => (0, expiration),
            expiration = next_expiration(b) => (1, expiration),
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out with {}", progress()))
}

/// Receives on two sharing subscriptions, acknowledging each expiration at once, until
/// every one of `ids` came; checks that each came once, on its first attempt, and that
/// both subscriptions took part.
async fn share_between(
    a: &mut tonic::Streaming<SubscribeResponse>,
    b: &mut tonic::Streaming<SubscribeResponse>,
    client: &mut TimersClient<Channel>,
    namespace: &str,
    ids: &[String],
) {
    let mut received = Vec::new();
    let mut per_subscriber = [0usize; 2];
    let mut distinct = HashSet::new();
    while distinct.len() < ids.len() {
        let (who, expiration) = recv_either(a, b, || {
            format!(
                "{} of {} distinct expirations received",
                distinct.len(),
                ids.len()
            )
        })
        .await;
        assert_eq!(expiration.attempt, 1, "redelivery while everyone acks");
        ack_one(client, namespace, &expiration.delivery_id, true).await;
        per_subscriber[who] += 1;
        let id = timer_id(&expiration);
        distinct.insert(id.clone());
        received.push(id);
    }
    assert_eq!(
        received.len(),
        ids.len(),
        "some expiration was delivered twice"
    );
    assert_exact_union(&received, ids);
    assert!(
        per_subscriber.iter().all(|&count| count > 0),
        "one subscriber got no work: {per_subscriber:?}"
    );
}

/// Acknowledges one delivery; checks that it was awaiting an ack (`awaited`) or was
/// reported unknown.
async fn ack_one(
    client: &mut TimersClient<Channel>,
    namespace: &str,
    delivery_id: &str,
    awaited: bool,
) {
    let outcome = ack(client, namespace, vec![delivery_id.to_owned()]).await;
    if awaited {
        assert_eq!(
            outcome.acknowledged, 1,
            "{delivery_id} was not awaiting an ack"
        );
        assert!(outcome.unknown.is_empty(), "{:?}", outcome.unknown);
    } else {
        assert_eq!(outcome.acknowledged, 0, "{delivery_id} was acknowledged");
        assert_eq!(outcome.unknown, vec![delivery_id.to_owned()]);
    }
}

/// Receives `count` expirations on `stream`, each of them attempt number `attempt`, and
/// acknowledges each at once; returns their timers' ids.
async fn recv_and_ack_each(
    stream: &mut tonic::Streaming<SubscribeResponse>,
    client: &mut TimersClient<Channel>,
    namespace: &str,
    count: usize,
    attempt: u32,
    what: &str,
) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..count {
        let expiration = recv(stream, what).await;
        assert_eq!(expiration.attempt, attempt, "{what}");
        ack_one(client, namespace, &expiration.delivery_id, true).await;
        ids.push(timer_id(&expiration));
    }
    ids
}

async fn subscribe_with(
    client: &mut TimersClient<Channel>,
    request: SubscribeRequest,
) -> tonic::Streaming<SubscribeResponse> {
    client
        .subscribe(request)
        .await
        .expect("subscribe")
        .into_inner()
}

/// Polls a state that has no stream to await, a bounded number of times.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..2_000 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("gave up waiting for {what}");
}

fn assert_exact_union(received: &[String], expected: &[String]) {
    let mut seen = HashSet::new();
    for id in received {
        assert!(seen.insert(id.clone()), "timer {id} delivered twice");
    }
    let expected: HashSet<String> = expected.iter().cloned().collect();
    assert_eq!(seen, expected, "delivered ids differ from registered ids");
}

/// 1. Two sharing subscribers that both ack split the expirations: no duplicates, none
/// missing, every one on its first attempt, and both take part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharing_subscribers_split_without_duplicates() {
    const N: usize = 200;
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let ns = "share";
    // A small window makes the dispatcher alternate: both subscriptions exist before the
    // single fired batch arrives, and neither may hold more than 4 unacked at once.
    let mut a = subscribe(&mut client, ns, LONG_ACK_MS, 4).await;
    let mut b = subscribe(&mut client, ns, LONG_ACK_MS, 4).await;
    let ids = register_all(&mut client, specs(ns, N, 0)).await;

    share_between(&mut a, &mut b, &mut client, ns, &ids).await;
    let pending = pending_with_dead(&mut client, ns).await;
    assert_eq!(pending.dead_count, 0);
    server.stop().await;
}

/// 2. Deliveries held by a subscriber that goes away go to another one, as attempt 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnected_subscriber_deliveries_go_to_another() {
    const N: usize = 5;
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let ns = "disconnect";
    let mut a = subscribe(&mut client, ns, LONG_ACK_MS, 10).await;
    let ids = register_all(&mut client, specs(ns, N, 0)).await;
    let mut held = HashMap::new();
    for _ in 0..N {
        let expiration = recv(&mut a, "first deliveries to A").await;
        assert_eq!(expiration.attempt, 1);
        held.insert(timer_id(&expiration), expiration.delivery_id);
    }
    assert_exact_union(&held.keys().cloned().collect::<Vec<_>>(), &ids);

    // B joins with nothing waiting; A leaves without acking.
    let mut b_client = server.client().await;
    let mut b = subscribe(&mut b_client, ns, LONG_ACK_MS, 10).await;
    drop(a);

    let mut redelivered = Vec::new();
    for _ in 0..N {
        let expiration = recv(&mut b, "redeliveries to B").await;
        assert_eq!(expiration.attempt, 2, "redelivery must count the attempt");
        assert_ne!(
            held[&timer_id(&expiration)],
            expiration.delivery_id,
            "a redelivery gets a new delivery id"
        );
        ack_one(&mut b_client, ns, &expiration.delivery_id, true).await;
        redelivered.push(timer_id(&expiration));
    }
    assert_exact_union(&redelivered, &ids);

    // A's deliveries were taken back: acking them now is too late.
    let stale: Vec<String> = held.into_values().collect();
    let outcome = ack(&mut client, ns, stale.clone()).await;
    assert_eq!(outcome.acknowledged, 0);
    assert_eq!(
        outcome.unknown.iter().collect::<HashSet<_>>(),
        stale.iter().collect::<HashSet<_>>()
    );
    server.stop().await;
}

/// 3. A delivery not acknowledged within the subscription's ack timeout comes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_delivery_is_redelivered_after_ack_timeout() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let ns = "ack-timeout";
    let mut stream = subscribe(&mut client, ns, 100, 10).await;
    let ids = register_all(&mut client, specs(ns, 1, 0)).await;

    let first = recv(&mut stream, "the first delivery").await;
    assert_eq!(timer_id(&first), ids[0]);
    assert_eq!(first.attempt, 1);
    let second = recv(&mut stream, "the redelivery").await;
    assert_eq!(timer_id(&second), ids[0]);
    assert_eq!(second.attempt, 2);
    assert_ne!(first.delivery_id, second.delivery_id);
    assert_eq!(
        second.timer.as_ref().unwrap().payload,
        b"payload-0".to_vec()
    );

    // The expired delivery can no longer be acknowledged; the new one can.
    ack_one(&mut client, ns, &first.delivery_id, false).await;
    ack_one(&mut client, ns, &second.delivery_id, true).await;
    server.stop().await;
}

/// 4. After max_attempts unacknowledged deliveries the expiration is dead: listed by
/// Pending, and not delivered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiration_is_dead_after_max_attempts() {
    let server = TestServer::start_with(config(|c| {
        c.max_attempts = 2;
    }))
    .await;
    let mut client = server.client().await;
    let ns = "max-attempts";
    let mut stream = subscribe(&mut client, ns, 100, 10).await;
    let ids = register_all(&mut client, specs(ns, 1, 0)).await;

    for attempt in 1..=2 {
        let expiration = recv(&mut stream, "a delivery attempt").await;
        assert_eq!(timer_id(&expiration), ids[0]);
        assert_eq!(expiration.attempt, attempt);
    }

    // The second ack deadline has no stream event of its own: poll for its effect.
    eventually("the expiration to be declared dead", || {
        let mut client = client.clone();
        async move { pending_with_dead(&mut client, ns).await.dead_count == 1 }
    })
    .await;
    let pending = pending_with_dead(&mut client, ns).await;
    assert_eq!(pending.dead_count, 1);
    assert_eq!(pending.dead_expirations.len(), 1);
    assert_eq!(timer_id(&pending.dead_expirations[0]), ids[0]);
    assert_eq!(pending.dead_expirations[0].attempt, 2);

    // Had it been put back in line, it would be on the stream before this marker fires.
    let marker = register_all(&mut client, specs(ns, 1, 0)).await;
    let next = recv(&mut stream, "the marker").await;
    assert_eq!(
        timer_id(&next),
        marker[0],
        "the dead expiration came a third time"
    );
    assert_eq!(next.attempt, 1);
    ack_one(&mut client, ns, &next.delivery_id, true).await;
    assert_eq!(pending_with_dead(&mut client, ns).await.dead_count, 1);
    server.stop().await;
}

/// 5. Expirations that fire with nobody subscribed wait, and go to the first subscriber.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expirations_wait_for_the_first_subscriber() {
    const N: usize = 20;
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let ns = "buffered";
    let ids = register_all(&mut client, specs(ns, N, 1)).await;
    // Firing has no stream to await without a subscriber: poll until nothing is pending.
    eventually("the timers to fire", || {
        let mut client = client.clone();
        async move { pending_count(&mut client, ns).await == 0 }
    })
    .await;

    let mut stream = subscribe(&mut client, ns, LONG_ACK_MS, 100).await;
    let what = "buffered expirations";
    let received = recv_and_ack_each(&mut stream, &mut client, ns, N, 1, what).await;
    assert_exact_union(&received, &ids);
    assert_eq!(pending_with_dead(&mut client, ns).await.dead_count, 0);
    server.stop().await;
}

/// 6. A subscriber that never reads holds no more than its window and does not hold up the
/// other; when it leaves, what it held goes to the other as attempt 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_subscriber_is_bounded_and_does_not_slow_the_other() {
    const N: usize = 100;
    const WINDOW: usize = 5;
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let ns = "stalled";
    let mut a_client = server.client().await;
    let a = subscribe(&mut a_client, ns, LONG_ACK_MS, WINDOW as u32).await;
    let mut b = subscribe(&mut client, ns, LONG_ACK_MS, 10).await;
    let ids = register_all(&mut client, specs(ns, N, 0)).await;

    // A holds at most WINDOW, so B must be able to get all the others without A reading.
    let what = "B's share while A stalls";
    let mut received_by_b = recv_and_ack_each(&mut b, &mut client, ns, N - WINDOW, 1, what).await;
    let first_round: HashSet<String> = received_by_b.iter().cloned().collect();
    assert_eq!(first_round.len(), N - WINDOW, "B got a duplicate");

    drop(a);
    // Only A's deliveries remain, as attempt 2.
    let what = "A's deliveries after it left";
    let taken_back = recv_and_ack_each(&mut b, &mut client, ns, WINDOW, 2, what).await;
    assert!(
        taken_back.iter().all(|id| !first_round.contains(id)),
        "B received an expiration it had already acknowledged"
    );
    received_by_b.extend(taken_back);
    assert_exact_union(&received_by_b, &ids);
    drop(a_client);
    server.stop().await;
}

/// 7. An observer sees a copy of every expiration; the sharing subscribers still get each
/// exactly once between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observer_sees_everything_while_sharers_split() {
    const N: usize = 50;
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let ns = "observed";
    // The observer's buffer (max_unacked) exceeds N, so best-effort copies cannot be dropped.
    let mut observer = subscribe_with(
        &mut client,
        SubscribeRequest {
            namespace: ns.into(),
            mode: subscribe_request::Mode::Observer as i32,
            max_unacked: 1_000,
            ..Default::default()
        },
    )
    .await;
    let mut a = subscribe(&mut client, ns, LONG_ACK_MS, 4).await;
    let mut b = subscribe(&mut client, ns, LONG_ACK_MS, 4).await;
    let ids = register_all(&mut client, specs(ns, N, 0)).await;

    share_between(&mut a, &mut b, &mut client, ns, &ids).await;

    let mut observed = Vec::new();
    for _ in 0..N {
        let copy = recv(&mut observer, "observer copies").await;
        observed.push(timer_id(&copy));
    }
    assert_exact_union(&observed, &ids);
    server.stop().await;
}

/// 8. Ack reports ids that are malformed, unknown or already acknowledged in `unknown`, and
/// counts only the real ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_reports_unknown_ids() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let ns = "acks";
    let mut stream = subscribe(&mut client, ns, LONG_ACK_MS, 10).await;
    register_all(&mut client, specs(ns, 2, 0)).await;
    let first = recv(&mut stream, "the first delivery").await;
    let second = recv(&mut stream, "the second delivery").await;

    let bogus = [
        "not-a-delivery-id".to_string(),
        String::new(),
        "ffffffffffffffff".to_string(),
        "0000000000000000".to_string(),
    ];
    let mut request = vec![first.delivery_id.clone()];
    request.extend(bogus.iter().cloned());
    let outcome = ack(&mut client, ns, request).await;
    assert_eq!(outcome.acknowledged, 1);
    assert_eq!(
        outcome.unknown.iter().collect::<HashSet<_>>(),
        bogus.iter().collect::<HashSet<_>>()
    );
    assert_eq!(outcome.unknown.len(), bogus.len());

    // Acknowledging again: the delivery is no longer awaiting an ack.
    ack_one(&mut client, ns, &first.delivery_id, false).await;

    // A real delivery id acked in the wrong namespace is unknown there and still pending here.
    ack_one(&mut client, "elsewhere", &second.delivery_id, false).await;
    ack_one(&mut client, ns, &second.delivery_id, true).await;
    server.stop().await;
}

/// 9. Auto-ack deliveries count as acknowledged when sent: they are never redelivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_ack_deliveries_are_not_redelivered() {
    const N: usize = 20;
    const ACK_TIMEOUT_MS: u64 = 100;
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let ns = "auto-ack";
    let mut stream = subscribe_with(
        &mut client,
        SubscribeRequest {
            namespace: ns.into(),
            ack_timeout: Some(millis(ACK_TIMEOUT_MS)),
            max_unacked: 100,
            auto_ack: true,
            ..Default::default()
        },
    )
    .await;
    let ids = register_all(&mut client, specs(ns, N, 0)).await;
    let mut received = Vec::new();
    let mut delivery_ids = Vec::new();
    for _ in 0..N {
        let expiration = recv(&mut stream, "auto-acked deliveries").await;
        assert_eq!(expiration.attempt, 1);
        received.push(timer_id(&expiration));
        delivery_ids.push(expiration.delivery_id);
    }
    assert_exact_union(&received, &ids);

    // Nothing is awaiting an ack, so an explicit ack finds nothing.
    let outcome = ack(&mut client, ns, delivery_ids.clone()).await;
    assert_eq!(outcome.acknowledged, 0);
    assert_eq!(outcome.unknown.len(), N);

    // The marker fires well after the ack timeout would have expired every delivery above,
    // so any redelivery would reach the stream first.
    let marker = register_all(&mut client, specs(ns, 1, 10 * ACK_TIMEOUT_MS)).await;
    let next = recv(&mut stream, "the marker").await;
    assert_eq!(
        timer_id(&next),
        marker[0],
        "an auto-acked delivery came again"
    );
    assert_eq!(next.attempt, 1);
    assert_eq!(pending_with_dead(&mut client, ns).await.dead_count, 0);
    server.stop().await;
}
