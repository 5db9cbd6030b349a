//! A subscriber that goes away with deliveries still in tickd's buffer for it: what its
//! connection carried may have reached it, so it comes back as the next attempt; what
//! never left tickd's buffer comes back as the same attempt. On one node and on a replica
//! of the replicated backend: a client that stops reading after five deliveries, with a
//! thousand 4 KiB expirations due (far more than the connection's buffers hold), then
//! drops its stream; a second subscriber then gets every one, exactly once.

mod common;

use std::collections::BTreeMap;

use common::replica_set::ReplicaSet;
use common::tooling::skip_postgres;
use common::*;
use tickd::proto::timers_client::TimersClient;
use tonic::transport::Channel;

const NAMESPACE: &str = "dropped";
const EXPIRATIONS: usize = 1_000;
/// Each expiration's payload: a thousand of them are 4 MB, beyond what HTTP/2's windows
/// and the server's send buffer take for a client that stopped reading.
const PAYLOAD_BYTES: usize = 4_096;
/// Deliveries the first subscriber reads before it stops reading.
const READ_BEFORE_DROPPING: usize = 5;

async fn a_dropped_stream_refunds_only_what_never_left(mut client: TimersClient<Channel>) {
    let payload = vec![b'x'; PAYLOAD_BYTES];
    let timers = (0..EXPIRATIONS)
        .map(|_| spec(NAMESPACE, 200, &payload))
        .collect();
    register_all(&mut client, timers).await;

    // Room for every one: tickd hands them all to this stream at once.
    let mut first = subscribe(&mut client, NAMESPACE, 60_000, EXPIRATIONS as u32).await;
    let mut seen = Vec::new();
    for _ in 0..READ_BEFORE_DROPPING {
        let expiration = within(next_expiration(&mut first)).await;
        assert_eq!(expiration.attempt, 1);
        seen.push(timer_id(&expiration));
    }
    // It never reads again, and goes: what tickd still held for it comes back.
    drop(first);

    let mut second = subscribe(&mut client, NAMESPACE, 60_000, EXPIRATIONS as u32).await;
    let mut attempts: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    while attempts.len() < EXPIRATIONS {
        let expiration = within(next_expiration(&mut second)).await;
        let id = timer_id(&expiration);
        attempts.entry(id).or_default().push(expiration.attempt);
        ack(&mut client, NAMESPACE, vec![expiration.delivery_id]).await;
    }
    let again: Vec<_> = attempts.iter().filter(|(_, seen)| seen.len() > 1).collect();
    assert!(again.is_empty(), "delivered twice to the second: {again:?}");
    // Those the first client read may not come back as the attempt it saw.
    for id in &seen {
        assert_eq!(
            attempts[id],
            [2],
            "a delivery the client read came back as the same attempt"
        );
    }
    let unspent = attempts.values().filter(|seen| seen[0] == 1).count();
    let spent = attempts.values().filter(|seen| seen[0] == 2).count();
    assert_eq!(unspent + spent, EXPIRATIONS, "{attempts:?}");
    // Most never left tickd's buffer: they spent no attempt.
    assert!(
        unspent > 0,
        "every one came back as attempt 2: none was refunded"
    );
    eprintln!("{unspent} came back as attempt 1 (never sent), {spent} as attempt 2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_refunds_what_a_dropped_stream_never_took() {
    let server = TestServer::start().await;
    a_dropped_stream_refunds_only_what_never_left(server.client().await).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_refunds_what_a_dropped_stream_never_took() {
    if skip_postgres("a_replica_refunds_what_a_dropped_stream_never_took") {
        return;
    }
    let set = ReplicaSet::start(&["solo"], &[]).await;
    set.eventually("the replica owns partitions", || {
        set.each_owns_a_partition(&["solo"])
    })
    .await;
    a_dropped_stream_refunds_only_what_never_left(set.client("solo")).await;
}
