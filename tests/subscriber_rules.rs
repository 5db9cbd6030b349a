//! A subscriber that leaves its ack timeout and window to the server is held to the same
//! values on one node and on a replica: both backends apply what `domain` decided from
//! `--ack-timeout` and `--max-unacked`, and decide nothing of their own.
//!
//! The conversation, the same on both: subscriber A asks for nothing, reads and never
//! acknowledges; once it holds its window of first attempts, subscriber B (a wide window,
//! a long ack timeout, acknowledging everything) joins and gets every other expiration on
//! its first attempt; and with A still subscribed, A's deliveries come again (attempt 2, to
//! A or B) once `--ack-timeout` has passed. A window other than the flag's shows as
//! another split of first attempts; an ack timeout other than the flag's (the built-in
//! 30 s) as a redelivery that does not come within [`RECEIVE_TIMEOUT`].

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::replica_set::ReplicaSet;
use common::tooling::skip_postgres;
use common::*;
use tickd::proto::timers_client::TimersClient;
use tonic::transport::Channel;

/// The server's default window, which A gets by asking for none.
const WINDOW: usize = 5;
/// The server's default ack timeout, which A gets by asking for none.
const ACK_TIMEOUT: Duration = Duration::from_secs(2);
/// Expirations registered: more than A's window by far.
const EXPIRATIONS: usize = 20;
/// How long one receive may wait: past the flag's ack timeout, short of the built-in 30 s.
const RECEIVE_TIMEOUT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_holds_a_subscriber_to_the_decided_rules() {
    let server = TestServer::start_with(config(|config| {
        config.ack_timeout = ACK_TIMEOUT;
        config.max_unacked = WINDOW;
    }))
    .await;
    held_to_the_decided_rules(server.client().await, server.client().await).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_holds_a_subscriber_to_the_decided_rules() {
    if skip_postgres("a_replica_holds_a_subscriber_to_the_decided_rules") {
        return;
    }
    let window = WINDOW.to_string();
    let arguments = ["--ack-timeout", "2s", "--max-unacked", window.as_str()];
    let set = ReplicaSet::start(&["r1"], &arguments).await;
    held_to_the_decided_rules(set.client("r1"), set.client("r1")).await;
}

async fn held_to_the_decided_rules(
    mut client_a: TimersClient<Channel>,
    mut client_b: TimersClient<Channel>,
) {
    const NAMESPACE: &str = "rules";
    // A asks for nothing: a window of 0 is "the server's", no ack timeout "the server's".
    let mut a = subscribe(&mut client_a, NAMESPACE, 0, 0).await;
    let ids = register_all(&mut client_b, specs(NAMESPACE, EXPIRATIONS, 200)).await;
    let mut held_by_a = BTreeSet::new();
    while held_by_a.len() < WINDOW {
        let expiration = within(next_expiration(&mut a), || {
            format!("A had {held_by_a:?} of its window of {WINDOW}")
        })
        .await;
        assert_eq!(
            expiration.attempt, 1,
            "A was sent a redelivery before its window filled"
        );
        held_by_a.insert(timer_id(&expiration));
    }

    let mut b = subscribe(&mut client_b, NAMESPACE, 600_000, 1_000).await;
    let mut first_attempts_of_b = BTreeSet::new();
    let mut came_again = Vec::new();
    while first_attempts_of_b.len() < EXPIRATIONS - WINDOW || came_again.is_empty() {
        let (on_b, expiration) = within(
            async {
                tokio::select! {
                    expiration = next_expiration(&mut a) => (false, expiration),
                    expiration = next_expiration(&mut b) => (true, expiration),
                }
            },
            || {
                format!(
                    "B had {} first attempts, {} redeliveries had come",
                    first_attempts_of_b.len(),
                    came_again.len()
                )
            },
        )
        .await;
        let id = timer_id(&expiration);
        match expiration.attempt {
            1 => {
                assert!(on_b, "A was sent {id} beyond its window");
                assert!(!held_by_a.contains(&id), "{id} was sent to A and to B");
                first_attempts_of_b.insert(id);
            }
            2 => {
                assert!(
                    held_by_a.contains(&id),
                    "{id} came again but A never held it"
                );
                came_again.push(id);
            }
            attempt => panic!("{id} came at attempt {attempt}"),
        }
        if on_b {
            let answer = ack(&mut client_b, NAMESPACE, vec![expiration.delivery_id]).await;
            assert!(
                answer.unknown.is_empty(),
                "B's ack of a delivery it holds was refused"
            );
        }
    }
    let mut everything: Vec<String> = held_by_a.into_iter().chain(first_attempts_of_b).collect();
    everything.sort();
    let mut registered = ids;
    registered.sort();
    assert_eq!(
        everything, registered,
        "A's window and B's first attempts are not the registrations"
    );
}

/// `receiving`, or a test failure saying how far it got if nothing came within
/// [`RECEIVE_TIMEOUT`].
async fn within<T>(
    receiving: impl std::future::Future<Output = T>,
    progress: impl FnOnce() -> String,
) -> T {
    match tokio::time::timeout(RECEIVE_TIMEOUT, receiving).await {
        Ok(received) => received,
        Err(_) => panic!("nothing came for {RECEIVE_TIMEOUT:?}: {}", progress()),
    }
}
