//! Durability: timers survive a restart on the same data directory; a torn append at the
//! log's end is cut off; snapshots keep the directory bounded. What recovery does with
//! damage is in `log_damage.rs`, the log's format and decoder in `log_format.rs`.

// Record literals end in `..Default::default()` so that new record fields do not break them.
#![allow(clippy::needless_update)]

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use common::data_dir::*;
use common::*;
use tickd::local::store::SyncMode;
use tonic::transport::Channel;
use tonic::Code;

use tickd::proto::timers_client::TimersClient;

/// A server on `dir` with the given sync mode (and the defaults otherwise), and a client.
async fn start_on(dir: &Path, sync: SyncMode) -> (TestServer, TimersClient<Channel>) {
    let dir = dir.to_owned();
    let server = TestServer::start_with(config(move |c| {
        c.data_dir = dir;
        c.sync = sync;
    }))
    .await;
    let client = server.client().await;
    (server, client)
}

/// Stops the server once its client has gone.
async fn stop(server: TestServer, client: TimersClient<Channel>) -> tickd::server::Stopped {
    drop(client);
    server.stop().await
}

/// id, namespace, key, deadline, payload, repeat, ttl, fired count.
type DurableView = (
    String,
    String,
    String,
    i128,
    Vec<u8>,
    Option<prost_types::Duration>,
    Option<prost_types::Duration>,
    u64,
);

