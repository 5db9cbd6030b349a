//! Push sinks on message brokers, against a real tickd and real servers: a NATS server
//! with JetStream (`nats://`) and a Redis server (`redis://`), each started by the test on
//! a free port with its files in a temporary directory. What each test asserts is what
//! the broker holds at the end (the stream's messages, the stream's entries), read with
//! the broker's own client.
//!
//! `TICKD_SKIP_BROKERS=1` skips them; otherwise nats-server and redis-server are
//! installed with apt when missing (see tests/common/brokers.rs).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::brokers::{NatsServer, RedisServer};
use common::daemon::{tickd_command, Daemon};
use common::metrics::{deliveries_settled, scrape, scrape_until};
use common::tooling::skip_brokers;
use common::*;
use tokio_stream::StreamExt;

const NAMESPACE: &str = "brokered";
const SUBJECT: &str = "tickd.expired";
const STREAM: &str = "tickd-expired";

fn pushes(scrape: &common::metrics::Scrape, outcome: &str) -> f64 {
    scrape
        .get(&format!(
            "tickd_sink_pushes_total{{namespace=\"{NAMESPACE}\",outcome=\"{outcome}\"}}"
        ))
        .unwrap_or(0.0)
}

/// Waits until `delivered` pushes were acknowledged by the broker and nothing is in
/// flight or waiting for the sink (every expiration fired so far settled).
async fn settled(server: &TestServer, delivered: usize) {
    let scrape = scrape_until(server.metrics_addr, |scrape| {
        pushes(scrape, "delivered") >= delivered as f64
    })
    .await;
    assert!(
        pushes(&scrape, "delivered") >= delivered as f64,
        "{} delivered",
        pushes(&scrape, "delivered")
    );
    deliveries_settled(server.metrics_addr).await;
}

/// A header's value as text.
fn header(headers: Option<&async_nats::HeaderMap>, name: &str) -> String {
    headers
        .and_then(|headers| headers.get(name))
        .map(|value| value.as_str().to_owned())
        .unwrap_or_else(|| panic!("no {name} header"))
}

