//! Push sinks against a real tickd and a real HTTP server: a sink that fails, rejects,
//! throttles, goes down, or is outside `--sink-allow`, and tickd killed while pushing.
//! Each test asserts what the sink received (every push is recorded with its idempotency
//! key, delivery id and attempt) and what tickd kept (acknowledged, dead, redriven).

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::daemon::{tickd_command, Daemon};
use common::http_sink::{always, attempts_of, gaps, keys, unused_address, HttpSink, Push, Script};
use common::metrics::{deliveries_settled, scrape_until};
use common::poison;
use common::*;
use prost::Message;
use tickd::proto::timers_client::TimersClient;

const NAMESPACE: &str = "pushed";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_that_fails_twice_gets_each_expiration_three_times_and_acknowledges_it() {
    let script: Script = Arc::new(|_, before| (if before < 2 { 500 } else { 200 }, None));
    let sink = HttpSink::start(script).await;
    let server = TestServer::pushing_to(NAMESPACE, &sink.url("/timers"), |_| {}).await;
    let mut client = server.client().await;
    let registered = register_all(&mut client, specs(NAMESPACE, 5, 20)).await;
    sink.wait_for("three pushes of each of the 5 expirations", |pushes| {
        pushes.len() >= 15 && keys(pushes).len() == 5
    })
    .await;
    deliveries_settled(server.metrics_addr).await;
    let pushes = sink.pushes();
    assert_eq!(
        pushes.len(),
        15,
        "acknowledged after the third: {pushes:#?}"
    );
    for key in keys(&pushes) {
        assert_eq!(attempts_of(&pushes, &key), [1, 2, 3], "{key}");
        let ids: BTreeSet<_> = pushes
            .iter()
            .filter(|push| push.key == key)
            .map(|push| push.delivery_id.clone())
            .collect();
        assert_eq!(ids.len(), 3, "each attempt has its own delivery id");
    }
    // The body is the expiration in proto3 JSON, naming the timer registered.
    let registered_ids: BTreeSet<String> = registered.into_iter().collect();
    for push in &pushes {
        assert_eq!(push.content_type, "application/json");
        assert_eq!(push.namespace, NAMESPACE);
        let body: serde_json::Value = serde_json::from_slice(&push.body).expect("JSON body");
        assert_eq!(body["deliveryId"], push.delivery_id.as_str());
        assert_eq!(body["attempt"], push.attempt);
        let timer_id = body["timer"]["id"]
            .as_str()
            .expect("the timer's id")
            .to_owned();
        assert!(registered_ids.contains(&timer_id), "{timer_id}");
        assert!(
            push.key.contains(&timer_id),
            "the key names the timer: {}",
            push.key
        );
    }
    let dead = pending_with_dead(&mut client, NAMESPACE).await;
    assert!(dead.dead_expirations.is_empty(), "{dead:?}");
    let scrape = common::metrics::scrape(server.metrics_addr).await;
    let pushes_of = |outcome: &str| {
        scrape.value(&format!(
            "tickd_sink_pushes_total{{namespace=\"{NAMESPACE}\",outcome=\"{outcome}\"}}"
        ))
    };
    assert_eq!(pushes_of("delivered"), 5.0);
    assert_eq!(pushes_of("retry"), 10.0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_that_always_rejects_buries_after_max_attempts_and_redrive_sends_again() {
    let accepting = Arc::new(AtomicBool::new(false));
    let script: Script = {
        let accepting = accepting.clone();
        Arc::new(move |_, _| {
            (
                if accepting.load(Ordering::SeqCst) {
                    200
                } else {
                    400
                },
                None,
            )
        })
    };
    let sink = HttpSink::start(script).await;
    let server =
        TestServer::pushing_to(NAMESPACE, &sink.url("/"), |config| config.max_attempts = 3).await;
    let mut client = server.client().await;
    register(&mut client, spec(NAMESPACE, 10, b"poison")).await;
    sink.wait_for("three rejected pushes", |pushes| pushes.len() >= 3)
        .await;
    wait_for_dead(&client, NAMESPACE, 1, || async {
        format!("{:#?}", sink.pushes())
    })
    .await;
    let pushes = sink.pushes();
    assert_eq!(pushes.len(), 3, "no push after the last attempt");
    assert_eq!(attempts_of(&pushes, &pushes[0].key), [1, 2, 3]);
    let dead = pending_with_dead(&mut client, NAMESPACE).await;
    accepting.store(true, Ordering::SeqCst);
    let redriven = client
        .redrive(RedriveRequest {
            namespace: NAMESPACE.into(),
            delivery_ids: vec![dead.dead_expirations[0].delivery_id.clone()],
        })
        .await
        .expect("redrive")
        .into_inner();
    assert_eq!(redriven.redriven, 1);
    sink.wait_for("the redriven expiration", |pushes| pushes.len() >= 4)
        .await;
    deliveries_settled(server.metrics_addr).await;
    let pushes = sink.pushes();
    assert_eq!(pushes.len(), 4);
    assert_eq!(pushes[3].key, pushes[0].key, "the same expiration again");
    assert_eq!(pushes[3].attempt, 1, "its attempts counted afresh");
    let dead = pending_with_dead(&mut client, NAMESPACE).await;
    assert!(dead.dead_expirations.is_empty(), "{dead:?}");
    server.stop().await;
}

/// A few expirations the sink fails whatever the attempt (see `common::poison`): the
/// healthy ones among them are each pushed once and acknowledged, the failing ones go
/// dead after `--max-attempts`, and nothing else is dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expirations_a_sink_always_fails_never_hold_up_the_healthy_ones() {
    let sink = HttpSink::start(poison::script()).await;
    let server =
        TestServer::pushing_to(NAMESPACE, &sink.url("/t"), |config| config.max_attempts = 5).await;
    let mut client = server.client().await;
    let late = poison::run(&mut client, &sink, NAMESPACE, 5).await;
    deliveries_settled(server.metrics_addr).await;
    eprintln!(
        "sink_failure_isolation backend=local healthy={} poison={} median_late_ms={} max_late_ms={}",
        poison::HEALTHY,
        poison::POISON,
        late.median.as_millis(),
        late.max.as_millis()
    );
    server.stop().await;
}

/// The same with more failing expirations than the pusher's window (`--sink-max-in-flight
/// 2`, a window of 4 against 10): their retries, and the circuit their failures open,
/// never keep a place from the healthy ones. (Before, the window filled with retries
/// waiting for that circuit, each probing it in turn, and the healthy ones waited until
/// the failing ones were dead.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_failing_expirations_than_the_window_never_hold_up_the_healthy_ones() {
    let sink = HttpSink::start(poison::script()).await;
    let server = TestServer::pushing_to(NAMESPACE, &sink.url("/t"), |config| {
        config.max_attempts = 5;
        config.sink_max_in_flight = 2;
    })
    .await;
    let mut client = server.client().await;
    let late = poison::run(&mut client, &sink, NAMESPACE, 5).await;
    deliveries_settled(server.metrics_addr).await;
    eprintln!(
        "sink_failure_isolation backend=local window=4 healthy={} poison={} median_late_ms={} max_late_ms={}",
        poison::HEALTHY,
        poison::POISON,
        late.median.as_millis(),
        late.max.as_millis()
    );
    server.stop().await;
}

