//! Delivery across restarts of one `tickd` process on its data directory: a delivery id
//! names one delivery for the life of the directory, so a late ack from before a restart
//! settles nothing; attempts are counted across SIGTERM and SIGKILL, so an expiration that
//! is delivered and never acknowledged, however often tickd dies meanwhile, ends dead after
//! `--max-attempts` deliveries. The client here outlives every restart of the server.

mod common;

use std::path::Path;

use common::daemon::{tickd_command, Daemon};
use common::*;
use tickd::proto::timers_client::TimersClient;
use tonic::transport::Channel;

const NAMESPACE: &str = "restarts";
/// Long enough that no delivery in these tests is redelivered for want of an ack while
/// the process lives: every redelivery seen comes from a restart.
const ACK_TIMEOUT_MS: u64 = 600_000;
const MAX_ATTEMPTS: u32 = 3;

fn start(data_dir: &Path) -> Daemon {
    let mut command = tickd_command();
    command
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--max-attempts", &MAX_ATTEMPTS.to_string()])
        .args(["--metrics-listen", "127.0.0.1:0"]);
    Daemon::start(command)
}

async fn client_of(daemon: &Daemon) -> TimersClient<Channel> {
    TimersClient::connect(format!("http://{}", daemon.addr))
        .await
        .expect("connect")
}

/// Stops the daemon the way the test names: SIGTERM (waiting for its clean exit) or SIGKILL.
fn stop(daemon: &mut Daemon, how: &str) {
    match how {
        "TERM" => {
            daemon.signal("TERM");
            let status = daemon.wait_for_exit(PATIENCE);
            assert!(
                status.success(),
                "a clean stop: {status}\n{}",
                daemon.log_text()
            );
        }
        _ => daemon.kill(),
    }
}

