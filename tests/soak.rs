//! A bounded soak: a few minutes of steady churn (batches registered, some cancelled by key,
//! everything else fired, delivered to two sharing subscribers and acknowledged) against a
//! durable server (fsync always, small snapshot threshold so compaction runs), showing that
//! memory stays flat, the data directory stays bounded and nothing is lost.
//!
//! Not run by default (it takes minutes). Run it with:
//!
//! ```text
//! cargo test --release --test soak -- --ignored --nocapture
//! TICKD_SOAK_SECS=600 cargo test --release --test soak -- --ignored --nocapture
//! ```

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::data_dir::*;
use common::proc_status::*;
use common::*;
use tickd::proto::timers_client::TimersClient;
use tonic::transport::Channel;

#[derive(Default)]
struct Counts {
    /// Timers registered that should fire (the cancelled ones are not counted).
    fireable: AtomicU64,
    cancelled: AtomicU64,
    /// First deliveries received.
    received: AtomicU64,
    /// Deliveries with attempt > 1 (ack deadline missed: should not happen here).
    redelivered: AtomicU64,
    errors: AtomicU64,
}

/// Receives expirations and hands their delivery ids to an acker that acknowledges in batches.
async fn subscriber(channel: Channel, counts: Arc<Counts>, done: Arc<AtomicBool>) {
    let mut client = TimersClient::new(channel);
    let mut stream = subscribe(&mut client, "soak", 30_000, 10_000).await;
    let (ids, mut pending_ids) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut acker = client.clone();
    let acks = tokio::spawn(async move {
        while let Some(first) = pending_ids.recv().await {
            let mut batch = vec![first];
            while batch.len() < 1_000 {
                match pending_ids.try_recv() {
                    Ok(id) => batch.push(id),
                    Err(_) => break,
                }
            }
            ack(&mut acker, "soak", batch).await;
        }
    });
    while !done.load(Ordering::Relaxed) {
        let next = tokio::time::timeout(Duration::from_millis(200), stream.message()).await;
        let Ok(message) = next else { continue };
        let expiration = message
            .expect("subscription failed")
            .expect("subscription ended")
            .expiration
            .expect("expiration");
        if expiration.attempt == 1 {
            counts.received.fetch_add(1, Ordering::Relaxed);
        } else {
            counts.redelivered.fetch_add(1, Ordering::Relaxed);
        }
        let _ = ids.send(expiration.delivery_id);
    }
    drop(ids);
    acks.await.expect("acker");
}

