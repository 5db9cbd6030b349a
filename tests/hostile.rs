//! tickd against careless and hostile clients: idle sockets by the thousand, oversized
//! requests, answers bigger than a client accepts, thousands of streams on one connection,
//! heartbeat floods under CPU contention, and bytes that are not protobuf. Each case ends
//! in a clear refusal or in back-pressure, with tickd serving throughout; memory is checked
//! from /proc with generous margins.
//!
//! The grpcio cases run `tests/python/hostile.py` in the polyglot venv (see
//! `tests/polyglot.rs`; `TICKD_SKIP_POLYGLOT=1` skips them).

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::daemon::{clock_ticks_per_second, cpu_ticks, tickd_command, Daemon};
use common::metrics::{scrape, scrape_until, Scrape};
use common::proc_status::*;
use common::raw_codec::RawCodec;
use common::tooling::{polyglot_python, repo, skip_polyglot};
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{health_check_response::ServingStatus, HealthCheckRequest};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Scrapes until `series` reaches `at_least` (an event the server reports), and checks
/// that it did.
async fn await_metric(addr: SocketAddr, series: &str, at_least: f64) -> Scrape {
    let reached = |scrape: &Scrape| scrape.get(series).unwrap_or(0.0) >= at_least;
    let scrape = scrape_until(addr, reached).await;
    assert!(
        reached(&scrape),
        "{series} never reached {at_least}:\n{scrape:#?}"
    );
    scrape
}

fn python_script(args: &[&str]) -> Command {
    let python = polyglot_python().unwrap_or_else(|failure| panic!("{failure}"));
    let mut command = Command::new(python);
    command
        .arg(repo().join("tests/python/hostile.py"))
        .args(args)
        .env("TICKD_PROTO_DIR", repo().join("proto"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("PYTHONPATH");
    command
}

/// The script's one `name key=value ...` line, as pairs.
fn script_figures(output: &std::process::Output) -> Vec<(String, String)> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "script failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = stdout.lines().last().expect("a figures line").to_owned();
    line.split_whitespace()
        .skip(1)
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

fn figure<'a>(figures: &'a [(String, String)], key: &str) -> &'a str {
    figures
        .iter()
        .find(|(name, _)| name == key)
        .map(|(_, value)| value.as_str())
        .unwrap_or_else(|| panic!("no {key} in {figures:?}"))
}

/// A tickd process in memory (`--sync none`), a channel to it, and its RSS (KiB) before
/// the test does anything.
async fn daemon_in_memory() -> (Daemon, tonic::transport::Channel, u64) {
    let mut command = tickd_command();
    command.args(["--sync", "none", "--metrics-listen", "127.0.0.1:0"]);
    let daemon = Daemon::start(command);
    let rss_before = status_bytes(daemon.pid(), "VmRSS") / 1024;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", daemon.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (daemon, channel, rss_before)
}