/// The sequence, with no shell: b is delivered and left unacknowledged, tickd
/// restarts, four more timers fire, and the ack meant for b arrives late. It must settle
/// nothing (answered as unknown), b must come back as attempt 2, and every new expiration
/// must be delivered and then acknowledgeable.
async fn a_late_ack_from_before_a_restart_settles_nothing(how: &str) {
    let data_dir = tempfile::tempdir().unwrap();
    let mut daemon = start(data_dir.path());
    let mut client = client_of(&daemon).await;
    register(&mut client, spec(NAMESPACE, 50, b"b")).await;
    let mut stream = subscribe(&mut client, NAMESPACE, ACK_TIMEOUT_MS, 100).await;
    let first = within(next_expiration(&mut stream)).await;
    assert_eq!(first.attempt, 1);
    let late_ack = first.delivery_id.clone();
    drop(stream);

    stop(&mut daemon, how);
    let daemon = start(data_dir.path());
    let mut client = client_of(&daemon).await;
    let mut stream = subscribe(&mut client, NAMESPACE, ACK_TIMEOUT_MS, 100).await;
    let b_again = within(next_expiration(&mut stream)).await;
    assert_eq!(&b_again.timer.as_ref().unwrap().payload[..], b"b");
    assert_eq!(
        b_again.attempt, 2,
        "delivered once before the {how} restart, so this is the second attempt"
    );
    let specs = (1..=4)
        .map(|index| spec(NAMESPACE, 50, format!("c{index}").as_bytes()))
        .collect();
    register_all(&mut client, specs).await;
    let mut delivered = vec![b_again.delivery_id.clone()];
    for _ in 0..4 {
        let expiration = within(next_expiration(&mut stream)).await;
        assert_eq!(expiration.attempt, 1);
        delivered.push(expiration.delivery_id);
    }
    assert!(
        !delivered.contains(&late_ack),
        "a delivery id of the earlier boot ({late_ack}) was handed out again: {delivered:?}"
    );

    let answer = ack(&mut client, NAMESPACE, vec![late_ack.clone()]).await;
    assert_eq!(answer.acknowledged, 0, "the late ack settled something");
    assert_eq!(answer.unknown, vec![late_ack]);
    // Nothing was settled by it: all five are still waiting for their own acks.
    let answer = ack(&mut client, NAMESPACE, delivered.clone()).await;
    assert_eq!(answer.acknowledged, 5, "unknown: {:?}", answer.unknown);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_late_ack_from_before_a_sigterm_restart_settles_nothing() {
    a_late_ack_from_before_a_restart_settles_nothing("TERM").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_late_ack_from_before_a_sigkill_settles_nothing() {
    a_late_ack_from_before_a_restart_settles_nothing("KILL").await;
}

/// An expiration delivered and never acknowledged while tickd is killed after each
/// delivery (what a payload that crashes tickd as it is delivered amounts to) comes back
/// with its attempts counted, and is dead after `--max-attempts` deliveries: the crash
/// loop ends by itself. Killed by SIGTERM and SIGKILL in turn.
#[tokio::test(flavor = "multi_thread")]
async fn a_delivery_followed_by_a_crash_every_time_ends_dead_after_max_attempts() {
    let data_dir = tempfile::tempdir().unwrap();
    let mut daemon = start(data_dir.path());
    let mut client = client_of(&daemon).await;
    let poison = register(&mut client, spec(NAMESPACE, 50, b"poison")).await;
    for (attempt, how) in (1..=MAX_ATTEMPTS).zip(["KILL", "TERM", "KILL"].iter().cycle()) {
        let mut stream = subscribe(&mut client, NAMESPACE, ACK_TIMEOUT_MS, 100).await;
        let expiration = within(next_expiration(&mut stream)).await;
        assert_eq!(timer_id(&expiration), poison.id);
        assert_eq!(expiration.attempt, attempt, "counted across every restart");
        drop(stream);
        stop(&mut daemon, how);
        daemon = start(data_dir.path());
        client = client_of(&daemon).await;
    }
    let pending = pending_with_dead(&mut client, NAMESPACE).await;
    assert_eq!(pending.dead_count, 1, "out of attempts: dead");
    let dead = &pending.dead_expirations[0];
    assert_eq!(timer_id(dead), poison.id);
    assert_eq!(dead.attempt, MAX_ATTEMPTS);

    // Dead, it is not delivered again: a timer registered after it is the next delivery.
    // Left unacknowledged, it fills this subscriber's one place.
    let mut stream = subscribe(&mut client, NAMESPACE, ACK_TIMEOUT_MS, 1).await;
    let marker = register(&mut client, spec(NAMESPACE, 50, b"marker")).await;
    let next = within(next_expiration(&mut stream)).await;
    assert_eq!(timer_id(&next), marker.id, "the dead one came back");

    // Redriven with no subscriber that has room, its attempts start afresh, and stay so
    // across a restart.
    let redriven = client
        .redrive(RedriveRequest {
            namespace: NAMESPACE.into(),
            delivery_ids: vec![dead.delivery_id.clone()],
        })
        .await
        .expect("redrive")
        .into_inner();
    assert_eq!(redriven.redriven, 1);
    drop(stream);
    stop(&mut daemon, "KILL");
    let daemon = start(data_dir.path());
    let mut client = client_of(&daemon).await;
    let mut stream = subscribe(&mut client, NAMESPACE, ACK_TIMEOUT_MS, 100).await;
    let mut attempts = Vec::new();
    for _ in 0..2 {
        let expiration = within(next_expiration(&mut stream)).await;
        attempts.push((
            expiration.timer.unwrap().payload.to_vec(),
            expiration.attempt,
        ));
    }
    attempts.sort();
    assert_eq!(
        attempts,
        [(b"marker".to_vec(), 2), (b"poison".to_vec(), 1)],
        "the redriven one starts again at 1; the marker, delivered once, comes back as 2"
    );
}

/// Delivery ids never repeat across boots: those of earlier boots, acknowledged or not,
/// name nothing in this one, to Ack or to Redrive.
#[tokio::test(flavor = "multi_thread")]
async fn ids_of_an_earlier_boot_name_nothing_in_this_one() {
    let data_dir = tempfile::tempdir().unwrap();
    let mut daemon = start(data_dir.path());
    let mut client = client_of(&daemon).await;
    let mut seen = std::collections::HashSet::new();
    for boot in 0..3 {
        register(
            &mut client,
            spec(NAMESPACE, 10, format!("boot {boot}").as_bytes()),
        )
        .await;
        let mut stream = subscribe(&mut client, NAMESPACE, ACK_TIMEOUT_MS, 100).await;
        let expiration = within(next_expiration(&mut stream)).await;
        assert!(
            seen.insert(expiration.delivery_id.clone()),
            "delivery id {} seen in an earlier boot",
            expiration.delivery_id
        );
        let answer = ack(&mut client, NAMESPACE, vec![expiration.delivery_id]).await;
        assert_eq!(answer.acknowledged, 1);
        drop(stream);
        stop(&mut daemon, "TERM");
        daemon = start(data_dir.path());
        client = client_of(&daemon).await;
    }
    let stale: Vec<String> = seen.into_iter().collect();
    let redriven = client
        .redrive(RedriveRequest {
            namespace: NAMESPACE.into(),
            delivery_ids: stale.clone(),
        })
        .await
        .expect("redrive")
        .into_inner();
    assert_eq!(redriven.redriven, 0);
    let answer = ack(&mut client, NAMESPACE, stale.clone()).await;
    assert_eq!(
        (answer.acknowledged, answer.unknown.len()),
        (0, stale.len())
    );
    assert_eq!(daemon.count("panicked"), 0);
}
