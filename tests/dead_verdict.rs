//! One node and a replica decide alike when an expiration is dead: both apply the verdict
//! `domain` decides (`DeliveryConfig::verdict`, and its SQL form in the replicas'
//! statements), never one of their own.
//!
//! The conversation, the same on both, with `--max-attempts 2` and `--max-buffered-total
//! 3`: five timers fire with no subscriber, so three wait and two are dead at once (the
//! buffer was full: dead with no attempt); then a subscriber that never acknowledges gets
//! each of the three twice (attempts 1 and 2, never a third), after which they are dead
//! too (attempts spent). Pending lists the same five dead, with the same attempts, on both.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::replica_set::ReplicaSet;
use common::tooling::skip_postgres;
use common::*;
use tickd::proto::timers_client::TimersClient;
use tickd::proto::PendingRequest;
use tonic::transport::Channel;

const NAMESPACE: &str = "verdict";
const MAX_ATTEMPTS: u32 = 2;
const BUFFERED_TOTAL: usize = 3;
const TIMERS: usize = 5;
/// The subscriber's ack timeout: each delivery comes again this long after it was sent.
const ACK_TIMEOUT_MS: u64 = 300;
const PATIENCE: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(50);

/// What the conversation comes to: the dead expirations' attempts, lowest first, and how
/// many deliveries each attempt number had.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    dead_attempts: Vec<u32>,
    deliveries_by_attempt: BTreeMap<u32, usize>,
}

/// What both backends must come to.
fn agreed() -> Outcome {
    Outcome {
        dead_attempts: vec![0, 0, MAX_ATTEMPTS, MAX_ATTEMPTS, MAX_ATTEMPTS],
        deliveries_by_attempt: BTreeMap::from([(1, BUFFERED_TOTAL), (2, BUFFERED_TOTAL)]),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_declares_dead_as_the_domain_decides() {
    let server = TestServer::start_with(config(|config| {
        config.max_attempts = MAX_ATTEMPTS;
        config.max_buffered_total = BUFFERED_TOTAL;
    }))
    .await;
    let outcome = conversation(server.client().await).await;
    assert_eq!(outcome, agreed(), "one node");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_declares_dead_as_the_domain_decides() {
    if skip_postgres("a_replica_declares_dead_as_the_domain_decides") {
        return;
    }
    let attempts = MAX_ATTEMPTS.to_string();
    let buffered = BUFFERED_TOTAL.to_string();
    let arguments = [
        "--max-attempts",
        attempts.as_str(),
        "--max-buffered-total",
        buffered.as_str(),
    ];
    let set = ReplicaSet::start(&["r1"], &arguments).await;
    let outcome = conversation(set.client("r1")).await;
    assert_eq!(outcome, agreed(), "a replica");
}

async fn conversation(mut client: TimersClient<Channel>) -> Outcome {
    register_all(&mut client, specs(NAMESPACE, TIMERS, 100)).await;
    // With no subscriber, the buffer takes three; the other two are dead as they fire.
    wait_for_dead(&mut client, TIMERS - BUFFERED_TOTAL).await;

    let mut stream = subscribe(&mut client, NAMESPACE, ACK_TIMEOUT_MS, 10).await;
    let mut deliveries_by_attempt = BTreeMap::new();
    let mut deliveries = 0;
    while deliveries < BUFFERED_TOTAL * MAX_ATTEMPTS as usize {
        let expiration = tokio::time::timeout(PATIENCE, next_expiration(&mut stream))
            .await
            .unwrap_or_else(|_| panic!("{deliveries} deliveries came, then none"));
        *deliveries_by_attempt.entry(expiration.attempt).or_insert(0) += 1;
        deliveries += 1;
    }
    let dead_attempts = wait_for_dead(&mut client, TIMERS).await;
    // None comes a third time: dead is dead (an ack timeout's worth of quiet, and more).
    let third = tokio::time::timeout(
        Duration::from_millis(ACK_TIMEOUT_MS * 4),
        next_expiration(&mut stream),
    )
    .await;
    if let Ok(expiration) = third {
        *deliveries_by_attempt.entry(expiration.attempt).or_insert(0) += 1;
    }
    Outcome {
        dead_attempts,
        deliveries_by_attempt,
    }
}

/// Waits until Pending lists `count` dead expirations; returns their attempts, sorted.
async fn wait_for_dead(client: &mut TimersClient<Channel>, count: usize) -> Vec<u32> {
    let listed = Arc::new(Mutex::new(Vec::new()));
    wait::eventually(
        &format!("{count} dead expirations"),
        PATIENCE,
        POLL,
        || {
            let mut client = client.clone();
            let listed = listed.clone();
            async move {
                let page = client
                    .pending(PendingRequest {
                        namespace: NAMESPACE.into(),
                        include_dead: true,
                        ..Default::default()
                    })
                    .await
                    .map_err(|status| status.to_string())?
                    .into_inner();
                let attempts: Vec<u32> = page
                    .dead_expirations
                    .iter()
                    .map(|dead| dead.attempt)
                    .collect();
                let found = (page.dead_count as usize, attempts.len());
                *listed.lock().unwrap() = attempts;
                match found {
                    (dead, shown) if dead == count && shown == count => Ok(()),
                    (dead, _) => Err(format!("{dead} dead: {:?}", listed.lock().unwrap())),
                }
            }
        },
        || async { String::new() },
    )
    .await;
    let mut listed = listed.lock().unwrap().clone();
    listed.sort_unstable();
    listed
}