/// What a restart must keep of a timer (not `remaining`, which moves with time).
fn durable_view(timer: &Timer) -> DurableView {
    (
        timer.id.clone(),
        timer.namespace.clone(),
        timer.key.clone(),
        unix_nanos(timer.deadline.as_ref().expect("deadline")),
        timer.payload.to_vec(),
        timer.repeat,
        timer.ttl,
        timer.fired_count,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_pending_timers_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (server, mut client) = start_on(&data, SyncMode::Always).await;

    let mut keyed = spec("orders", 3_600_000, b"close order 17");
    keyed.key = "order-17".into();
    let keyed = register(&mut client, keyed).await;
    // Registration answers carry no payload; the stored timer does.
    let keyed = get(&mut client, by_id("orders", &keyed.id)).await.unwrap();
    let plain = register(&mut client, spec("orders", 7_200_000, b"\x00\xffbinary")).await;
    let cancelled = register(&mut client, spec("orders", 3_600_000, b"cancel me")).await;
    assert!(cancel(&mut client, by_id("orders", &cancelled.id)).await);

    // A lease whose deadline a heartbeat moved.
    let lease = register(
        &mut client,
        TimerSpec {
            namespace: "workers".into(),
            key: "worker-1".into(),
            ttl: Some(millis(600_000)),
            payload: b"w1".to_vec().into(),
            ..Default::default()
        },
    )
    .await;
    let touched = client
        .touch(TouchRequest {
            timer: by_key("workers", "worker-1"),
            ttl: Some(millis(3_600_000)),
        })
        .await
        .expect("touch")
        .into_inner()
        .timer
        .unwrap();
    assert!(
        unix_nanos(touched.deadline.as_ref().unwrap())
            > unix_nanos(lease.deadline.as_ref().unwrap())
    );

    // A repeating timer that has fired once (and was acknowledged).
    let repeating = register(
        &mut client,
        TimerSpec {
            repeat: Some(millis(3_600_000)),
            ..spec("jobs", 50, b"hourly")
        },
    )
    .await;
    let mut stream = subscribe(&mut client, "jobs", 30_000, 10).await;
    let fired = within(next_expiration(&mut stream)).await;
    assert_eq!(fired.timer.as_ref().unwrap().id, repeating.id);
    ack(&mut client, "jobs", vec![fired.delivery_id.clone()]).await;
    let repeating = get(&mut client, by_id("jobs", &repeating.id))
        .await
        .unwrap();
    assert_eq!(repeating.fired_count, 1);

    let before = list_pending(&mut client, "").await;
    assert_eq!(
        before.len(),
        4,
        "keyed, plain, lease, repeating: {before:?}"
    );
    assert!(!before.contains_key(&cancelled.id));
    drop(stream);
    stop(server, client).await;

    let (server, mut client) = start_on(&data, SyncMode::Always).await;
    let after = list_pending(&mut client, "").await;
    let view =
        |timers: &BTreeMap<String, Timer>| timers.values().map(durable_view).collect::<Vec<_>>();
    assert_eq!(
        view(&after),
        view(&before),
        "the same timers, field for field"
    );

    assert_eq!(durable_view(&after[&keyed.id]), durable_view(&keyed));
    assert_eq!(after[&plain.id].payload.as_ref(), b"\x00\xffbinary");
    let by_key_after = get(&mut client, by_key("orders", "order-17"))
        .await
        .unwrap();
    assert_eq!(by_key_after.id, keyed.id, "the key index is rebuilt");
    let lease_after = get(&mut client, by_key("workers", "worker-1"))
        .await
        .unwrap();
    assert_eq!(
        lease_after.deadline, touched.deadline,
        "the touched deadline, not the first"
    );
    let repeating_after = &after[&repeating.id];
    assert_eq!(repeating_after.fired_count, 1);
    assert_eq!(
        repeating_after.deadline, repeating.deadline,
        "the re-armed deadline"
    );
    let status = get(&mut client, by_id("orders", &cancelled.id))
        .await
        .unwrap_err();
    assert_eq!(
        status.code(),
        Code::NotFound,
        "a cancelled timer stays cancelled"
    );

    // New ids never reuse old ones (the cancelled one included).
    let old_ids: HashSet<String> = before
        .keys()
        .cloned()
        .chain([cancelled.id.clone()])
        .collect();
    for _ in 0..20 {
        let fresh = register(&mut client, spec("orders", 3_600_000, b"new")).await;
        assert!(!old_ids.contains(&fresh.id), "id {} issued again", fresh.id);
    }
    stop(server, client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_passed_while_down_fire_at_once_marked_late() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (server, mut client) = start_on(&data, SyncMode::Always).await;
    let mut due = HashSet::new();
    for index in 0..3 {
        let timer = register(
            &mut client,
            spec("late", 800, format!("due-{index}").as_bytes()),
        )
        .await;
        due.insert(timer.id);
    }
    let later = register(&mut client, spec("late", 3_600_000, b"not yet")).await;
    stop(server, client).await;

    // The server is down while the deadlines pass: that is the scenario.
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    let restarted = Instant::now();
    let (server, mut client) = start_on(&data, SyncMode::Always).await;
    let mut stream = subscribe(&mut client, "late", 30_000, 100).await;
    let mut seen = HashSet::new();
    while seen.len() < due.len() {
        let expiration = within(next_expiration(&mut stream)).await;
        let timer = expiration.timer.as_ref().unwrap();
        assert!(
            due.contains(&timer.id),
            "only the overdue timers fire: {expiration:?}"
        );
        assert!(
            expiration.late,
            "fired after a restart past its deadline: late"
        );
        assert!(
            unix_nanos(expiration.fired_at.as_ref().unwrap())
                >= unix_nanos(timer.deadline.as_ref().unwrap()),
            "never early"
        );
        seen.insert(timer.id.clone());
        ack(&mut client, "late", vec![expiration.delivery_id]).await;
    }
    assert!(
        restarted.elapsed() < Duration::from_secs(5),
        "delivered at once after start-up, took {:?}",
        restarted.elapsed()
    );
    let pending = list_pending(&mut client, "late").await;
    assert_eq!(pending.keys().collect::<Vec<_>>(), vec![&later.id]);
    assert_eq!(pending[&later.id].fired_count, 0);
    drop(stream);
    stop(server, client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_expirations_come_back_after_restart_acked_ones_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (server, mut client) = start_on(&data, SyncMode::Always).await;
    let acked = register(&mut client, spec("redo", 0, b"acked")).await;
    let unacked = register(&mut client, spec("redo", 0, b"unacked")).await;
    let mut stream = subscribe(&mut client, "redo", 60_000, 10).await;
    let mut delivered = BTreeMap::new();
    while delivered.len() < 2 {
        let expiration = within(next_expiration(&mut stream)).await;
        delivered.insert(expiration.timer.as_ref().unwrap().id.clone(), expiration);
    }
    let answer = ack(
        &mut client,
        "redo",
        vec![delivered[&acked.id].delivery_id.clone()],
    )
    .await;
    assert_eq!(answer.acknowledged, 1);
    drop(stream);
    stop(server, client).await;

    let (server, mut client) = start_on(&data, SyncMode::Always).await;
    let mut stream = subscribe(&mut client, "redo", 60_000, 10).await;
    // Registered after the restart, so it fires after anything recovered: once it arrives,
    // whatever was coming back has come back.
    let marker = register(&mut client, spec("redo", 0, b"marker")).await;
    let mut after = Vec::new();
    loop {
        let expiration = within(next_expiration(&mut stream)).await;
        let id = expiration.timer.as_ref().unwrap().id.clone();
        ack(&mut client, "redo", vec![expiration.delivery_id.clone()]).await;
        after.push(expiration);
        if id == marker.id {
            break;
        }
    }
    let ids: Vec<&str> = after
        .iter()
        .map(|e| e.timer.as_ref().unwrap().id.as_str())
        .collect();
    assert_eq!(
        ids,
        vec![unacked.id.as_str(), marker.id.as_str()],
        "the unacked one again, the acked one never"
    );
    let again = &after[0];
    assert_eq!(again.timer.as_ref().unwrap().payload.as_ref(), b"unacked");
    assert_eq!(
        again.timer.as_ref().unwrap().fired_count,
        1,
        "the same firing, not a new one"
    );
    drop(stream);
    stop(server, client).await;

    // Now everything was acknowledged: a third start delivers nothing before a new marker.
    assert_a_new_marker_fires_first(&data, "redo", "nothing acknowledged came back").await;
}

/// Starts on `data` again, and checks that a timer registered after the start is the first
/// expiration of `namespace`: nothing was left to come back.
async fn assert_a_new_marker_fires_first(data: &Path, namespace: &str, why: &str) {
    let (server, mut client) = start_on(data, SyncMode::Always).await;
    let mut stream = subscribe(&mut client, namespace, 60_000, 10).await;
    let marker = register(&mut client, spec(namespace, 0, b"marker")).await;
    let first = within(next_expiration(&mut stream)).await;
    assert_eq!(timer_id(&first), marker.id, "{why}");
    drop(stream);
    stop(server, client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_acked_expirations_do_not_come_back_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (server, mut client) = start_on(&data, SyncMode::Always).await;
    let mut stream = client
        .subscribe(SubscribeRequest {
            namespace: "once".into(),
            auto_ack: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let fired = register(&mut client, spec("once", 0, b"at most once")).await;
    let received = within(next_expiration(&mut stream)).await;
    assert_eq!(received.timer.unwrap().id, fired.id);
    drop(stream);
    stop(server, client).await;

    assert_a_new_marker_fires_first(
        &data,
        "once",
        "an auto-acknowledged expiration was delivered again after a restart",
    )
    .await;
}

/// The ids of the expirations on `stream` until `count` distinct ones came.
async fn distinct_ids(
    stream: &mut tonic::Streaming<SubscribeResponse>,
    count: usize,
) -> HashSet<String> {
    let mut ids = HashSet::new();
    while ids.len() < count {
        ids.insert(timer_id(&within(next_expiration(stream)).await));
    }
    ids
}

/// Registers `count` timers one after another (so the log holds them in this order).
async fn register_sequence(
    client: &mut TimersClient<Channel>,
    namespace: &str,
    count: usize,
) -> Vec<String> {
    let mut ids = Vec::new();
    for index in 0..count {
        let timer = register(
            client,
            spec(namespace, 3_600_000, format!("timer {index}").as_bytes()),
        )
        .await;
        ids.push(timer.id);
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torn_tail_is_cut_off_and_everything_before_it_kept() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (server, mut client) = start_on(&data, SyncMode::Always).await;
    let ids = register_sequence(&mut client, "torn", 20).await;
    stop(server, client).await;

    let newest = segments(&data).pop().expect("a segment");
    let length = std::fs::metadata(&newest).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap();
    file.set_len(length - 3).unwrap();
    drop(file);

    let (server, mut client) = start_on(&data, SyncMode::Always).await;
    let pending: Vec<String> = list_pending(&mut client, "torn")
        .await
        .into_keys()
        .collect();
    assert_eq!(
        pending,
        ids[..19].to_vec(),
        "all but the torn last registration"
    );
    // The server works normally on top of the repaired log, and keeps working across restarts.
    let extra = register(&mut client, spec("torn", 3_600_000, b"after repair")).await;
    stop(server, client).await;

    let (server, mut client) = start_on(&data, SyncMode::Always).await;
    let pending = list_pending(&mut client, "torn").await;
    assert_eq!(pending.len(), 20);
    assert!(pending.contains_key(&extra.id));
    stop(server, client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_keep_the_data_dir_bounded_under_churn() {
    const SNAPSHOT_AFTER: usize = 256 * 1024;
    const KEPT: usize = 1_000;
    const CHURN: usize = 100_000;
    const BATCH: usize = 1_000;
    const PAYLOAD: usize = 100;
    // At any moment the directory holds at most: the newest snapshot (the kept timers plus
    // at most one batch of churn, ~130 bytes a record: ~0.3 MiB) and the log written since it
    // (the threshold plus one batch of registrations and cancels: ~0.4 MiB), and while the
    // next snapshot is being written, as much again. 2 MiB leaves room to spare, and is
    // far below the ~13 MiB the history of registrations and cancels adds up to.
    const BOUND: u64 = 2 * 1024 * 1024;

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let start = || {
        let data_dir = data.clone();
        TestServer::start_with(config(move |c| {
            c.data_dir = data_dir;
            c.snapshot_after_bytes = SNAPSHOT_AFTER;
        }))
    };
    let server = start().await;
    let mut client = server.client().await;
    let payload = vec![0x5a; PAYLOAD];
    let register_batch = |client: &mut TimersClient<Channel>, namespace: &'static str| {
        let mut client = client.clone();
        let timers = (0..BATCH)
            .map(|_| spec(namespace, 3_600_000, &payload))
            .collect();
        async move { register_all(&mut client, timers).await }
    };
    let kept: HashSet<String> = register_batch(&mut client, "keep")
        .await
        .into_iter()
        .collect();
    assert_eq!(kept.len(), KEPT);
    // Fired but never acknowledged: their records are in the first segment, which compaction
    // deletes, so only the snapshots carry them across.
    let mut unacked = HashSet::new();
    for index in 0..10 {
        unacked.insert(
            register(
                &mut client,
                spec("fired", 0, format!("unacked {index}").as_bytes()),
            )
            .await
            .id,
        );
    }
    let mut stream = subscribe(&mut client, "fired", 600_000, 100).await;
    let delivered = distinct_ids(&mut stream, unacked.len()).await;
    assert_eq!(delivered, unacked);

    let started = Instant::now();
    let mut largest = 0;
    let mut history_bytes = 0u64;
    for _ in 0..CHURN / BATCH {
        let ids = register_batch(&mut client, "churn").await;
        history_bytes += (ids.len() * (PAYLOAD + 40)) as u64;
        // Cancels from many callers at once share fsyncs (group commit).
        let mut cancels = tokio::task::JoinSet::new();
        for chunk in ids.chunks(BATCH / 100) {
            let mut client = client.clone();
            let chunk = chunk.to_vec();
            cancels.spawn(async move {
                for id in chunk {
                    assert!(cancel(&mut client, by_id("churn", &id)).await);
                }
            });
        }
        while let Some(result) = cancels.join_next().await {
            result.unwrap();
        }
        history_bytes += (ids.len() * 30) as u64;
        let size = directory_bytes(&data);
        largest = largest.max(size);
        assert!(
            size < BOUND,
            "data dir at {size} bytes after {history_bytes} bytes of history"
        );
    }
    eprintln!(
        "churned {CHURN} timers in {:?}: data dir at most {largest} bytes, history ~{history_bytes} bytes",
        started.elapsed()
    );
    assert!(
        history_bytes > 10 * 1024 * 1024,
        "the history is far larger than the bound"
    );
    let snapshots = std::fs::read_dir(&data)
        .unwrap()
        .filter(|entry| {
            entry
                .as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|e| e == "snapshot")
        })
        .count();
    assert_eq!(snapshots, 1, "one snapshot, the older ones deleted");
    assert_eq!(pending_count(&mut client, "churn").await, 0);
    assert!(
        !data.join(format!("{:020}.log", 1)).exists(),
        "the first segment was compacted away"
    );
    drop(stream);
    stop(server, client).await;

    let server = start().await;
    let mut client = server.client().await;
    let pending = list_pending(&mut client, "").await;
    let pending_ids: HashSet<String> = pending.keys().cloned().collect();
    assert_eq!(pending_ids, kept, "exactly the kept timers");
    assert!(pending
        .values()
        .all(|timer| timer.payload.as_ref() == payload.as_slice()));
    let mut stream = subscribe(&mut client, "fired", 600_000, 100).await;
    let again = distinct_ids(&mut stream, unacked.len()).await;
    assert_eq!(
        again, unacked,
        "the unacknowledged expirations survive compaction"
    );
    drop(stream);
    stop(server, client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_none_writes_nothing_and_restarts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (server, mut client) = start_on(&data, SyncMode::None).await;
    register_sequence(&mut client, "mem", 10).await;
    assert_eq!(pending_count(&mut client, "mem").await, 10);
    let stopped = stop(server, client).await;
    assert_eq!(stopped.pending_timers, 10);
    assert_eq!(
        directory_bytes(&data),
        0,
        "nothing written to {}",
        data.display()
    );

    let (server, mut client) = start_on(&data, SyncMode::None).await;
    assert_eq!(
        pending_count(&mut client, "mem").await,
        0,
        "memory only: gone"
    );
    stop(server, client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_interval_keeps_timers_across_a_clean_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (server, mut client) = start_on(&data, SyncMode::Interval).await;
    let ids = register_sequence(&mut client, "interval", 50).await;
    let cancelled = ids[7].clone();
    assert!(cancel(&mut client, by_id("interval", &cancelled)).await);
    stop(server, client).await;

    let (server, mut client) = start_on(&data, SyncMode::Interval).await;
    let pending: Vec<String> = list_pending(&mut client, "interval")
        .await
        .into_keys()
        .collect();
    let expected: Vec<String> = ids.into_iter().filter(|id| *id != cancelled).collect();
    assert_eq!(pending, expected);
    stop(server, client).await;
}
