//! The gRPC service end to end: the real server on 127.0.0.1:0, the generated Rust client.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registered_timer_is_delivered_with_its_payload_never_early() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let mut stream = subscribe(&mut client, "orders", 0, 0).await;
    let timer = register(&mut client, spec("orders", 150, b"close order 42")).await;
    assert_eq!(timer.id.len(), 16);
    assert_eq!(timer.namespace, "orders");

    let expiration = within(next_expiration(&mut stream)).await;
    let received_at = now_unix_nanos();
    let fired = expiration.timer.expect("timer");
    assert_eq!(fired.id, timer.id);
    assert_eq!(&fired.payload[..], b"close order 42");
    assert_eq!(expiration.attempt, 1);
    let deadline = unix_nanos(timer.deadline.as_ref().unwrap());
    assert!(unix_nanos(expiration.fired_at.as_ref().unwrap()) >= deadline);
    assert!(received_at >= deadline, "received before the deadline");
    assert_eq!(pending_count(&mut client, "orders").await, 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_timer_is_never_delivered() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let doomed = register(&mut client, spec("jobs", 100, b"doomed")).await;
    let survivor = register(&mut client, spec("jobs", 300, b"survivor")).await;
    assert!(cancel(&mut client, by_id("jobs", &doomed.id)).await);
    // Cancelling again says it was no longer pending.
    assert!(!cancel(&mut client, by_id("jobs", &doomed.id)).await);

    // Expirations arrive in deadline order, so the survivor being first proves the
    // cancelled one (due earlier) was never delivered.
    let mut stream = subscribe(&mut client, "jobs", 0, 0).await;
    let first = within(next_expiration(&mut stream)).await;
    assert_eq!(first.timer.unwrap().id, survivor.id);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_and_get_agree_with_what_was_registered() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let mut ids = HashSet::new();
    for index in 0..25u64 {
        let timer = register(&mut client, spec("listing", 3_600_000 + index, b"p")).await;
        ids.insert(timer.id);
    }
    register(&mut client, spec("elsewhere", 3_600_000, b"q")).await;

    let mut listed = HashSet::new();
    let mut page_token = String::new();
    let mut listing_tokens = Vec::new();
    loop {
        let page = pending_page(&mut client, "listing", 10, &page_token)
            .await
            .unwrap();
        assert_eq!(page.count, 25);
        assert!(page.timers.len() <= 10);
        for timer in page.timers {
            assert_eq!(timer.namespace, "listing");
            assert!(listed.insert(timer.id), "a timer listed twice");
        }
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
        listing_tokens.push(page_token.clone());
    }
    assert_eq!(listed, ids);

    let everything = client
        .pending(PendingRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(everything.count, 26);

    // A token from another namespace's listing is refused, naming the field; other tokens
    // either fail the same way or list only the namespace asked for. Nothing fails the
    // worker.
    let foreign = listing_tokens
        .first()
        .expect("25 timers take three pages")
        .clone();
    for token in [
        foreign.as_str(),
        "ffff.0",
        "0.ffffffffffffffff",
        "1.ffffffff",
    ] {
        match pending_page(&mut client, "elsewhere", 10, token).await {
            Ok(page) => {
                assert_ne!(token, foreign, "another namespace's token was accepted");
                assert!(page
                    .timers
                    .iter()
                    .all(|timer| timer.namespace == "elsewhere"));
            }
            Err(status) => {
                assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
                assert!(status.message().contains("page_token"), "{status:?}");
            }
        }
    }

    let id = ids.iter().next().unwrap().clone();
    let got = get(&mut client, by_id("listing", &id)).await.unwrap();
    assert_eq!(got.id, id);
    assert_eq!(&got.payload[..], b"p");
    let remaining = got.remaining.unwrap();
    assert!(remaining.seconds > 3_500 && remaining.seconds <= 3_600);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registering_an_existing_key_returns_the_existing_timer() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let keyed = |delay_ms, payload: &[u8]| TimerSpec {
        key: "order-7".into(),
        ..spec("payments", delay_ms, payload)
    };
    let first = register_answer(&mut client, keyed(60_000, b"first")).await;
    assert!(first.created);
    let second = register_answer(&mut client, keyed(90_000, b"second")).await;
    assert!(!second.created);
    let (first, second) = (first.timer.unwrap(), second.timer.unwrap());
    assert_eq!(first.id, second.id);
    // Registration answers do not echo payloads; the first registration's is the one kept.
    assert!(first.payload.is_empty() && second.payload.is_empty());
    assert_eq!(pending_count(&mut client, "payments").await, 1);

    let kept = get(&mut client, by_key("payments", "order-7"))
        .await
        .unwrap();
    assert_eq!(kept.id, first.id);
    assert_eq!(&kept.payload[..], b"first");
    assert!(cancel(&mut client, by_key("payments", "order-7")).await);
    // The key is free again once its timer is gone.
    let third = register_answer(&mut client, keyed(60_000, b"third")).await;
    assert!(third.created);
    assert_ne!(third.timer.unwrap().id, first.id);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeating_timer_rearms_from_its_previous_deadline() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let mut stream = subscribe(&mut client, "cron", 0, 0).await;
    let mut repeating = spec("cron", 30, b"tick");
    repeating.repeat = Some(millis(25));
    let timer = register(&mut client, repeating).await;
    let first_deadline = unix_nanos(timer.deadline.as_ref().unwrap());

    for firing in 1..=4u64 {
        let expiration = within(next_expiration(&mut stream)).await;
        ack(&mut client, "cron", vec![expiration.delivery_id.clone()]).await;
        let fired = expiration.timer.unwrap();
        assert_eq!(fired.id, timer.id);
        assert_eq!(fired.fired_count, firing);
        // No drift: each deadline is exactly one interval after the previous one (or a
        // whole number of intervals, if the machine stalled past one).
        let deadline = unix_nanos(fired.deadline.as_ref().unwrap());
        let offset = deadline - first_deadline;
        assert_eq!(offset % 25_000_000, 0, "deadline drifted by {offset} ns");
        assert!(unix_nanos(expiration.fired_at.as_ref().unwrap()) >= deadline);
    }
    assert!(
        cancel(&mut client, by_id("cron", &timer.id)).await,
        "a repeating timer stays pending between firings"
    );
    server.stop().await;
}

/// The whole answer to registering `spec`, `created` included.
async fn register_answer(
    client: &mut tickd::proto::timers_client::TimersClient<tonic::transport::Channel>,
    spec: TimerSpec,
) -> NewTimeoutResponse {
    client
        .new_timeout(NewTimeoutRequest { timer: Some(spec) })
        .await
        .unwrap()
        .into_inner()
}

fn expect_code(result: Result<impl std::fmt::Debug, tonic::Status>, code: Code, mentions: &str) {
    let status = result.expect_err("the call should have been refused");
    assert_eq!(status.code(), code, "{status:?}");
    assert!(
        status.message().contains(mentions),
        "message {:?} should mention {mentions:?}",
        status.message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let server = TestServer::start_with(config(|config| {
        config.max_payload_bytes = 16;
    }))
    .await;
    let mut client = server.client().await;
    let duration = |seconds, nanos| Some(prost_types::Duration { seconds, nanos });
    let bad = |delay_ms| spec("bad", delay_ms, b"");
    let refused = [
        (
            TimerSpec {
                delay: duration(-5, 0),
                ..bad(0)
            },
            Code::InvalidArgument,
            "delay",
        ),
        (
            TimerSpec {
                delay: duration(i64::MAX / 2, 0),
                ..bad(0)
            },
            Code::InvalidArgument,
            "delay",
        ),
        (
            TimerSpec {
                deadline: Some(prost_types::Timestamp {
                    seconds: 1,
                    nanos: 0,
                }),
                ..bad(10)
            },
            Code::InvalidArgument,
            "deadline",
        ),
        (
            TimerSpec {
                delay: None,
                ..bad(0)
            },
            Code::InvalidArgument,
            "delay",
        ),
        // Shorter than the 1 ms tick, a repeat would fire on every tick for ever.
        (
            TimerSpec {
                repeat: duration(0, 1),
                ..bad(10)
            },
            Code::InvalidArgument,
            "repeat",
        ),
        (
            spec(&"n".repeat(129), 10, b""),
            Code::InvalidArgument,
            "namespace",
        ),
        (
            TimerSpec {
                key: "k".repeat(257),
                ..bad(10)
            },
            Code::InvalidArgument,
            "key",
        ),
        (
            spec("bad", 10, &[7u8; 17]),
            Code::ResourceExhausted,
            "payload",
        ),
        (
            TimerSpec {
                repeat: Some(millis(0)),
                ..bad(10)
            },
            Code::InvalidArgument,
            "repeat",
        ),
    ];
    for (timer, code, mentions) in refused {
        let request = NewTimeoutRequest { timer: Some(timer) };
        expect_code(client.new_timeout(request).await, code, mentions);
    }

    expect_code(
        client.new_timeout(NewTimeoutRequest { timer: None }).await,
        Code::InvalidArgument,
        "timer",
    );

    let not_an_id = by_id("bad", "not-an-id");
    expect_code(
        get(&mut client, not_an_id).await,
        Code::InvalidArgument,
        "id",
    );
    let unknown = || by_id("bad", "00000000deadbeef");
    expect_code(
        get(&mut client, unknown()).await,
        Code::NotFound,
        "00000000deadbeef",
    );
    let cancelled = client.cancel(CancelRequest { timer: unknown() }).await;
    expect_code(cancelled, Code::NotFound, "00000000deadbeef");
    let never = by_key("bad", "never-registered");
    let cancelled = client.cancel(CancelRequest { timer: never }).await;
    expect_code(cancelled, Code::NotFound, "never-registered");
    let empty_key = by_key("bad", "");
    expect_code(
        get(&mut client, empty_key).await,
        Code::InvalidArgument,
        "key",
    );
    let garbage = pending_page(&mut client, "", 0, "garbage").await;
    expect_code(garbage, Code::InvalidArgument, "page_token");

    let everything = client
        .pending(PendingRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(everything.count, 0, "a refused call left a timer behind");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_item_in_a_batch_fails_alone() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let mut bad = spec("batch", 10, b"");
    bad.delay = Some(prost_types::Duration {
        seconds: -1,
        nanos: 0,
    });
    let answer = client
        .new_timeouts(NewTimeoutsRequest {
            timers: vec![
                spec("batch", 60_000, b"a"),
                bad,
                spec("batch", 60_000, b"c"),
            ],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.results.len(), 3);
    let outcome = |index: usize| answer.results[index].result.clone().unwrap();
    assert!(matches!(
        outcome(0),
        new_timeout_result::Result::Registered(_)
    ));
    match outcome(1) {
        new_timeout_result::Result::Error(error) => {
            assert_eq!(error.code, Code::InvalidArgument as i32);
            assert!(error.message.contains("delay"));
        }
        other => panic!("the bad item was accepted: {other:?}"),
    }
    match outcome(2) {
        new_timeout_result::Result::Registered(registered) => {
            let timer = registered.timer.unwrap();
            assert!(
                timer.payload.is_empty(),
                "registration answers carry no payload"
            );
            let stored = get(&mut client, by_id("batch", &timer.id)).await;
            assert_eq!(&stored.unwrap().payload[..], b"c");
        }
        other => panic!("the good item after the bad one failed: {other:?}"),
    }
    assert_eq!(pending_count(&mut client, "batch").await, 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_pending_gives_resource_exhausted_naming_the_limit() {
    let server = TestServer::start_with(config(|config| config.max_pending = 3)).await;
    let mut client = server.client().await;
    let answer = client
        .new_timeouts(NewTimeoutsRequest {
            timers: (0..5).map(|_| spec("full", 60_000, b"x")).collect(),
        })
        .await
        .unwrap()
        .into_inner();
    let refused: Vec<_> = answer
        .results
        .iter()
        .filter_map(|result| match &result.result {
            Some(new_timeout_result::Result::Error(error)) => Some(error.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(refused.len(), 2);
    assert!(refused
        .iter()
        .all(|error| error.code == Code::ResourceExhausted as i32
            && error.message.contains("max-pending")));
    expect_code(
        client
            .new_timeout(NewTimeoutRequest {
                timer: Some(spec("full", 10, b"")),
            })
            .await,
        Code::ResourceExhausted,
        "max-pending",
    );
    assert_eq!(pending_count(&mut client, "full").await, 3);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_open_streams_finishes_without_waiting_for_the_drain_timeout() {
    let server = TestServer::start_with(config(|config| {
        config.drain_timeout = Duration::from_secs(120);
    }))
    .await;
    let mut client = server.client().await;
    let mut stream = subscribe(&mut client, "closing", 0, 0).await;
    let (_heartbeats, heartbeat_receiver) = tokio::sync::mpsc::channel::<KeepAliveRequest>(1);
    let keepalive = client
        .keep_alive(tokio_stream::wrappers::ReceiverStream::new(
            heartbeat_receiver,
        ))
        .await
        .unwrap();
    register(&mut client, spec("closing", 3_600_000, b"left")).await;

    let stopped = within(server.stop()).await;
    assert!(!stopped.drain_timed_out, "an open stream held shutdown up");
    assert_eq!(stopped.pending_timers, 1);
    // The subscription ended rather than hanging.
    let end = within(stream.message()).await;
    assert!(
        !matches!(end, Ok(Some(_))),
        "the stream went on after shutdown"
    );
    drop(keepalive);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_on_a_unix_socket_too() {
    let server = TestServer::start_with_unix_socket(tickd::config::Config::defaults()).await;
    let channel = unix_channel(server.unix_socket.clone().unwrap())
        .await
        .expect("connect over the unix socket");
    let mut client = tickd::proto::timers_client::TimersClient::new(channel);
    let timer = register(&mut client, spec("sidecar", 60_000, b"u")).await;
    let got = get(&mut client, by_id("sidecar", &timer.id)).await;
    assert_eq!(got.unwrap().id, timer.id);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_reflection_are_served() {
    let server = TestServer::start().await;
    for service in ["tickd.v1.Timers", ""] {
        assert_eq!(
            check_health(server.channel().await, service).await.unwrap(),
            tonic_health::pb::health_check_response::ServingStatus::Serving
        );
    }
    server.stop().await;
}

/// Listing looks at a bounded number of stored timers per page, so a small namespace among
/// many timers comes back over several (possibly empty) pages, complete and without repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_a_small_namespace_among_many_timers_pages_through_all_of_them() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let mut wanted = HashSet::new();
    for round in 0..15 {
        wanted.insert(
            register(&mut client, spec("small", 3_600_000, b"s"))
                .await
                .id,
        );
        let crowd = (0..10_000)
            .map(|_| spec("crowd", 3_600_000, b"c"))
            .collect();
        let registered = client
            .new_timeouts(NewTimeoutsRequest { timers: crowd })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(registered.results.len(), 10_000, "round {round}");
    }
    let mut listed = HashSet::new();
    let mut page_token = String::new();
    let mut pages = 0;
    loop {
        let page = pending_page(&mut client, "small", 4, &page_token)
            .await
            .unwrap();
        pages += 1;
        assert_eq!(page.count, 15);
        for timer in page.timers {
            assert_eq!(timer.namespace, "small");
            assert!(listed.insert(timer.id), "a timer listed twice");
        }
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    assert_eq!(listed, wanted);
    // 150,015 stored timers need at least three bounded scans, whatever the page size.
    assert!(pages >= 3, "{pages} pages");
    server.stop().await;
}
