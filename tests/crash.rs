//! The kill -9 loop: a real `tickd` process under concurrent load is killed with SIGKILL
//! at random moments and restarted on the same data directory, several times. Every
//! acknowledged registration must fire at least once, and no timer whose cancel was
//! acknowledged may be delivered after that acknowledgement.
//!
//! The moments are drawn from a seeded generator; the seed is printed, and
//! `TICKD_CRASH_SEED=<seed>` replays the same choices (the interleaving still varies).

mod common;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::daemon::{tickd_command, Daemon};
use common::rng::Rng;
use common::*;
use tickd::proto::timers_client::TimersClient;
use tonic::transport::{Channel, Endpoint};

const NAMESPACE: &str = "crash";
const KILLS: usize = 6;
const LOADERS: usize = 4;
const MIN_DELAY_MS: u64 = 500;
const MAX_DELAY_MS: u64 = 3_000;
const FINAL_PATIENCE: Duration = Duration::from_secs(60);
const SNAPSHOT_AFTER_BYTES: usize = 16 * 1024;

/// A `tickd` on `data_dir`, snapshotting every few hundred records, so kills also land in
/// the middle of snapshots and compactions.
fn start_daemon(data_dir: &Path) -> Daemon {
    let mut command = tickd_command();
    command
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--snapshot-after-bytes", &SNAPSHOT_AFTER_BYTES.to_string()])
        // Not the default 0.0.0.0:9090, which another tickd on the machine may hold.
        .args(["--metrics-listen", "127.0.0.1:0"]);
    Daemon::start(command)
}

fn client_for(addr: SocketAddr) -> TimersClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(10))
        .connect_lazy();
    TimersClient::new(channel)
}

/// What the clients were told, with when they were told it.
#[derive(Default)]
struct Ledger {
    /// Acknowledged registrations: id → deadline (unix nanos).
    registered: HashMap<String, i128>,
    /// Acknowledged cancels (`cancelled == true`): id → when the answer arrived.
    cancelled: HashMap<String, Instant>,
    /// Cancels whose answer never came (the server died): the timer may or may not fire.
    cancel_unknown: HashSet<String>,
    /// Every delivery seen: id → when each arrived.
    delivered: HashMap<String, Vec<Instant>>,
    register_errors: u64,
}