/// Kills the child when dropped, so a failing test leaves no client process behind.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_by_the_thousand_never_keep_a_client_out() {
    if skip_polyglot("hostile idle connections") {
        return;
    }
    let mut command = tickd_command();
    command.args(["--sync", "none", "--metrics-listen", "127.0.0.1:0"]);
    let mut daemon = Daemon::start(command);
    assert_eq!(
        daemon.count("raised the open file limit"),
        1,
        "{}",
        daemon.log_text()
    );
    let addr = daemon.addr.to_string();
    let mut holder = Reaped(
        python_script(&["idle-connections", &addr, "19990"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the idle client"),
    );
    let mut held = String::new();
    BufReader::new(holder.0.stdout.as_mut().unwrap())
        .read_line(&mut held)
        .unwrap();
    assert!(held.contains("held=19990"), "{held}");

    // While they sit there, a new client is served and tickd stays nearly idle.
    let started = Instant::now();
    assert_eq!(health(daemon.addr, "").await, Some(ServingStatus::Serving));
    let answered_in = started.elapsed();
    let (ticks_before, window_start) = (cpu_ticks(daemon.pid()), Instant::now());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = (cpu_ticks(daemon.pid()) - ticks_before) as f64 / clock_ticks_per_second() as f64;
    let core_share = used / window_start.elapsed().as_secs_f64();
    println!(
        "hostile case=idle_connections held=19990 health_check_ms={} cpu_share={core_share:.3} rss_mib={}",
        answered_in.as_millis(),
        status_bytes(daemon.pid(), "VmRSS") / 1024 / 1024
    );
    assert!(
        core_share < 0.5,
        "tickd spins with idle sockets: {core_share:.2} of a core"
    );
    let scrape = scrape(daemon.metrics_addr()).await;
    let evicted = "tickd_connections_closed_by_server_total{reason=\"Evicted\"}";
    assert!(scrape.value(evicted) > 0.0, "{scrape:#?}");
    assert!(
        scrape.value("tickd_connections_open") <= 1_024.0 + 1.0,
        "{scrape:#?}"
    );
    holder.0.stdin.take();
    daemon.assert_running();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_idle_and_excess_connections_are_closed() {
    let server = TestServer::start_with(config(|config| {
        config.handshake_timeout = Duration::from_millis(300);
        config.idle_timeout = Duration::from_millis(300);
        config.max_connections = 3;
        config.sync = tickd::local::store::SyncMode::None;
    }))
    .await;
    // Silent: closed at the handshake timeout (the read sees the end of the stream).
    let mut silent = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(60), silent.read(&mut byte)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    await_metric(
        server.metrics_addr,
        "tickd_connections_closed_by_server_total{reason=\"HandshakeTimeout\"}",
        1.0,
    )
    .await;

    // A preface and then no call: still a handshake, closed at the handshake timeout.
    let mut no_call = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    no_call.write_all(PREFACE).await.unwrap();
    let mut drained = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), no_call.read_to_end(&mut drained));
    assert!(
        matches!(read.await, Ok(Ok(_)) | Ok(Err(_))),
        "a preface alone held the connection"
    );

    // Idle after a call: closed, and the client's next call reconnects.
    let mut client = server.client().await;
    client.pending(PendingRequest::default()).await.unwrap();
    await_metric(
        server.metrics_addr,
        "tickd_connections_closed_by_server_total{reason=\"Idle\"}",
        1.0,
    )
    .await;
    client.pending(PendingRequest::default()).await.unwrap();

    // Three open (with their preface sent) fill --max-connections 3; a fourth is closed.
    let mut open = Vec::new();
    while open.len() < 3 {
        let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        stream.write_all(PREFACE).await.unwrap();
        open.push(stream);
    }
    await_metric(server.metrics_addr, "tickd_connections_open", 3.0).await;
    let mut excess = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let read = tokio::time::timeout(Duration::from_secs(60), excess.read(&mut byte)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    await_metric(
        server.metrics_addr,
        "tickd_connections_closed_by_server_total{reason=\"Limit\"}",
        1.0,
    )
    .await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_request_is_refused_from_its_header() {
    let (daemon, channel, rss_before) = daemon_in_memory().await;
    let mut client = tickd::proto::timers_client::TimersClient::new(channel)
        .max_encoding_message_size(usize::MAX);
    // 3,000 timers of 64 KiB: 196 MB in one message.
    let payload = vec![7u8; 64 * 1024];
    let batch = NewTimeoutsRequest {
        timers: (0..3_000)
            .map(|_| spec("hostile-oversized", 3_600_000, &payload))
            .collect(),
    };
    let refusal = client.new_timeouts(batch).await.unwrap_err();
    assert_eq!(refusal.code(), Code::ResourceExhausted, "{refusal:?}");
    assert!(
        refusal.message().contains("--max-request-bytes"),
        "{refusal:?}"
    );
    // One timer of 200 MB: refused the same way, before its payload is read.
    let huge = NewTimeoutRequest {
        timer: Some(spec("hostile-oversized", 3_600_000, &vec![1u8; 200 << 20])),
    };
    let refusal = client.new_timeout(huge).await.unwrap_err();
    assert_eq!(refusal.code(), Code::ResourceExhausted, "{refusal:?}");
    let peak_growth = (status_bytes(daemon.pid(), "VmHWM") / 1024).saturating_sub(rss_before);
    println!(
        "hostile case=oversized_request peak_rss_growth_mib={}",
        peak_growth / 1024
    );
    assert!(peak_growth < 64 * 1024, "RSS grew by {peak_growth} KiB");
    // Nothing was registered, and the connection still serves.
    let pending = client
        .pending(PendingRequest {
            namespace: "hostile-oversized".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(pending.count, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_answer_fits_a_default_grpcio_client() {
    if skip_polyglot("hostile big batch") {
        return;
    }
    let server = TestServer::start().await;
    let addr = server.addr.to_string();
    let output = tokio::task::spawn_blocking(move || {
        python_script(&["big-batch", &addr, "80", "60000"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let figures = script_figures(&output);
    assert_eq!(figure(&figures, "code"), "OK", "{figures:?}");
    assert_eq!(figure(&figures, "registered"), "80");
    // The listing of those payloads (4.8 MB) comes in pages a default client accepts.
    let mut client = server.client().await;
    let (mut listed, mut token) = (0, String::new());
    loop {
        let page = client
            .pending(PendingRequest {
                namespace: "hostile-big-batch".into(),
                page_size: 1_000,
                page_token: token,
                include_dead: false,
            })
            .await
            .expect("each page fits the client's 4 MiB limit")
            .into_inner();
        listed += page.timers.len();
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(listed, 80);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_subscribe_streams_on_one_connection_are_refused_past_the_limit() {
    let (daemon, channel, rss_before) = daemon_in_memory().await;
    let (mut accepted, mut refused) = (Vec::new(), 0);
    for round in 0..40 {
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..500 {
            let mut client = tickd::proto::timers_client::TimersClient::new(channel.clone());
            let observer = round % 2 == 1;
            calls.spawn(async move {
                client
                    .subscribe(SubscribeRequest {
                        namespace: "hostile-streams".into(),
                        mode: if observer {
                            subscribe_request::Mode::Observer as i32
                        } else {
                            subscribe_request::Mode::Shared as i32
                        },
                        ..Default::default()
                    })
                    .await
            });
        }
        while let Some(outcome) = calls.join_next().await {
            match outcome.unwrap() {
                Ok(stream) => accepted.push(stream.into_inner()),
                Err(status) => {
                    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                    assert!(status.message().contains("--max-"), "{status:?}");
                    refused += 1;
                }
            }
        }
    }
    let peak_growth = (status_bytes(daemon.pid(), "VmHWM") / 1024).saturating_sub(rss_before);
    println!(
        "hostile case=subscribe_streams accepted={} refused={refused} peak_rss_growth_mib={}",
        accepted.len(),
        peak_growth / 1024
    );
    assert_eq!(
        accepted.len(),
        100,
        "--max-subscribe-streams-per-connection"
    );
    assert_eq!(refused, 19_900);
    assert!(peak_growth < 64 * 1024, "RSS grew by {peak_growth} KiB");
    // The connection still serves other calls.
    let mut client = tickd::proto::timers_client::TimersClient::new(channel);
    client.pending(PendingRequest::default()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_heartbeat_floods_meet_flow_control_not_goaway() {
    if skip_polyglot("hostile keepalive flood") {
        return;
    }
    // With the log on (--sync always, the default), where an unread stream used to end in
    // GOAWAY ENHANCE_YOUR_CALM.
    let mut command = tickd_command();
    let data_dir = tempfile::tempdir().unwrap();
    command.arg("--data-dir").arg(data_dir.path());
    command.args(["--metrics-listen", "127.0.0.1:0"]);
    let mut daemon = Daemon::start(command);
    let _busy: Vec<Reaped> = (0..2)
        .map(|_| Reaped(python_script(&["busy-loop"]).spawn().unwrap()))
        .collect();
    let heartbeats = std::env::var("TICKD_HOSTILE_HEARTBEATS").unwrap_or("75000".into());
    let clients: Vec<_> = (0..2)
        .map(|index| {
            let (addr, heartbeats) = (daemon.addr.to_string(), heartbeats.clone());
            std::thread::spawn(move || {
                let namespace = format!("hostile-flood-{index}");
                python_script(&["keepalive-flood", &addr, &namespace, &heartbeats])
                    .output()
                    .unwrap()
            })
        })
        .collect();
    for client in clients {
        let figures = script_figures(&client.join().unwrap());
        println!("hostile case=keepalive_flood {figures:?}");
        assert_eq!(figure(&figures, "status"), "OK", "{figures:?}");
        assert_eq!(figure(&figures, "answered"), heartbeats);
        assert_eq!(figure(&figures, "failed"), "0");
    }
    daemon.assert_running();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_are_invalid_argument() {
    let server = TestServer::start().await;
    let mut grpc = tonic::client::Grpc::new(server.channel().await);
    let malformed: [(&str, &[u8]); 3] = [
        // Field 1 (timer), length 5, but only 2 bytes follow.
        ("truncated", &[0x0a, 0x05, 0x0a, 0x01]),
        // Field 1 with wire type 7, which does not exist.
        ("bad wire type", &[0x0f, 0x00]),
        // timer.namespace = the bytes ff fe: not UTF-8.
        ("invalid utf-8", &[0x0a, 0x04, 0x0a, 0x02, 0xff, 0xfe]),
    ];
    for (what, bytes) in malformed {
        grpc.ready().await.unwrap();
        let path = "/tickd.v1.Timers/NewTimeout".parse().unwrap();
        let refusal = grpc
            .unary::<Bytes, Bytes, _>(
                tonic::Request::new(Bytes::from_static(bytes)),
                path,
                RawCodec,
            )
            .await
            .unwrap_err();
        assert_eq!(refusal.code(), Code::InvalidArgument, "{what}: {refusal:?}");
        assert!(
            refusal.message().contains("malformed message"),
            "{what}: {refusal:?}"
        );
    }
    let mut client = server.client().await;
    let pending = client.pending(PendingRequest::default()).await.unwrap();
    assert_eq!(
        pending.into_inner().count,
        0,
        "nothing malformed was registered"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_refusals_reach_the_client() {
    let server = TestServer::start_with(config(|config| {
        config.max_request_bytes = 1_024;
        config.max_watch_streams = 2;
        config.sync = tickd::local::store::SyncMode::None;
    }))
    .await;
    // A heartbeat over --max-request-bytes ends the KeepAlive call with that refusal.
    let mut client = server.client().await;
    let oversized = KeepAliveRequest {
        sequence: 1,
        timer: Some(TimerRef {
            namespace: "n".repeat(2_000),
            target: Some(timer_ref::Target::Id("1".into())),
        }),
        ttl: None,
    };
    let mut answers = client
        .keep_alive(tokio_stream::iter(vec![oversized]))
        .await
        .unwrap()
        .into_inner();
    let refusal = match answers.message().await {
        Ok(Some(answer)) => panic!("answered an oversized heartbeat: {answer:?}"),
        Ok(None) => panic!("the KeepAlive call ended OK"),
        Err(status) => status,
    };
    assert_eq!(refusal.code(), Code::ResourceExhausted, "{refusal:?}");
    assert!(
        refusal.message().contains("--max-request-bytes"),
        "{refusal:?}"
    );

    // Health Watch streams hold a place each: the third is refused, naming the flag.
    let mut health = HealthClient::new(server.channel().await);
    let mut watching = Vec::new();
    for _ in 0..2 {
        let stream = health.watch(HealthCheckRequest::default()).await.unwrap();
        watching.push(stream.into_inner());
    }
    let refusal = health
        .watch(HealthCheckRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refusal.code(), Code::ResourceExhausted, "{refusal:?}");
    assert!(
        refusal.message().contains("--max-watch-streams"),
        "{refusal:?}"
    );
    // At shutdown the watch streams end, instead of holding the drain to its timeout.
    let stopped = server.stop().await;
    assert!(
        !stopped.drain_timed_out,
        "open Watch streams held the drain open"
    );
    for mut stream in watching {
        loop {
            match stream.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(status) => {
                    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                    break;
                }
            }
        }
    }
}
