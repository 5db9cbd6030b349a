//! Push sinks over HTTP, beyond what a status says, against a real tickd and a real HTTP
//! server: HTTP/2 from the first byte (`#h2c`) to a sink that speaks it and to one that
//! does not, and a sink whose answers never end.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::http_sink::{always, attempts_of, keys, HttpSink, Script, SinkOptions};
use common::metrics::{deliveries_settled, scrape_until};
use common::*;

const NAMESPACE: &str = "pushed";

/// An `http://...#h2c` sink is spoken HTTP/2 from the first byte: the pushes in flight
/// are streams of one connection, and a push answered 503 is retried on it as a stream
/// like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2c_sink_gets_its_pushes_in_flight_as_streams_of_one_connection() {
    let script: Script = Arc::new(|_, before| (if before == 0 { 503 } else { 204 }, None));
    let sink = HttpSink::start(script).await;
    sink.hold();
    let server = TestServer::pushing_to(
        NAMESPACE,
        &format!("{}#protobuf,h2c", sink.url("/")),
        |config| {
            config.sink_max_in_flight = 8;
            config.sink_timeout = Duration::from_secs(600);
        },
    )
    .await;
    let mut client = server.client().await;
    register_all(&mut client, specs(NAMESPACE, 8, 20)).await;
    // All 8 unanswered at once: 8 requests in flight together.
    sink.wait_for("8 pushes held", |pushes| pushes.len() == 8)
        .await;
    assert_eq!(
        sink.connections(),
        1,
        "8 pushes in flight on one connection"
    );
    sink.release();
    sink.wait_for("each expiration's second attempt", |pushes| {
        pushes.len() == 16
    })
    .await;
    deliveries_settled(server.metrics_addr).await;
    let pushes = sink.pushes();
    for key in keys(&pushes) {
        assert_eq!(attempts_of(&pushes, &key), [1, 2], "{key}");
    }
    assert!(
        pushes
            .iter()
            .all(|push| push.version == hyper::Version::HTTP_2
                && push.content_type == "application/x-protobuf"),
        "{pushes:#?}"
    );
    assert_eq!(
        sink.connections(),
        1,
        "the retries went on the same connection"
    );
    assert!(pending_with_dead(&mut client, NAMESPACE)
        .await
        .dead_expirations
        .is_empty());
    server.stop().await;
}

/// `#h2c` given for a sink that speaks only HTTP/1.1: no push is mistaken for delivered.
/// Each is an attempt that failed (the connection ends without an answer), so the
/// expirations go to the dead list after `--max-attempts`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_to_a_sink_that_speaks_only_http1_acknowledges_nothing_and_buries_after_max_attempts() {
    let options = SinkOptions {
        http1_only: true,
        ..SinkOptions::default()
    };
    let sink = HttpSink::start_with(always(204), options).await;
    let server = TestServer::pushing_to(NAMESPACE, &format!("{}#h2c", sink.url("/")), |config| {
        config.max_attempts = 2;
    })
    .await;
    let mut client = server.client().await;
    let registered = register_all(&mut client, specs(NAMESPACE, 3, 20)).await;
    let pending = wait_for_dead(&client, NAMESPACE, 3, || async {
        format!("{:#?}", sink.pushes())
    })
    .await;
    deliveries_settled(server.metrics_addr).await;
    assert!(sink.pushes().is_empty(), "the sink understood no push");
    let mut buried: Vec<_> = pending.dead_expirations.iter().map(timer_id).collect();
    let mut ids = registered.clone();
    buried.sort();
    ids.sort();
    assert_eq!(buried, ids);
    assert!(
        pending
            .dead_expirations
            .iter()
            .all(|dead| dead.attempt == 2),
        "each buried after its 2 attempts: {:?}",
        pending.dead_expirations
    );
    let delivered =
        format!("tickd_sink_pushes_total{{namespace=\"{NAMESPACE}\",outcome=\"delivered\"}}");
    let scrape = scrape_until(server.metrics_addr, |_| true).await;
    assert_eq!(scrape.get(&delivered).unwrap_or(0.0), 0.0);
    server.stop().await;
}

/// A sink that answers 200 with a body that never ends: the status settles each push
/// (acknowledged at its first attempt), and tickd reads at most 64 KiB of the body before
/// it closes the connection, so every connection ends although the push timeout is long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_whose_body_never_ends_acknowledges_its_push_and_its_connection_is_closed() {
    let options = SinkOptions {
        endless_body: true,
        ..SinkOptions::default()
    };
    let sink = HttpSink::start_with(always(200), options).await;
    let server = TestServer::pushing_to(NAMESPACE, &sink.url("/"), |config| {
        config.sink_timeout = Duration::from_secs(600);
    })
    .await;
    let mut client = server.client().await;
    register_all(&mut client, specs(NAMESPACE, 4, 20)).await;
    sink.wait_for("the 4 expirations", |pushes| keys(pushes).len() == 4)
        .await;
    deliveries_settled(server.metrics_addr).await;
    let pushes = sink.pushes();
    assert!(pushes.iter().all(|push| push.attempt == 1), "{pushes:#?}");
    assert_eq!(pushes.len(), 4, "each acknowledged at once: {pushes:#?}");
    // Nothing else ends them: the sink never stops writing, and tickd's timeout is 10
    // minutes away.
    sink.wait_for_closed_connections(sink.connections()).await;
    assert!(sink.connections() >= 1);
    server.stop().await;
}