/// How to make tickd publish an expiration twice, for certain: the NATS server is paused
/// (SIGSTOP) before the timers fire. tickd's publishes still leave it (the kernel takes
/// them into the paused server's socket buffer), but no PubAck comes back, so each push
/// times out (`--sink-timeout` 300 ms) and counts as a failed attempt to be retried. Once
/// a push has timed out (the `retry` count of `tickd_sink_pushes_total` says so), the
/// server is resumed: it reads and stores the first publishes, and the retries publish
/// the same expirations again with the same `Nats-Msg-Id`, which JetStream's duplicate
/// window drops while acknowledging them. A core subscription on the subject sees every
/// publish, duplicates included; the stream must hold each expiration once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jetstream_stream_holds_each_expiration_once_though_tickd_published_it_twice() {
    if skip_brokers("a_jetstream_stream_holds_each_expiration_once") {
        return;
    }
    let nats = NatsServer::start();
    let observer = async_nats::connect(nats.url())
        .await
        .expect("connect to nats");
    let mut published = observer.subscribe(SUBJECT).await.expect("subscribe");
    observer.flush().await.expect("flush");
    let jetstream = async_nats::jetstream::new(observer.clone());
    let mut stream = jetstream
        .create_stream(async_nats::jetstream::stream::Config {
            name: "EXPIRED".into(),
            subjects: vec![SUBJECT.into()],
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .expect("create the stream");
    let server =
        TestServer::pushing_to(NAMESPACE, &format!("{}/{SUBJECT}", nats.url()), |config| {
            config.sink_timeout = Duration::from_millis(300);
            // Attempts are spent while the server is paused: none may run out.
            config.max_attempts = 1_000;
        })
        .await;
    let mut client = server.client().await;

    // Running: each expiration published once, acknowledged by its PubAck.
    let mut registered = register_all(&mut client, specs(NAMESPACE, 5, 10)).await;
    settled(&server, 5).await;
    assert_eq!(pushes(&scrape(server.metrics_addr).await, "retry"), 0.0);

    // Paused: the publishes go out, their PubAcks do not come back.
    nats.signal("STOP");
    registered.extend(register_all(&mut client, specs(NAMESPACE, 10, 10)).await);
    let scrape_paused =
        scrape_until(server.metrics_addr, |scrape| pushes(scrape, "retry") >= 1.0).await;
    nats.signal("CONT");
    assert!(
        pushes(&scrape_paused, "retry") >= 1.0,
        "no push timed out: delivered {}, unreachable {}, rejected {}, fired {}, unacked {}",
        pushes(&scrape_paused, "delivered"),
        pushes(&scrape_paused, "unreachable"),
        pushes(&scrape_paused, "rejected"),
        scrape_paused.value("tickd_timers_fired_total"),
        scrape_paused.value("tickd_delivery_unacked"),
    );
    settled(&server, 15).await;

    // Every publish tickd made, as the core subscription saw them (duplicates too).
    let delivered = pushes(&scrape(server.metrics_addr).await, "delivered") as usize;
    let retried = pushes(&scrape(server.metrics_addr).await, "retry") as usize;
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for _ in 0..delivered + retried {
        let message = within(published.next()).await.expect("a publish");
        seen.entry(header(message.headers.as_ref(), "Nats-Msg-Id"))
            .or_default()
            .push(header(message.headers.as_ref(), "Tickd-Attempt"));
    }
    assert_eq!(seen.len(), 15, "{seen:#?}");
    let twice: Vec<_> = seen
        .iter()
        .filter(|(_, attempts)| attempts.len() >= 2)
        .collect();
    assert!(!twice.is_empty(), "tickd published none twice: {seen:#?}");
    for (_, attempts) in &twice {
        assert_eq!(attempts[..2], ["1", "2"], "{seen:#?}");
    }

    // The stream: each expiration once, with its headers and its body.
    let messages = stream.info().await.expect("stream info").state.messages;
    assert_eq!(
        messages, 15,
        "the stream holds each expiration once: {seen:#?}"
    );
    let mut keys = BTreeSet::new();
    let mut timers = BTreeSet::new();
    for sequence in 1..=messages {
        let message = stream
            .get_raw_message(sequence)
            .await
            .expect("a stored message");
        let key = header(Some(&message.headers), "Nats-Msg-Id");
        assert_eq!(header(Some(&message.headers), "Tickd-Namespace"), NAMESPACE);
        assert_eq!(
            header(Some(&message.headers), "Content-Type"),
            "application/json"
        );
        let body: serde_json::Value = serde_json::from_slice(&message.payload).expect("JSON body");
        assert_eq!(
            body["deliveryId"],
            header(Some(&message.headers), "Tickd-Delivery-Id")
        );
        let timer_id = body["timer"]["id"]
            .as_str()
            .expect("the timer's id")
            .to_owned();
        assert!(
            key.contains(&timer_id),
            "the key {key} names the timer {timer_id}"
        );
        assert!(keys.insert(key.clone()), "{key} stored twice");
        timers.insert(timer_id);
    }
    assert_eq!(
        keys,
        seen.keys().cloned().collect(),
        "every publish's key is stored"
    );
    assert_eq!(
        timers,
        registered.into_iter().collect(),
        "every timer is stored"
    );
    let dead = pending_with_dead(&mut client, NAMESPACE).await;
    assert!(dead.dead_expirations.is_empty(), "{dead:?}");
    server.stop().await;
    drop(nats);
}

/// A stream entry's fields by name.
type Entry = BTreeMap<String, Vec<u8>>;
/// An entry as XRANGE and XREAD answer it: its id, then its fields and values in turn.
type RawEntry = (String, Vec<Vec<u8>>);
/// XREAD's answer: each stream's new entries, or nothing when it blocked in vain.
type XreadAnswer = Option<Vec<(String, Vec<RawEntry>)>>;

/// Every entry of the stream, in order.
async fn entries(redis: &RedisServer) -> Vec<(String, Entry)> {
    let mut connection = redis.connection().await;
    let raw: Vec<RawEntry> = redis::cmd("XRANGE")
        .arg(STREAM)
        .arg("-")
        .arg("+")
        .query_async(&mut connection)
        .await
        .expect("XRANGE");
    raw.into_iter()
        .map(|(id, fields)| {
            let entry = fields
                .chunks(2)
                .map(|pair| {
                    (
                        String::from_utf8_lossy(&pair[0]).into_owned(),
                        pair[1].clone(),
                    )
                })
                .collect();
            (id, entry)
        })
        .collect()
}

/// Waits (`XREAD BLOCK`, no polling) until the stream has at least `count` entries.
async fn stream_reaches(redis: &RedisServer, count: usize) {
    let mut connection = redis.connection().await;
    let mut last = "0".to_owned();
    let mut seen = 0;
    within(async {
        while seen < count {
            let read: XreadAnswer = redis::cmd("XREAD")
                .arg("BLOCK")
                .arg(0)
                .arg("STREAMS")
                .arg(STREAM)
                .arg(&last)
                .query_async(&mut connection)
                .await
                .expect("XREAD");
            for (_, new) in read.unwrap_or_default() {
                seen += new.len();
                if let Some((id, _)) = new.last() {
                    last = id.clone();
                }
            }
        }
    })
    .await;
}

fn text(entry: &Entry, field: &str) -> String {
    let value = entry
        .get(field)
        .unwrap_or_else(|| panic!("no field {field} in {entry:?}"));
    String::from_utf8(value.clone()).expect("text")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_stream_gets_every_expiration_even_across_a_stopped_server() {
    if skip_brokers("a_redis_stream_gets_every_expiration") {
        return;
    }
    let mut redis = RedisServer::start();
    let server =
        TestServer::pushing_to(NAMESPACE, &format!("{}/{STREAM}", redis.url()), |_| {}).await;
    let mut client = server.client().await;
    let mut registered = register_all(&mut client, specs(NAMESPACE, 10, 10)).await;
    stream_reaches(&redis, 10).await;
    settled(&server, 10).await;

    // Stopped: every push finds the sink unreachable and is held.
    redis.stop();
    registered.extend(register_all(&mut client, specs(NAMESPACE, 10, 10)).await);
    let scrape_down = scrape_until(server.metrics_addr, |scrape| {
        scrape.value("tickd_timers_fired_total") >= 20.0 && pushes(scrape, "unreachable") > 0.0
    })
    .await;
    assert!(
        pushes(&scrape_down, "unreachable") > 0.0,
        "tickd never found it down"
    );
    redis.restart();
    stream_reaches(&redis, 20).await;
    settled(&server, 20).await;

    let entries = entries(&redis).await;
    let mut timers = BTreeSet::new();
    for (id, entry) in &entries {
        let body: serde_json::Value =
            serde_json::from_slice(&entry["expiration"]).expect("a JSON expiration");
        let timer_id = text(entry, "timer_id");
        assert_eq!(body["timer"]["id"], timer_id.as_str(), "{id}");
        assert_eq!(
            body["deliveryId"],
            text(entry, "delivery_id").as_str(),
            "{id}"
        );
        assert_eq!(text(entry, "namespace"), NAMESPACE);
        assert!(text(entry, "idempotency_key").contains(&timer_id), "{id}");
        // Not reaching the sink is not an attempt: each arrives as its first.
        assert_eq!(text(entry, "attempt"), "1", "{id}: {entry:?}");
        timers.insert(timer_id);
    }
    assert_eq!(
        timers,
        registered.into_iter().collect(),
        "every timer reached the stream"
    );
    let dead = pending_with_dead(&mut client, NAMESPACE).await;
    assert!(dead.dead_expirations.is_empty(), "{dead:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_sinks_outside_sink_allow_are_refused_at_start_and_never_connected_to() {
    // Listeners on another loopback address, which `--sink-allow 127.0.0.1` leaves out.
    for scheme in ["nats", "redis"] {
        let outside = tokio::net::TcpListener::bind("127.0.0.2:0")
            .await
            .expect("bind 127.0.0.2");
        let port = outside.local_addr().unwrap().port();
        let mut command = tickd_command();
        command
            .args(["--sync", "none", "--metrics-listen", "127.0.0.1:0"])
            .args([
                "--sink",
                &format!("{NAMESPACE}={scheme}://127.0.0.2:{port}/expired"),
            ])
            .args(["--sink-allow", "127.0.0.1"]);
        let (status, log) = Daemon::refused(command, PATIENCE);
        assert!(!status.success(), "{log}");
        assert!(
            log.contains("--sink-allow"),
            "the refusal names the flag: {log}"
        );
        assert!(log.contains("127.0.0.2"), "and the address: {log}");
        let accepted = tokio::time::timeout(Duration::ZERO, outside.accept()).await;
        assert!(
            accepted.is_err(),
            "tickd connected to a {scheme} sink it refused"
        );
    }
}
