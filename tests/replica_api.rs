//! A replica answers the API like one node: idempotent keys, Cancel's answers, NOT_FOUND
//! and FAILED_PRECONDITION where one node gives them, leases pushed by Touch, Pending's
//! count and pages (tokens bound to their namespace), and observers that copy without
//! taking; and the PostgreSQL fixture every replica test stands on answers queries.

mod common;

use std::collections::BTreeSet;

use common::postgres::Postgres;
use common::replica_set::{next_in_time, ReplicaSet};
use common::tooling::skip_postgres;
use common::*;

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
    let set = ReplicaSet::start(&["r1"], &[]).await;
    let mut client = set.client("r1");

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