/// The same across a restart between the failures and the healthy registrations: tickd
/// killed (SIGKILL) or stopped (SIGTERM) while the failing expirations wait for their
/// retries, started again on its data directory, called by a client that outlives it.
async fn failure_isolation_survives_a_restart(signal: &str) {
    let data_dir = tempfile::tempdir().unwrap();
    let sink = HttpSink::start(poison::script()).await;
    let start = || {
        let mut command = tickd_command();
        command
            .arg("--data-dir")
            .arg(data_dir.path())
            .args(["--sink", &format!("{NAMESPACE}={}", sink.url("/t"))])
            .args(["--max-attempts", "5", "--metrics-listen", "127.0.0.1:0"]);
        Daemon::start(command)
    };
    let mut daemon = start();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", daemon.addr))
        .unwrap()
        .connect_lazy();
    let mut client = TimersClient::new(channel);
    let poison = poison::fail_poison(&mut client, &sink, NAMESPACE).await;
    daemon.stop_with(signal);
    let daemon = start();
    // The client outlives the restart; the new process listens elsewhere.
    let mut client = TimersClient::connect(format!("http://{}", daemon.addr))
        .await
        .unwrap();
    let late = poison::healthy_among_poison(
        &mut client,
        &sink,
        NAMESPACE,
        &poison,
        poison::PoisonPushes::AtMost(5),
    )
    .await;
    eprintln!(
        "sink_failure_isolation backend=local restart={signal} median_late_ms={} max_late_ms={}",
        late.median.as_millis(),
        late.max.as_millis()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_isolation_survives_sigkill() {
    failure_isolation_survives_a_restart("KILL").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_isolation_survives_sigterm() {
    failure_isolation_survives_a_restart("TERM").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_a_retry_after_of_one_second_is_waited_out_as_the_same_attempt() {
    let script: Script = Arc::new(|_, before| match before {
        0 => (429, Some("1")),
        _ => (200, None),
    });
    let sink = HttpSink::start(script).await;
    let server = TestServer::pushing_to(NAMESPACE, &sink.url("/"), |_| {}).await;
    let mut client = server.client().await;
    register(&mut client, spec(NAMESPACE, 10, b"throttled")).await;
    sink.wait_for("the push after the 429", |pushes| pushes.len() >= 2)
        .await;
    deliveries_settled(server.metrics_addr).await;
    let pushes = sink.pushes();
    assert_eq!(pushes.len(), 2);
    let gap = gaps(&pushes, &pushes[0].key)[0];
    assert!(
        gap >= Duration::from_secs(1),
        "pushed again {gap:?} after a Retry-After of 1 s"
    );
    // The sink was asked too much, not given a bad expiration: no attempt spent.
    assert_eq!(pushes[1].attempt, 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_down_for_ten_seconds_then_up_receives_everything_registered_meanwhile() {
    let addr = unused_address().await;
    let server = TestServer::pushing_to(NAMESPACE, &format!("http://{addr}/"), |_| {}).await;
    let mut client = server.client().await;
    // Firing over the ten seconds the sink is down.
    let specs: Vec<TimerSpec> = (0..20)
        .map(|index| spec(NAMESPACE, 100 + index * 500, format!("t{index}").as_bytes()))
        .collect();
    let registered = register_all(&mut client, specs).await;
    let scrape = scrape_until(server.metrics_addr, |scrape| {
        scrape.value("tickd_timers_fired_total") >= 20.0
    })
    .await;
    assert_eq!(scrape.value("tickd_timers_fired_total"), 20.0);
    let unreachable =
        format!("tickd_sink_pushes_total{{namespace=\"{NAMESPACE}\",outcome=\"unreachable\"}}");
    assert!(
        scrape.value(&unreachable) > 0.0,
        "tickd tried the sink while it was down"
    );
    let sink = HttpSink::start_on(addr, always(200)).await;
    sink.wait_for("all 20 expirations", |pushes| keys(pushes).len() == 20)
        .await;
    deliveries_settled(server.metrics_addr).await;
    let pushes = sink.pushes();
    for id in &registered {
        assert!(
            pushes.iter().any(|push| push.key.contains(id.as_str())),
            "timer {id} never reached the sink"
        );
    }
    // Not reaching the sink is not an attempt: each arrives as its first.
    assert!(pushes.iter().all(|push| push.attempt == 1), "{pushes:#?}");
    let dead = pending_with_dead(&mut client, NAMESPACE).await;
    assert!(dead.dead_expirations.is_empty());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protobuf_sink_gets_the_expiration_encoded() {
    let sink = HttpSink::start(always(204)).await;
    let server =
        TestServer::pushing_to(NAMESPACE, &format!("{}#protobuf", sink.url("/p")), |_| {}).await;
    let mut client = server.client().await;
    let timer = register(&mut client, spec(NAMESPACE, 10, b"\x00binary\xff")).await;
    sink.wait_for("one push", |pushes| !pushes.is_empty()).await;
    deliveries_settled(server.metrics_addr).await;
    let push = &sink.pushes()[0];
    assert_eq!(push.content_type, "application/x-protobuf");
    let expiration = Expiration::decode(push.body.clone()).expect("a tickd.v1.Expiration");
    let pushed_timer = expiration.timer.expect("its timer");
    assert_eq!(pushed_timer.id, timer.id);
    assert_eq!(&pushed_timer.payload[..], b"\x00binary\xff");
    assert_eq!(expiration.delivery_id, push.delivery_id);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_outside_sink_allow_is_refused_at_configuration_and_never_connected_to() {
    // A listener on another loopback address, which `--sink-allow 127.0.0.1` leaves out.
    let outside = tokio::net::TcpListener::bind("127.0.0.2:0")
        .await
        .expect("bind 127.0.0.2");
    let port = outside.local_addr().unwrap().port();
    let mut command = tickd_command();
    command
        .args(["--sync", "none", "--metrics-listen", "127.0.0.1:0"])
        .args(["--sink", &format!("{NAMESPACE}=http://127.0.0.2:{port}/")])
        .args(["--sink-allow", "127.0.0.1"]);
    let (status, log) = Daemon::refused(command, PATIENCE);
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("--sink-allow"),
        "the refusal names the flag: {log}"
    );
    assert!(log.contains("127.0.0.2"), "and the address: {log}");
    // tickd has exited: any connection it made would be queued here.
    let accepted = tokio::time::timeout(Duration::ZERO, outside.accept()).await;
    assert!(accepted.is_err(), "tickd connected to a sink it refused");
    // A malformed entry is refused naming the flag too.
    let mut command = tickd_command();
    command
        .args(["--sync", "none", "--metrics-listen", "127.0.0.1:0"])
        .args(["--sink-allow", "10.0.0.0/33"])
        .args(["--sink", &format!("{NAMESPACE}=http://127.0.0.1:9/")]);
    let (status, log) = Daemon::refused(command, PATIENCE);
    assert!(!status.success() && log.contains("--sink-allow"), "{log}");
}

/// tickd is killed (SIGKILL), or stopped (SIGTERM), while it pushes; started again on its
/// data directory it pushes the rest. The ledger is every registration tickd answered:
/// each must reach the sink at least once.
async fn pushes_survive_a_restart(signal: &str) {
    let data_dir = tempfile::tempdir().unwrap();
    let sink = HttpSink::start(always(200)).await;
    let start = || {
        let mut command = tickd_command();
        command
            .arg("--data-dir")
            .arg(data_dir.path())
            .args(["--sink", &format!("{NAMESPACE}={}", sink.url("/"))])
            .args([
                "--sink-max-in-flight",
                "8",
                "--metrics-listen",
                "127.0.0.1:0",
            ]);
        Daemon::start(command)
    };
    let mut daemon = start();
    let mut client = TimersClient::connect(format!("http://{}", daemon.addr))
        .await
        .unwrap();
    let ledger: Vec<String> = register_all(
        &mut client,
        (0..300)
            .map(|index| spec(NAMESPACE, 50 + (index % 100) * 20, b"ledger"))
            .collect(),
    )
    .await;
    sink.wait_for("pushes under way", |pushes| pushes.len() >= 50)
        .await;
    daemon.stop_with(signal);
    let _daemon = start();
    let ids: BTreeSet<String> = ledger.into_iter().collect();
    let delivered = |pushes: &[Push]| {
        ids.iter()
            .filter(|id| !pushes.iter().any(|push| push.key.contains(id.as_str())))
            .count()
    };
    sink.wait_for("every timer in the ledger", |pushes| delivered(pushes) == 0)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_pushing_loses_nothing_acknowledged() {
    pushes_survive_a_restart("KILL").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_pushing_loses_nothing_acknowledged() {
    pushes_survive_a_restart("TERM").await;
}

/// A URL's `user:password@` reaches the sink as Basic credentials on every push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_the_url_reach_the_sink_as_basic_auth() {
    let sink = HttpSink::start(always(200)).await;
    let url = sink
        .url("/timers")
        .replacen("http://", "http://app:s%40cret@", 1);
    let server = TestServer::pushing_to(NAMESPACE, &url, |_| {}).await;
    let mut client = server.client().await;
    register_all(&mut client, specs(NAMESPACE, 3, 20)).await;
    sink.wait_for("the 3 expirations", |pushes| keys(pushes).len() == 3)
        .await;
    for push in sink.pushes() {
        // "app:s@cret" in base64.
        assert_eq!(
            push.authorization.as_deref(),
            Some("Basic YXBwOnNAY3JldA=="),
            "{push:?}"
        );
    }
    server.stop().await;
}

/// A sink that takes pushes and never answers is sent at most `--sink-max-in-flight` of
/// them; as many again wait in tickd for room, the rest in the namespace's buffer, and all
/// arrive once it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_that_never_answers_is_sent_no_more_than_its_window() {
    let sink = HttpSink::start(always(200)).await;
    sink.hold();
    let server = TestServer::pushing_to(NAMESPACE, &sink.url("/"), |config| {
        config.sink_max_in_flight = 4;
        // Longer than the test: no push times out into a retry.
        config.sink_timeout = Duration::from_secs(600);
    })
    .await;
    let mut client = server.client().await;
    register_all(&mut client, specs(NAMESPACE, 20, 20)).await;
    let in_flight = format!("tickd_sink_in_flight{{namespace=\"{NAMESPACE}\"}}");
    let scrape = scrape_until(server.metrics_addr, |scrape| {
        scrape.value(&in_flight) == 4.0 && scrape.value("tickd_delivery_buffered") == 12.0
    })
    .await;
    assert_eq!(
        scrape.value(&in_flight),
        4.0,
        "the pushes in flight are at their limit"
    );
    assert_eq!(
        scrape.value("tickd_delivery_unacked"),
        8.0,
        "the window is twice that"
    );
    assert_eq!(
        scrape.value("tickd_delivery_buffered"),
        12.0,
        "the rest wait in the buffer"
    );
    // Counted in flight as they start: the sink has them once their requests arrive.
    sink.wait_for("the 4 pushes in flight", |pushes| pushes.len() >= 4)
        .await;
    assert_eq!(sink.pushes().len(), 4, "pushed no more than the window");
    sink.release();
    sink.wait_for("all 20", |pushes| keys(pushes).len() == 20)
        .await;
    deliveries_settled(server.metrics_addr).await;
    assert!(sink.pushes().iter().all(|push| push.attempt == 1));
    server.stop().await;
}

/// A sink whose address drops connection attempts (its accept queue is full: the
/// kernel drops each SYN) is unreachable, not late: with a push timeout shorter than
/// the connection's own, no attempt is spent, and once it accepts, each expiration
/// arrives as its first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_that_drops_connection_attempts_costs_no_attempts() {
    let blackhole = tokio::net::TcpSocket::new_v4().unwrap();
    blackhole.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = blackhole.local_addr().unwrap();
    let blackhole = blackhole.listen(1).unwrap();
    // Fill the accept queue (never accepted): later SYNs are dropped.
    let mut fillers = Vec::new();
    for _ in 0..3 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        match tokio::time::timeout(Duration::from_millis(500), socket.connect(addr)).await {
            Ok(Ok(stream)) => fillers.push(stream),
            _ => break,
        }
    }
    let server = TestServer::pushing_to(NAMESPACE, &format!("http://{addr}/"), |config| {
        config.sink_timeout = Duration::from_secs(1);
        config.max_attempts = 2;
    })
    .await;
    let mut client = server.client().await;
    register_all(&mut client, specs(NAMESPACE, 3, 20)).await;
    let unreachable =
        format!("tickd_sink_pushes_total{{namespace=\"{NAMESPACE}\",outcome=\"unreachable\"}}");
    let scrape = scrape_until(server.metrics_addr, |scrape| {
        scrape.value(&unreachable) >= 3.0
    })
    .await;
    assert!(
        scrape.value(&unreachable) >= 3.0,
        "each push gave up connecting"
    );
    let retry = format!("tickd_sink_pushes_total{{namespace=\"{NAMESPACE}\",outcome=\"retry\"}}");
    assert_eq!(scrape.value(&retry), 0.0, "no attempt was spent");
    drop((fillers, blackhole));
    let sink = HttpSink::start_on(addr, always(200)).await;
    sink.wait_for("the 3 expirations", |pushes| keys(pushes).len() == 3)
        .await;
    deliveries_settled(server.metrics_addr).await;
    assert!(sink.pushes().iter().all(|push| push.attempt == 1));
    let dead = pending_with_dead(&mut client, NAMESPACE).await;
    assert!(dead.dead_expirations.is_empty(), "{dead:?}");
    server.stop().await;
}

/// A window beyond what a sink's semaphore and subscription can hold is refused at
/// start-up, naming the limit, instead of panicking there.
#[test]
fn a_huge_sink_max_in_flight_is_refused_naming_its_limit() {
    use clap::Parser;
    for value in ["100001", "18446744073709551615"] {
        let error = tickd::config::Config::try_parse_from(["tickd", "--sink-max-in-flight", value])
            .expect_err("refused");
        let shown = error.to_string();
        assert!(shown.contains("--sink-max-in-flight"), "{shown}");
        assert!(shown.contains("at most 100000"), "{shown}");
    }
    let config = tickd::config::Config::try_parse_from(["tickd", "--sink-max-in-flight", "100000"])
        .expect("the limit itself is allowed");
    assert_eq!(config.sink_max_in_flight, 100_000);
}
