//! What an operator relies on when callers outrun the server: load shedding with a clear
//! RESOURCE_EXHAUSTED and bounded memory, a full worker queue naming its limit, and the Unix
//! socket's file mode. Each test starts the real server (in process, or the `tickd`
//! binary) and talks to it over real connections.

mod common;

use std::time::Duration;

use common::metrics::*;
use common::proc_status::*;
use common::*;
use tickd::proto::timers_client::TimersClient;
use tonic::transport::Channel;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;

async fn channels(server: &TestServer, count: usize) -> Vec<Channel> {
    let mut channels = Vec::with_capacity(count);
    for _ in 0..count {
        channels.push(server.channel().await);
    }
    channels
}

/// `calls` concurrent NewTimeout calls (timers an hour away) spread over `channels`, all
/// launched before any is awaited. Returns the status code of each call.
async fn burst(channels: &[Channel], calls: usize, namespace: &str) -> Vec<tonic::Status> {
    let tasks: Vec<_> = (0..calls)
        .map(|index| {
            let mut client = TimersClient::new(channels[index % channels.len()].clone());
            let namespace = namespace.to_owned();
            tokio::spawn(async move {
                match client
                    .new_timeout(NewTimeoutRequest {
                        timer: Some(spec(&namespace, 3_600_000, &[7u8; 64])),
                    })
                    .await
                {
                    Ok(_) => tonic::Status::ok(""),
                    Err(status) => status,
                }
            })
        })
        .collect();
    let mut statuses = Vec::with_capacity(calls);
    for task in tasks {
        statuses.push(within(task).await.expect("call task"));
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overload_is_shed_with_resource_exhausted_and_memory_stays_bounded() {
    const CALLS: usize = 2_000;
    const ROUNDS: usize = 3;
    let server = TestServer::start_with(config(|c| c.max_concurrent_calls = 8)).await;
    let channels = channels(&server, 8).await;
    let rss_before = rss_bytes();
    let mut accepted = 0u64;
    let mut shed = 0u64;
    let mut rss_after_first = 0;
    for round in 0..ROUNDS {
        let statuses = burst(&channels, CALLS, "burst").await;
        for status in &statuses {
            match status.code() {
                Code::Ok => accepted += 1,
                Code::ResourceExhausted => shed += 1,
                _ => panic!("neither answered nor shed: {status:?}"),
            }
        }
        if round == 0 {
            rss_after_first = rss_bytes();
        }
    }
    let rss_after = rss_bytes();
    assert!(
        shed > 0,
        "nothing shed with 2,000 calls against a limit of 8"
    );
    assert!(accepted > 0, "nothing accepted");
    assert_eq!(accepted + shed, (CALLS * ROUNDS) as u64);

    // Still serving normally; what was accepted was applied, and only that.
    let mut client = server.client().await;
    assert_eq!(within(pending_count(&mut client, "burst")).await, accepted);
    register(&mut client, spec("after", 3_600_000, b"fine")).await;
    let health = check_health(server.channel().await, "").await;
    assert_eq!(
        health.expect("health after the burst"),
        ServingStatus::Serving
    );

    // Bounded memory: the bursts leave no queue behind, and repeating them does not grow it.
    eprintln!(
        "overload: accepted={accepted} shed={shed} rss_before={}MiB rss_after_first={}MiB rss_after={}MiB",
        rss_before >> 20,
        rss_after_first >> 20,
        rss_after >> 20
    );
    assert!(
        rss_after < rss_before + (256 << 20),
        "RSS grew from {rss_before} to {rss_after}"
    );
    assert!(
        rss_after < rss_after_first + (64 << 20),
        "RSS kept growing over repeated bursts: {rss_after_first} then {rss_after}"
    );

    // The metrics tell the operator what happened.
    let scrape = scrape_until(server.metrics_addr, |scrape| {
        scrape.get("tickd_rpc_requests_total{method=\"NewTimeout\",code=\"OK\"}")
            == Some((accepted + 1) as f64)
    })
    .await;
    assert_eq!(
        scrape.value("tickd_rpc_requests_total{method=\"NewTimeout\",code=\"OK\"}"),
        (accepted + 1) as f64
    );
    assert_eq!(
        scrape.value("tickd_timers_pending{namespace=\"burst\"}"),
        accepted as f64
    );
    let shed_counted = scrape
        .get("tickd_rpc_requests_total{method=\"NewTimeout\",code=\"RESOURCE_EXHAUSTED\"}")
        .unwrap_or(0.0);
    assert_eq!(
        shed_counted, shed as f64,
        "shed calls missing from the RPC counters"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn full_worker_queue_is_resource_exhausted_naming_the_limit() {
    let server = TestServer::start_with(config(|c| {
        c.worker_queue = 1;
        c.sync = tickd::local::store::SyncMode::None;
    }))
    .await;
    let channels = channels(&server, 8).await;
    let mut full = None;
    let mut accepted = 0u64;
    // Bounded: a queue of one overflows in the first burst or two in practice.
    for _ in 0..20 {
        for status in burst(&channels, 2_000, "q").await {
            match status.code() {
                Code::Ok => accepted += 1,
                Code::ResourceExhausted => full = Some(status),
                _ => panic!("unexpected status: {status:?}"),
            }
        }
        if full.is_some() {
            break;
        }
    }
    let full = full.expect("a one-command worker queue never overflowed");
    assert!(
        full.message().contains("worker queue") && full.message().contains("capacity 1"),
        "the message should name the limit: {:?}",
        full.message()
    );
    let mut client = server.client().await;
    assert_eq!(within(pending_count(&mut client, "q")).await, accepted);
    server.stop().await;
}

// ---------------------------------------------------------------------------------------
// Unix socket mode (the binary applies it)

struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn unix_socket_gets_the_configured_file_mode() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("tickd.sock");
    let mut child = Child(
        std::process::Command::new(env!("CARGO_BIN_EXE_tickd"))
            .arg("--unix-socket")
            .arg(&socket)
            .args(["--unix-socket-mode", "600"])
            .args(["--listen", "127.0.0.1:0"])
            .args(["--metrics-listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .env("TICKD_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start tickd"),
    );
    // The mode is set right after bind, before serving: wait until the socket exists and
    // the server is up (its mode is final once it answers).
    let mut mode = None;
    for _ in 0..400 {
        if let Some(status) = child.0.try_wait().unwrap() {
            panic!("tickd exited early: {status}");
        }
        if let Ok(metadata) = std::fs::metadata(&socket) {
            if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
                assert!(metadata.file_type().is_socket());
                mode = Some(std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777);
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mode = mode.expect("the socket never appeared (waited 20 s)");
    assert_eq!(mode, 0o600, "socket mode {mode:o}");
    child.0.kill().expect("kill tickd");
    child.0.wait().unwrap();
}