/// Registers timers (0.5–3 s) one after another and cancels about a third of them, until
/// `stop`; errors (the server being killed) just mean the outcome is unknown.
async fn load(addr: SocketAddr, mut rng: Rng, ledger: Arc<Mutex<Ledger>>, stop: Arc<AtomicBool>) {
    let mut client = client_for(addr);
    let mut mine: Vec<String> = Vec::new();
    let mut sequence = 0u64;
    while !stop.load(Ordering::Relaxed) {
        sequence += 1;
        let delay = MIN_DELAY_MS + rng.below(MAX_DELAY_MS - MIN_DELAY_MS + 1);
        let payload = format!("{:016x}-{sequence}", rng.next());
        let request = NewTimeoutRequest {
            timer: Some(spec(NAMESPACE, delay, payload.as_bytes())),
        };
        match client.new_timeout(request).await {
            Ok(response) => {
                let timer = response.into_inner().timer.expect("timer");
                let deadline = unix_nanos(timer.deadline.as_ref().expect("deadline"));
                ledger
                    .lock()
                    .unwrap()
                    .registered
                    .insert(timer.id.clone(), deadline);
                mine.push(timer.id);
            }
            Err(_) => {
                ledger.lock().unwrap().register_errors += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        }
        if rng.below(3) == 0 && !mine.is_empty() {
            let id = mine.swap_remove(rng.below_usize(mine.len()));
            let answer = client
                .cancel(CancelRequest {
                    timer: by_id(NAMESPACE, &id),
                })
                .await;
            let mut ledger = ledger.lock().unwrap();
            match answer {
                Ok(answer) if answer.get_ref().cancelled => {
                    ledger.cancelled.insert(id, Instant::now());
                }
                // Already fired: it must have been (or will be) delivered.
                Ok(_) => {}
                Err(_) => {
                    ledger.cancel_unknown.insert(id);
                }
            }
        }
    }
}

/// Subscribes (resubscribing after errors) and acknowledges everything, until `stop`.
async fn consume(addr: SocketAddr, ledger: Arc<Mutex<Ledger>>, stop: Arc<AtomicBool>) {
    let mut client = client_for(addr);
    while !stop.load(Ordering::Relaxed) {
        let request = SubscribeRequest {
            namespace: NAMESPACE.into(),
            ack_timeout: Some(millis(5_000)),
            max_unacked: 1_000,
            ..Default::default()
        };
        let mut stream = match client.subscribe(request).await {
            Ok(stream) => stream.into_inner(),
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        loop {
            let message = tokio::select! {
                message = stream.message() => message,
                () = until(stop.clone()) => return,
            };
            let Ok(Some(message)) = message else { break };
            let Some(expiration) = message.expiration else {
                continue;
            };
            let id = expiration.timer.as_ref().expect("timer").id.clone();
            ledger
                .lock()
                .unwrap()
                .delivered
                .entry(id)
                .or_default()
                .push(Instant::now());
            // A lost ack only means a redelivery later.
            let _ = client
                .ack(AckRequest {
                    namespace: NAMESPACE.into(),
                    delivery_ids: vec![expiration.delivery_id],
                })
                .await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn until(stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Acknowledged registrations that must fire: not acknowledged as cancelled, and not the
/// target of a cancel whose outcome is unknown.
fn required(ledger: &Ledger) -> BTreeSet<String> {
    ledger
        .registered
        .keys()
        .filter(|id| !ledger.cancelled.contains_key(*id) && !ledger.cancel_unknown.contains(*id))
        .cloned()
        .collect()
}

fn missing(ledger: &Ledger) -> Vec<String> {
    required(ledger)
        .into_iter()
        .filter(|id| !ledger.delivered.contains_key(id))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_random_moments_loses_no_acknowledged_timer() {
    let seed = std::env::var("TICKD_CRASH_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("crash test seed: TICKD_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let ledger = Arc::new(Mutex::new(Ledger::default()));

    for round in 0..KILLS {
        let mut daemon = start_daemon(&data);
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..LOADERS {
            let task_rng = Rng(rng.next());
            tasks.spawn(load(daemon.addr, task_rng, ledger.clone(), stop.clone()));
        }
        tasks.spawn(consume(daemon.addr, ledger.clone(), stop.clone()));
        // Sometimes in the middle of recovery, mostly under load.
        let lifetime = match rng.below(5) {
            0 => Duration::from_millis(rng.below(50)),
            _ => Duration::from_millis(300 + rng.below(1_500)),
        };
        tokio::time::sleep(lifetime).await;
        daemon.assert_running();
        daemon.kill();
        stop.store(true, Ordering::Relaxed);
        while let Some(result) = tasks.join_next().await {
            result.expect("client task");
        }
        // Give the log reader a moment to reach the end of the dead process's output.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let snapshots = daemon.count("snapshot written");
        let torn = daemon.count("cutting off a torn record");
        let ledger = ledger.lock().unwrap();
        eprintln!(
            "round {round}: killed after {lifetime:?} ({snapshots} snapshots, {torn} torn tails \
             cut at start); so far {} registered, {} cancelled, {} delivered",
            ledger.registered.len(),
            ledger.cancelled.len(),
            ledger.delivered.len()
        );
    }

    // The last start: everything acknowledged and not cancelled must come out.
    let mut daemon = start_daemon(&data);
    let stop = Arc::new(AtomicBool::new(false));
    let consumer = tokio::spawn(consume(daemon.addr, ledger.clone(), stop.clone()));
    let final_start = Instant::now();
    loop {
        let missing = missing(&ledger.lock().unwrap());
        if missing.is_empty() {
            break;
        }
        if final_start.elapsed() > FINAL_PATIENCE {
            daemon.assert_running();
            panic!(
                "seed {seed}: {} acknowledged registrations never delivered: {:?}\nlog:\n{}",
                missing.len(),
                missing,
                daemon.log_text()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Once every deadline has passed nothing is left pending, and a cancelled timer that
    // wrongly came back would have fired by now.
    let last_deadline = ledger
        .lock()
        .unwrap()
        .registered
        .values()
        .copied()
        .max()
        .unwrap_or(0);
    let mut client = client_for(daemon.addr);
    loop {
        let past_deadlines = now_unix_nanos() > last_deadline + 500_000_000;
        if past_deadlines && pending_count(&mut client, NAMESPACE).await == 0 {
            break;
        }
        assert!(
            final_start.elapsed() < FINAL_PATIENCE,
            "seed {seed}: timers still pending long after every deadline"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    consumer.await.unwrap();
    daemon.assert_running();
    daemon.kill();

    let ledger = ledger.lock().unwrap();
    let mut resurrected = Vec::new();
    for (id, cancelled_at) in &ledger.cancelled {
        let deliveries = ledger
            .delivered
            .get(id)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if deliveries
            .iter()
            .any(|delivered_at| delivered_at > cancelled_at)
        {
            resurrected.push(id.clone());
        }
    }
    assert!(
        resurrected.is_empty(),
        "seed {seed}: timers delivered after their cancel was acknowledged: {resurrected:?}"
    );
    let required = required(&ledger).len();
    eprintln!(
        "seed {seed}: {} registrations acknowledged ({} register calls failed), {} cancels \
         acknowledged, {} cancels unanswered; all {required} required timers delivered; \
         {:?} in all ({:?} for the final drain)",
        ledger.registered.len(),
        ledger.register_errors,
        ledger.cancelled.len(),
        ledger.cancel_unknown.len(),
        started.elapsed(),
        final_start.elapsed()
    );
    assert!(ledger.registered.len() > 100, "the load barely ran");
    assert!(!ledger.cancelled.is_empty(), "no cancel was acknowledged");
}