/// Registers batches of short timers, and now and then keyed long ones it cancels by key.
async fn registrar(channel: Channel, seed: u64, counts: Arc<Counts>, stop: Arc<AtomicBool>) {
    let mut client = TimersClient::new(channel);
    let mut random = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move |bound: u64| {
        random = random
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (random >> 33) % bound
    };
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        round += 1;
        let timers: Vec<TimerSpec> = (0..50)
            .map(|_| spec("soak", 1 + next(300), &[0x5a; 32]))
            .collect();
        match client.new_timeouts(NewTimeoutsRequest { timers }).await {
            Ok(response) => {
                for result in response.into_inner().results {
                    match result.result {
                        Some(new_timeout_result::Result::Registered(_)) => {
                            counts.fireable.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            counts.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            Err(_) => {
                counts.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        if round.is_multiple_of(10) {
            for index in 0..10 {
                let key = format!("{seed}-{round}-{index}");
                let mut keyed = spec("soak", 3_600_000, b"cancel me");
                keyed.key = key.clone();
                register(&mut client, keyed).await;
                let cancelled = client
                    .cancel(CancelRequest {
                        timer: by_key("soak", &key),
                    })
                    .await
                    .expect("cancel")
                    .into_inner()
                    .cancelled;
                assert!(cancelled);
                counts.cancelled.fetch_add(1, Ordering::Relaxed);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "minutes long: cargo test --release --test soak -- --ignored --nocapture"]
async fn churn_for_minutes_with_flat_memory() {
    let secs: u64 = std::env::var("TICKD_SOAK_SECS")
        .ok()
        .and_then(|secs| secs.parse().ok())
        .unwrap_or(180);
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let server = TestServer::start_with(config(|c| {
        c.data_dir = data_dir.clone();
        c.snapshot_after_bytes = 4 << 20;
    }))
    .await;
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));

    let mut subscribers = Vec::new();
    for _ in 0..2 {
        let channel = server.channel().await;
        subscribers.push(tokio::spawn(subscriber(
            channel,
            counts.clone(),
            done.clone(),
        )));
    }
    let mut registrars = Vec::new();
    for seed in 0..4 {
        let channel = server.channel().await;
        registrars.push(tokio::spawn(registrar(
            channel,
            seed,
            counts.clone(),
            stop.clone(),
        )));
    }

    let started = Instant::now();
    let mut samples: Vec<(u64, u64)> = Vec::new();
    while started.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let elapsed = started.elapsed().as_secs();
        let rss = rss_bytes();
        samples.push((elapsed, rss));
        if elapsed.is_multiple_of(10) {
            eprintln!(
                "soak t={elapsed}s rss={}MiB data_dir={}MiB fireable={} received={} cancelled={}",
                rss >> 20,
                directory_bytes(&data_dir) >> 20,
                counts.fireable.load(Ordering::Relaxed),
                counts.received.load(Ordering::Relaxed),
                counts.cancelled.load(Ordering::Relaxed),
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    for task in registrars {
        task.await.expect("registrar");
    }
    let fireable = counts.fireable.load(Ordering::Relaxed);
    let drain_deadline = Instant::now() + Duration::from_secs(30);
    while counts.received.load(Ordering::Relaxed) < fireable && Instant::now() < drain_deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Let the last acks land.
    tokio::time::sleep(Duration::from_millis(500)).await;
    done.store(true, Ordering::Relaxed);
    for task in subscribers {
        task.await.expect("subscriber");
    }

    let received = counts.received.load(Ordering::Relaxed);
    let data_bytes = directory_bytes(&data_dir);
    eprintln!(
        "soak done: secs={secs} fireable={fireable} received={received} cancelled={} \
         redelivered={} errors={} data_dir={}MiB",
        counts.cancelled.load(Ordering::Relaxed),
        counts.redelivered.load(Ordering::Relaxed),
        counts.errors.load(Ordering::Relaxed),
        data_bytes >> 20
    );
    assert_eq!(counts.errors.load(Ordering::Relaxed), 0);
    assert!(fireable > 0);
    assert_eq!(received, fireable, "expirations lost");
    assert_eq!(counts.redelivered.load(Ordering::Relaxed), 0);
    let mut client = server.client().await;
    assert_eq!(pending_count(&mut client, "soak").await, 0);

    // Flat memory: the peak of the last quarter against the peak of the second quarter
    // (the first quarter is warm-up: allocator arenas, buffers reaching their working size).
    let peak = |from: f64, to: f64| {
        samples
            .iter()
            .filter(|(t, _)| (*t as f64) >= from * secs as f64 && (*t as f64) <= to * secs as f64)
            .map(|(_, rss)| *rss)
            .max()
            .unwrap_or(0)
    };
    let (early, late) = (peak(0.25, 0.5), peak(0.75, 1.0));
    eprintln!(
        "soak rss: second quarter peak {}MiB, last quarter peak {}MiB",
        early >> 20,
        late >> 20
    );
    assert!(
        late <= early + early / 5 + (32 << 20),
        "memory grew: {early} then {late}"
    );
    // The log is compacted behind snapshots instead of growing with the churn.
    assert!(
        data_bytes < 256 << 20,
        "data dir grew to {data_bytes} bytes"
    );
    server.stop().await;
}
