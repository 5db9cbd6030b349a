//! tickd fails safe: a full disk, a panic in a part that holds state, or a database that
//! goes away. Each fault is injected on purpose into a real tickd process, and the test
//! asserts what a client and an operator see: calls refused, nothing refused ever taking
//! effect, health that tells the truth, and an exit for the supervisor to act on.

mod common;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::postgres::Postgres;
use common::tmpfs::Tmpfs;
use common::tooling::skip_postgres;
use common::*;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_check_response::ServingStatus;

/// tickd as the other daemon tests start it, with its metrics on a port of its own.
fn tickd_command() -> Command {
    let mut command = common::daemon::tickd_command();
    command.args(["--metrics-listen", "127.0.0.1:0"]);
    command
}

/// Generous bound on waiting for an event the server reports, so a broken server fails
/// the test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(60);

async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect")
}

/// Polls health until `service` reports `wanted` (or tickd stops answering, for
/// NOT_SERVING), within [`PATIENCE`]; returns how long that took.
async fn await_health(addr: SocketAddr, service: &str, wanted: ServingStatus) -> Duration {
    let started = Instant::now();
    loop {
        let status = health(addr, service).await;
        if status == Some(wanted) || (wanted == ServingStatus::NotServing && status.is_none()) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < PATIENCE,
            "{service:?} never became {wanted:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn is_root() -> bool {
    let output = Command::new("id").arg("-u").output().expect("id -u");
    String::from_utf8_lossy(&output.stdout).trim() == "0"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_stops_and_loses_nothing_acknowledged() {
    if !is_root() {
        eprintln!("full disk: skipped (mounting a small tmpfs needs root)");
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let small = scratch.path().join("small");
    let Some(tmpfs) = Tmpfs::mount(&small, "1m") else {
        eprintln!("full disk: skipped (this machine refuses to mount a tmpfs)");
        return;
    };
    let mut command = tickd_command();
    command
        .arg("--data-dir")
        .arg(&small)
        .args(["--sync", "always"]);
    let mut daemon = Daemon::start(command);
    let mut client = tickd::proto::timers_client::TimersClient::new(channel(daemon.addr).await);
    // A subscriber that sees every delivery, to catch a refused timer being delivered.
    let mut deliveries = client
        .subscribe(SubscribeRequest {
            namespace: "disk".into(),
            max_unacked: 10_000,
            ack_timeout: Some(millis(3_600_000)),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();

    // 16 KiB timers until the disk is full: ten far ahead, then timers due at once (so the
    // one refused would fire at once if its refusal did not hold).
    let (mut acknowledged, mut refused) = (Vec::new(), HashSet::new());
    let payload = vec![7u8; 16 * 1024];
    for index in 0.. {
        let delay = if index < 10 { 3_600_000 } else { 0 };
        let mut timer = spec("disk", delay, &payload);
        timer.key = format!("timer-{index}");
        match client
            .new_timeout(NewTimeoutRequest { timer: Some(timer) })
            .await
        {
            Ok(_) => acknowledged.push((index, delay)),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                refused.insert(format!("timer-{index}"));
                break;
            }
        }
        assert!(index < 1_000, "a 1 MiB disk never filled");
    }
    let failed_at = Instant::now();
    let not_serving = await_health(daemon.addr, "", ServingStatus::NotServing).await;
    println!(
        "failsafe case=full_disk acknowledged={} not_serving_after_ms={}",
        acknowledged.len(),
        not_serving.as_millis()
    );
    let status = daemon.wait_for_exit(PATIENCE);
    assert!(
        !status.success(),
        "tickd exited {status} after its log failed"
    );
    assert!(
        daemon.count("cut the log back to what was acknowledged") == 1,
        "{}",
        daemon.log_text()
    );
    assert!(failed_at.elapsed() < PATIENCE);
    // Everything the subscriber received before tickd stopped was acknowledged.
    let mut delivered_keys = HashSet::new();
    while let Ok(Some(delivered)) = deliveries.message().await {
        let key = delivered.expiration.unwrap().timer.unwrap().key;
        assert!(!refused.contains(&key), "{key} was refused, yet delivered");
        delivered_keys.insert(key);
    }

    // On a larger disk every acknowledged timer is back, and nothing refused is.
    let large = scratch.path().join("large");
    std::fs::create_dir_all(&large).unwrap();
    for file in std::fs::read_dir(&small).unwrap().flatten() {
        std::fs::copy(file.path(), large.join(file.file_name())).unwrap();
    }
    drop(tmpfs);
    let mut command = tickd_command();
    command.arg("--data-dir").arg(&large);
    let daemon = Daemon::start(command);
    let mut client = tickd::proto::timers_client::TimersClient::new(channel(daemon.addr).await);
    let timer_ref = |index: usize| GetRequest {
        timer: Some(TimerRef {
            namespace: "disk".into(),
            target: Some(timer_ref::Target::Key(format!("timer-{index}"))),
        }),
    };
    for &(index, delay) in &acknowledged {
        if delay > 0 {
            let pending = client.get(timer_ref(index)).await;
            assert!(
                pending.is_ok(),
                "acknowledged timer-{index} lost: {pending:?}"
            );
        }
    }
    for key in &refused {
        let index: usize = key.trim_start_matches("timer-").parse().unwrap();
        let status = client.get(timer_ref(index)).await.unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::NotFound,
            "refused {key} came back"
        );
    }
    // The immediate ones were delivered before, or are delivered (again) now: none is
    // lost, and never a refused one.
    let mut redelivered = client
        .subscribe(SubscribeRequest {
            namespace: "disk".into(),
            max_unacked: 10_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let immediate: HashSet<String> = acknowledged
        .iter()
        .filter(|(_, delay)| *delay == 0)
        .map(|(index, _)| format!("timer-{index}"))
        .collect();
    while !immediate.is_subset(&delivered_keys) {
        let delivered = tokio::time::timeout(PATIENCE, redelivered.message())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "never delivered: {:?}",
                    immediate.difference(&delivered_keys)
                )
            })
            .unwrap()
            .unwrap();
        let key = delivered.expiration.unwrap().timer.unwrap().key;
        assert!(!refused.contains(&key), "{key} was refused, yet delivered");
        delivered_keys.insert(key);
    }
}

/// Starts tickd with `TICKD_INJECT_PANIC=point`, makes the call that reaches that part,
/// and expects the process to end with an error, having said why.
async fn a_panic_ends_the_process(point: &str) {
    let data = tempfile::tempdir().unwrap();
    let mut command = tickd_command();
    command
        .arg("--data-dir")
        .arg(data.path())
        .env("TICKD_INJECT_PANIC", point);
    let mut daemon = Daemon::start(command);
    let mut client = tickd::proto::timers_client::TimersClient::new(channel(daemon.addr).await);
    // The worker panics on this command, the store on its record, delivery on its firing.
    let _ = client
        .new_timeout(NewTimeoutRequest {
            timer: Some(spec("panic", 0, b"")),
        })
        .await;
    let status = daemon.wait_for_exit(PATIENCE);
    assert!(!status.success(), "{point}: tickd exited {status}");
    let log = daemon.log_text();
    assert!(log.contains("injected panic"), "{point}: {log}");
    assert!(log.contains("tickd cannot do its job"), "{point}: {log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_worker_store_or_delivery_ends_the_process() {
    for point in ["worker", "store", "delivery"] {
        a_panic_ends_the_process(point).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_not_ready_while_its_database_is_away() {
    if skip_postgres("a_replica_is_not_ready_while_its_database_is_away") {
        return;
    }
    let postgres = Postgres::start().await;
    let work = tempfile::tempdir().unwrap();
    let mut command = tickd_command();
    command
        .args(["--store", &postgres.url(), "--replica-id", "health-1"])
        .args(["--lease-ttl", "3s"])
        .current_dir(work.path());
    let mut daemon = Daemon::start(command);
    let timers = "tickd.v1.Timers";
    await_health(daemon.addr, timers, ServingStatus::Serving).await;

    postgres.signal_all("STOP");
    let unready = await_health(daemon.addr, timers, ServingStatus::NotServing).await;
    // Liveness stays green: restarting tickd would not bring the database back.
    assert_eq!(health(daemon.addr, "").await, Some(ServingStatus::Serving));
    postgres.signal_all("CONT");
    let ready = await_health(daemon.addr, timers, ServingStatus::Serving).await;
    println!(
        "failsafe case=database_away not_ready_after_ms={} ready_again_after_ms={}",
        unready.as_millis(),
        ready.as_millis()
    );
    daemon.assert_running();
}

/// A supervisor that closes tickd's output before stopping it (Java's `Process.destroy`
/// does) still gets a clean drain: a log line that cannot be written is dropped, and
/// SIGTERM ends with status 0, not with a panic's 101.
#[test]
fn closed_log_pipes_do_not_turn_a_clean_stop_into_a_crash() {
    use std::io::{BufRead, BufReader};
    let mut child = tickd_command()
        .args(["--sync", "none"])
        .spawn()
        .expect("spawn tickd");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let serving = stdout
        .lines()
        .map_while(Result::ok)
        .any(|line| line.contains("tickd serving"));
    assert!(serving, "tickd closed its output without serving");
    // Both readers gone: every line tickd logs from now on meets a broken pipe.
    drop(child.stderr.take());
    common::daemon::send_signal(child.id(), "TERM");
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "tickd still running {PATIENCE:?} after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        status.success(),
        "tickd exited {status} after SIGTERM with its log pipes closed"
    );
}

/// A snapshot is written and sealed on a thread of its own; its failure is the store's.
/// `TICKD_INJECT_PANIC=snapshot` makes that thread panic on its first chunk: the store
/// stops, refusing the calls after it, no partial snapshot is left behind, and a restart
/// finds every acknowledged timer and none of the refused one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_failing_in_the_background_stops_the_store_and_loses_nothing_acknowledged() {
    let data = tempfile::tempdir().unwrap();
    let mut command = tickd_command();
    command
        .arg("--data-dir")
        .arg(data.path())
        .args(["--sync", "always", "--snapshot-after-bytes", "65536"])
        .env("TICKD_INJECT_PANIC", "snapshot");
    let mut daemon = Daemon::start(command);
    let mut client = tickd::proto::timers_client::TimersClient::new(channel(daemon.addr).await);
    let payload = vec![7u8; 1024];
    let mut acknowledged = Vec::new();
    let refused = loop {
        let index = acknowledged.len();
        assert!(index < 5_000, "the failed snapshot never stopped the store");
        let mut timer = spec("snapshot", 3_600_000, &payload);
        timer.key = format!("timer-{index}");
        match client
            .new_timeout(NewTimeoutRequest { timer: Some(timer) })
            .await
        {
            Ok(_) => acknowledged.push(index),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                break index;
            }
        }
    };
    let status = daemon.wait_for_exit(PATIENCE);
    assert!(
        !status.success(),
        "tickd exited {status} after its snapshot failed"
    );
    let log = daemon.log_text();
    assert!(log.contains("the snapshot thread panicked"), "{log}");
    assert!(log.contains("the log failed"), "{log}");
    let partial: Vec<_> = std::fs::read_dir(data.path())
        .unwrap()
        .flatten()
        .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "partial"))
        .collect();
    assert!(partial.is_empty(), "left behind: {partial:?}");
    assert!(acknowledged.len() > 64, "no snapshot was due yet");

    let mut command = tickd_command();
    command.arg("--data-dir").arg(data.path());
    let _daemon = Daemon::start(command);
    let mut client = tickd::proto::timers_client::TimersClient::new(channel(_daemon.addr).await);
    let by_key = |index: usize| {
        Some(TimerRef {
            namespace: "snapshot".into(),
            target: Some(timer_ref::Target::Key(format!("timer-{index}"))),
        })
    };
    for index in acknowledged.drain(..) {
        let found = get(&mut client, by_key(index)).await;
        assert!(found.is_ok(), "acknowledged timer-{index} lost: {found:?}");
    }
    let status = get(&mut client, by_key(refused)).await.unwrap_err();
    assert_eq!(
        status.code(),
        tonic::Code::NotFound,
        "refused timer came back"
    );
}
