//! Heartbeat leases: Touch, KeepAlive, and lease expirations through delivery.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

const PATIENCE: Duration = Duration::from_secs(60);

async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future)
        .await
        .expect("no answer in time")
}

fn lease(namespace: &str, key: &str, ttl_ms: u64) -> TimerSpec {
    TimerSpec {
        namespace: namespace.into(),
        key: key.into(),
        ttl: Some(millis(ttl_ms)),
        payload: key.as_bytes().to_vec().into(),
        ..Default::default()
    }
}

/// The heartbeat interval is a tenth of the TTL: the lease survives unless the machine
/// stalls a heartbeat loop for nine-tenths of a TTL.
const TTL_MS: u64 = 2_000;
const BEAT: Duration = Duration::from_millis(TTL_MS / 10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_kept_alive_by_touch_never_expires() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let timer = register(&mut client, lease("workers", "worker-1", TTL_MS)).await;
    let mut previous_deadline = unix_nanos(timer.deadline.as_ref().unwrap());
    for _ in 0..30 {
        tokio::time::sleep(BEAT).await;
        let touched = client
            .touch(TouchRequest {
                timer: by_key("workers", "worker-1"),
                ttl: None,
            })
            .await
            .expect("touch")
            .into_inner()
            .timer
            .unwrap();
        let deadline = unix_nanos(touched.deadline.as_ref().unwrap());
        assert!(
            deadline > previous_deadline,
            "touch pushes the deadline out"
        );
        previous_deadline = deadline;
    }
    // Three TTLs have passed; the lease is still pending, so it never expired.
    let cancelled = client
        .cancel(CancelRequest {
            timer: by_id("workers", &timer.id),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(cancelled.cancelled);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_kept_alive_by_keepalive_stream_never_expires() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let timer = register(&mut client, lease("workers", "worker-2", TTL_MS)).await;
    let (heartbeats, heartbeat_stream) = mpsc::channel(16);
    let mut answers = client
        .keep_alive(ReceiverStream::new(heartbeat_stream))
        .await
        .unwrap()
        .into_inner();
    for sequence in 0..30u64 {
        tokio::time::sleep(BEAT).await;
        heartbeats
            .send(KeepAliveRequest {
                timer: by_id("workers", &timer.id),
                ttl: None,
                sequence,
            })
            .await
            .unwrap();
        let answer = within(answers.message()).await.unwrap().unwrap();
        assert_eq!(answer.sequence, sequence);
        assert!(answer.error.is_none(), "{:?}", answer.error);
        assert_eq!(answer.id, timer.id);
    }
    let got = client
        .get(GetRequest {
            timer: by_id("workers", &timer.id),
        })
        .await
        .expect("still pending after three TTLs")
        .into_inner();
    assert!(got.timer.unwrap().remaining.unwrap().seconds <= 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_heartbeats_give_exactly_one_expiration_not_before_the_ttl() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let mut expirations = subscribe(&mut client, "locks", 0, 0).await;
    let timer = register(&mut client, lease("locks", "lock-a", 150)).await;
    let touched = client
        .touch(TouchRequest {
            timer: by_id("locks", &timer.id),
            ttl: Some(millis(250)),
        })
        .await
        .unwrap()
        .into_inner()
        .timer
        .unwrap();
    let last_deadline = unix_nanos(touched.deadline.as_ref().unwrap());

    let expiration = within(next_expiration(&mut expirations)).await;
    assert!(expiration.lease, "lease expirations say so");
    let fired = expiration.timer.unwrap();
    assert_eq!(fired.id, timer.id);
    assert!(unix_nanos(expiration.fired_at.as_ref().unwrap()) >= last_deadline);
    ack(&mut client, "locks", vec![expiration.delivery_id]).await;

    // A marker due later must be the next thing on the stream: no second expiration came.
    let marker = register(&mut client, spec("locks", 50, b"marker")).await;
    let next = within(next_expiration(&mut expirations)).await;
    assert_eq!(next.timer.unwrap().id, marker.id);
    assert!(!next.lease);

    let status = client
        .touch(TouchRequest {
            timer: by_id("locks", &timer.id),
            ttl: None,
        })
        .await
        .expect_err("touching an expired lease must not resurrect it");
    assert_eq!(status.code(), Code::NotFound);
    let status = client
        .touch(TouchRequest {
            timer: by_key("locks", "lock-a"),
            ttl: None,
        })
        .await
        .expect_err("nor by key");
    assert_eq!(status.code(), Code::NotFound);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touch_of_a_cancelled_lease_is_not_found_and_touch_needs_a_ttl() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let timer = register(&mut client, lease("revoke", "l", 60_000)).await;
    client
        .cancel(CancelRequest {
            timer: by_id("revoke", &timer.id),
        })
        .await
        .unwrap();
    let status = client
        .touch(TouchRequest {
            timer: by_id("revoke", &timer.id),
            ttl: None,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);

    let plain = register(&mut client, spec("revoke", 60_000, b"plain")).await;
    let status = client
        .touch(TouchRequest {
            timer: by_id("revoke", &plain.id),
            ttl: None,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert!(status.message().contains("ttl"));
    // With a ttl given, any timer can be pushed out.
    let touched = client
        .touch(TouchRequest {
            timer: by_id("revoke", &plain.id),
            ttl: Some(millis(120_000)),
        })
        .await
        .unwrap()
        .into_inner()
        .timer
        .unwrap();
    assert!(touched.remaining.unwrap().seconds >= 119);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_answers_valid_and_unknown_leases_without_stalling() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let mut ids = Vec::new();
    for index in 0..500 {
        let timer = register(
            &mut client,
            lease("fleet", &format!("node-{index}"), 60_000),
        )
        .await;
        ids.push(timer.id);
    }
    let mut requests = Vec::new();
    for (index, id) in ids.iter().enumerate() {
        requests.push(KeepAliveRequest {
            timer: by_id("fleet", id),
            ttl: None,
            sequence: index as u64 * 3,
        });
        requests.push(KeepAliveRequest {
            timer: by_key("fleet", &format!("ghost-{index}")),
            ttl: None,
            sequence: index as u64 * 3 + 1,
        });
        requests.push(KeepAliveRequest {
            timer: by_id("fleet", "not-hex"),
            ttl: None,
            sequence: index as u64 * 3 + 2,
        });
    }
    let total = requests.len();
    let mut answers = client
        .keep_alive(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let mut answered = 0;
    let mut alive = HashSet::new();
    while let Some(answer) = within(answers.message()).await.unwrap() {
        assert_eq!(
            answer.sequence, answered as u64,
            "answers come in request order"
        );
        match answered % 3 {
            0 => {
                assert!(answer.error.is_none());
                assert!(answer.deadline.is_some());
                alive.insert(answer.id);
            }
            1 => assert_eq!(answer.error.unwrap().code, Code::NotFound as i32),
            _ => assert_eq!(answer.error.unwrap().code, Code::InvalidArgument as i32),
        }
        answered += 1;
    }
    assert_eq!(answered, total);
    assert_eq!(alive.len(), 500);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_leases_expiring_at_the_same_moment_are_all_delivered() {
    const LEASES: usize = 100_000;
    let server = TestServer::start_with(config(|config| {
        config.max_buffered = LEASES;
    }))
    .await;
    let mut client = server.client().await;
    let mut expirations = client
        .subscribe(SubscribeRequest {
            namespace: "herd".into(),
            auto_ack: true,
            max_unacked: 10_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let moment = now_unix_nanos() + 3_000_000_000;
    let deadline = prost_types::Timestamp {
        seconds: (moment / 1_000_000_000) as i64,
        nanos: (moment % 1_000_000_000) as i32,
    };
    let mut ids = HashSet::new();
    for chunk in 0..LEASES / 10_000 {
        let timers = (0..10_000)
            .map(|index| TimerSpec {
                namespace: "herd".into(),
                deadline: Some(deadline),
                ttl: Some(millis(1_000)),
                key: format!("lease-{chunk}-{index}"),
                ..Default::default()
            })
            .collect();
        let answer = client
            .new_timeouts(NewTimeoutsRequest { timers })
            .await
            .unwrap()
            .into_inner();
        for result in answer.results {
            match result.result.unwrap() {
                new_timeout_result::Result::Registered(registered) => {
                    ids.insert(registered.timer.unwrap().id);
                }
                new_timeout_result::Result::Error(error) => panic!("{error:?}"),
            }
        }
    }
    assert_eq!(ids.len(), LEASES);
    let mut delivered = HashSet::new();
    while delivered.len() < LEASES {
        let expiration = within(next_expiration(&mut expirations)).await;
        assert!(expiration.lease);
        assert!(unix_nanos(expiration.fired_at.as_ref().unwrap()) >= moment);
        assert!(
            delivered.insert(expiration.timer.unwrap().id),
            "delivered twice"
        );
    }
    assert_eq!(delivered, ids);
    server.stop().await;
}
