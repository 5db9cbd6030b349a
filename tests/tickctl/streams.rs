//! `watch` and `consume` across a tickd restart (a real `tickd` process, stopped with
//! SIGTERM and started again on the same port and data directory): they subscribe again
//! with back-off, unless `--no-reconnect`; and `consume --no-ack`, whose deliveries
//! `tickctl ack` acknowledges while it runs.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::common::daemon::{tickd_command_listening_on, Daemon};
use crate::common::TestServer;
use crate::support::{add, endpoint, stdout, Running};

/// A tickd on `data_dir`, listening on `listen` (port 0: any).
fn start_tickd(data_dir: &Path, listen: &str) -> Daemon {
    let mut command = tickd_command_listening_on(listen);
    command
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--metrics-listen", "127.0.0.1:0"]);
    Daemon::start(command)
}

/// SIGTERM, and the drain to its end (exit 0).
fn stop_tickd(daemon: &mut Daemon) {
    daemon.signal("TERM");
    let status = daemon.wait_for_exit(Duration::from_secs(30));
    assert!(status.success(), "{status}; log:\n{}", daemon.log_text());
}

/// Waits for the stderr line that says the stream is (again) subscribed.
async fn subscribed(running: &mut Running, announcement: &str) {
    loop {
        let line = running.stderr_line().await;
        if line.contains(announcement) {
            return;
        }
        assert!(line.contains("subscription lost"), "unexpected: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_and_consume_keep_receiving_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut tickd = start_tickd(dir.path(), "127.0.0.1:0");
    let addr: SocketAddr = tickd.addr;
    let endpoint = format!("http://{addr}");
    // Acknowledged as sent (--auto-ack), so none is left awaiting an ack when tickd stops,
    // whenever that is: the next delivery after the restart is the next timer.
    let mut consumer = Running::start(
        &endpoint,
        &[
            "consume",
            "-n",
            "r",
            "--count",
            "2",
            "--auto-ack",
            "-o",
            "json",
        ],
    );
    let mut watcher = Running::start(&endpoint, &["watch", "-n", "r", "--count", "2"]);
    subscribed(&mut consumer, "consuming namespace r").await;
    subscribed(&mut watcher, "watching namespace r").await;
    let before = add(&endpoint, &["-n", "r", "--delay", "1ms"]).await;
    let first: Value = serde_json::from_str(&consumer.stdout_line().await).unwrap();
    assert_eq!(first["timer"]["id"], before.as_str());
    assert!(watcher.stdout_line().await.contains(&before));

    stop_tickd(&mut tickd);
    for running in [&mut consumer, &mut watcher] {
        let lost = running.stderr_line().await;
        assert!(
            lost.contains("subscription lost (UNAVAILABLE")
                && lost.contains("subscribing again in"),
            "{lost}"
        );
    }
    let _tickd = start_tickd(dir.path(), &addr.to_string());
    subscribed(&mut consumer, "consuming namespace r").await;
    subscribed(&mut watcher, "watching namespace r").await;

    let after = add(&endpoint, &["-n", "r", "--delay", "1ms"]).await;
    // The next delivery is the new timer, not the first again.
    let second: Value = serde_json::from_str(&consumer.stdout_line().await).unwrap();
    assert_eq!(second["timer"]["id"], after.as_str());
    assert!(watcher.stdout_line().await.contains(&after));
    assert_eq!(consumer.finished().await, 0);
    assert_eq!(watcher.finished().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_reconnect_exits_when_tickd_stops() {
    let dir = tempfile::tempdir().unwrap();
    let mut tickd = start_tickd(dir.path(), "127.0.0.1:0");
    let endpoint = format!("http://{}", tickd.addr);
    let mut watcher = Running::start(&endpoint, &["watch", "-n", "r", "--no-reconnect"]);
    subscribed(&mut watcher, "watching namespace r").await;
    stop_tickd(&mut tickd);
    let line = watcher.stderr_line().await;
    assert!(line.starts_with("tickctl: UNAVAILABLE: "), "{line}");
    assert_eq!(
        watcher.finished().await,
        3,
        "UNAVAILABLE exits as unreachable"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_no_ack_leaves_acknowledging_to_ack() {
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    let mut consumer = Running::start(
        &endpoint,
        &["consume", "-n", "later", "--no-ack", "-o", "json"],
    );
    subscribed(&mut consumer, "consuming namespace later").await;
    let id = add(&endpoint, &["-n", "later", "--delay", "1ms"]).await;
    let delivery: Value = serde_json::from_str(&consumer.stdout_line().await).unwrap();
    assert_eq!(delivery["timer"]["id"], id.as_str());
    // Printed, not acknowledged: `tickctl ack` acknowledges it while consume runs.
    let delivery_id = delivery["deliveryId"].as_str().unwrap();
    assert_eq!(
        stdout(&endpoint, &["ack", "-n", "later", delivery_id]).await,
        "acknowledged 1\n"
    );
    drop(consumer);
    server.stop().await;
}
