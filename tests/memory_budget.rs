//! The memory budget against a real `tickd` process: registrations past it are refused
//! with RESOURCE_EXHAUSTED before the process grows past it, with or without a flag (the
//! default follows the container's memory limit, here a memory cgroup the test creates),
//! and a log holding more than a budget or a container allows restarts without losing a
//! timer and without an OOM kill.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::cgroup::MemoryCgroup;
use common::daemon::{tickd_command, Daemon};
use common::metrics::scrape;
use common::proc_status::*;
use common::wait::eventually;
use common::*;
use tickd::proto::timers_client::TimersClient;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

const NAMESPACE: &str = "budget";
const PAYLOAD: usize = 64 * 1024;
const MIB: u64 = 1 << 20;
/// What RSS may hold beyond the memory budget under concurrent large writes
/// (docs/operations.md).
const CONCURRENT_WRITES_OVERHEAD: u64 = 80 * MIB;
/// Registrations tried at most before a test gives up on a refusal.
const MOST_REGISTRATIONS: usize = 20_000;

fn durable(data_dir: &Path) -> Command {
    let mut command = tickd_command();
    command
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--metrics-listen", "127.0.0.1:0"]);
    command
}

async fn client_for(daemon: &Daemon) -> TimersClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{}", daemon.addr))
        .unwrap()
        .timeout(PATIENCE)
        .connect()
        .await
        .expect("connect");
    TimersClient::new(channel).max_decoding_message_size(64 * 1024 * 1024)
}

/// The payload of the `index`th timer: its number, then filler, so each one is checkable.
fn payload(index: usize) -> Vec<u8> {
    let mut payload = vec![(index % 251) as u8; PAYLOAD];
    payload[..8].copy_from_slice(&(index as u64).to_le_bytes());
    payload
}

/// Registers 64 KiB timers due in an hour until one is refused: the ids acknowledged, and
/// the refusal.
async fn fill_until_refused(client: &mut TimersClient<Channel>) -> (Vec<String>, tonic::Status) {
    let mut ids = Vec::new();
    for index in 0..MOST_REGISTRATIONS {
        let request = NewTimeoutRequest {
            timer: Some(spec(NAMESPACE, 3_600_000, &payload(index))),
        };
        match client.new_timeout(request).await {
            Ok(answer) => ids.push(answer.into_inner().timer.expect("timer").id),
            Err(refusal) => return (ids, refusal),
        }
    }
    panic!("{MOST_REGISTRATIONS} registrations of 64 KiB and none refused");
}

fn assert_memory_refusal(refusal: &tonic::Status) {
    assert_eq!(refusal.code(), Code::ResourceExhausted, "{refusal:?}");
    let message = refusal.message();
    assert!(
        message.contains("memory budget") && message.contains("--max-memory"),
        "the refusal names the budget and its flag: {message}"
    );
}

/// Every timer in `ids` is pending, its payload the one registered.
async fn assert_all_served(client: &mut TimersClient<Channel>, ids: &[String]) {
    assert_eq!(pending_count(client, NAMESPACE).await, ids.len() as u64);
    for (index, id) in ids.iter().enumerate() {
        let timer = get(client, by_id(NAMESPACE, id))
            .await
            .unwrap_or_else(|status| panic!("timer {id} is not served: {status:?}"));
        assert!(
            timer.payload == payload(index),
            "timer {id} kept its payload"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn past_the_flag_registrations_are_refused_before_memory_grows_and_cancels_make_room() {
    let dir = tempfile::tempdir().unwrap();
    let budget = 256 * MIB;
    let mut command = durable(dir.path());
    command.args(["--max-memory", "256MiB"]);
    let daemon = Daemon::start(command);
    let mut client = client_for(&daemon).await;
    let started_at = status_bytes(daemon.pid(), "VmRSS");

    let (ids, refusal) = fill_until_refused(&mut client).await;
    assert_memory_refusal(&refusal);
    let grown = status_bytes(daemon.pid(), "VmHWM").saturating_sub(started_at);
    eprintln!(
        "budget=256MiB accepted={} rss_start_mib={} rss_peak_growth_mib={}",
        ids.len(),
        started_at / MIB,
        grown / MIB
    );
    assert!(
        grown * 2 <= budget * 3,
        "RSS grew by {} MiB at its peak, more than 1.5 times the {} MiB budget",
        grown / MIB,
        budget / MIB
    );
    // Most of the budget went to timers: it refuses because it is full, not early.
    assert!(
        ids.len() as u64 * PAYLOAD as u64 > budget / 2,
        "{} accepted",
        ids.len()
    );
    let metrics = scrape(daemon.metrics_addr()).await;
    assert_eq!(metrics.value("tickd_memory_budget_bytes"), budget as f64);
    assert!(metrics.value("tickd_memory_used_bytes") <= budget as f64);
    assert!(metrics.value("tickd_refusals_total{reason=\"memory\"}") >= 1.0);
    assert_eq!(
        health(daemon.addr, "").await,
        Some(tonic_health::pb::health_check_response::ServingStatus::Serving),
        "a full budget refuses registrations, and tickd still serves"
    );
    // Reads are served at the limit; a batch is refused item by item, whole.
    assert_eq!(
        pending_count(&mut client, NAMESPACE).await,
        ids.len() as u64
    );
    get(&mut client, by_id(NAMESPACE, &ids[0]))
        .await
        .expect("get at the limit");

    for id in ids.iter().step_by(2) {
        assert!(
            cancel(&mut client, by_id(NAMESPACE, id)).await,
            "cancel {id}"
        );
    }
    let index = ids.len();
    daemon.logged("memory budget reached").await;
    assert_eq!(
        daemon.count("memory budget reached"),
        1,
        "logged once, at the crossing"
    );
    let answer = client
        .new_timeout(NewTimeoutRequest {
            timer: Some(spec(NAMESPACE, 3_600_000, &payload(index))),
        })
        .await
        .expect("after cancelling half, a registration is accepted again");
    assert!(answer.into_inner().created);
    daemon.logged("memory budget has room again").await;
    assert_eq!(daemon.count("memory budget has room again"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn in_a_256_mib_container_with_no_flag_tickd_refuses_instead_of_being_oom_killed() {
    let group = match MemoryCgroup::create("tickd-memory", 256 * MIB) {
        Ok(group) => group,
        Err(reason) => {
            // Here (a root shell with a writable cgroup tree) this runs; elsewhere it says why not.
            eprintln!("skipped: no memory cgroup can be made here: {reason}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start(group.wrap(&durable(dir.path())));
    let mut client = client_for(&daemon).await;
    let metrics = scrape(daemon.metrics_addr()).await;
    assert_eq!(
        metrics.value("tickd_memory_budget_bytes"),
        (128 * MIB) as f64,
        "the default is half the container's limit"
    );

    let (ids, refusal) = fill_until_refused(&mut client).await;
    assert_memory_refusal(&refusal);
    assert!(
        refusal.message().contains("container's memory limit"),
        "the refusal says where its default came from: {}",
        refusal.message()
    );
    daemon.assert_running();
    assert_eq!(group.oom_kills(), 0, "never OOM-killed");
    eprintln!(
        "cgroup=256MiB accepted={} rss_peak_mib={}",
        ids.len(),
        status_bytes(daemon.pid(), "VmHWM") / MIB
    );

    // A crash, and a restart in the same container: every acknowledged timer is back.
    daemon.kill();
    let restarted = Daemon::start(group.wrap(&durable(dir.path())));
    let mut client = client_for(&restarted).await;
    assert_all_served(&mut client, &ids).await;
    assert_eq!(group.oom_kills(), 0, "recovery was not OOM-killed either");
    drop(restarted);
}

/// The start-up line's `max_memory=` field.
fn budget_in_log(daemon: &Daemon) -> String {
    daemon
        .lines_with(&["tickd serving"])
        .concat()
        .split("max_memory=")
        .nth(1)
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_default_budget_follows_the_cgroup_limit_and_never_exceeds_physical_memory() {
    let physical: u64 = fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|value| value.split_whitespace().next()?.parse::<u64>().ok())
        .expect("MemTotal")
        * 1024;
    for (limit, expected) in [
        (512 * MIB, 256 * MIB),
        // A limit above the machine's memory: physical memory bounds it.
        (1 << 50, physical / 2),
    ] {
        let fake = tempfile::tempdir().unwrap();
        fs::write(fake.path().join("memory.max"), format!("{limit}\n")).unwrap();
        let mut command = tickd_command();
        command
            .args(["--sync", "none", "--metrics-listen", "127.0.0.1:0"])
            .arg("--cgroup-root")
            .arg(fake.path());
        let daemon = Daemon::start(command);
        let budget = scrape(daemon.metrics_addr())
            .await
            .value("tickd_memory_budget_bytes") as u64;
        assert_eq!(budget, expected, "limit {limit}");
        assert!(budget <= physical);
        assert!(
            budget_in_log(&daemon).contains("50% of"),
            "{}",
            daemon.log_text()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_log_restarts_whole_under_its_budget_and_under_a_quarter_of_it_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let budget = 64 * MIB;
    let with_budget = |max_memory: &str| {
        let mut command = durable(dir.path());
        command.args(["--max-memory", max_memory]);
        command
    };
    let mut daemon = Daemon::start(with_budget("64MiB"));
    let fresh = status_bytes(daemon.pid(), "VmRSS");
    let mut client = client_for(&daemon).await;
    let (ids, refusal) = fill_until_refused(&mut client).await;
    assert_memory_refusal(&refusal);
    daemon.kill();

    // The same budget: every timer back, RSS in bounds, and still full.
    let mut daemon = Daemon::start(with_budget("64MiB"));
    let recovered = status_bytes(daemon.pid(), "VmRSS");
    let mut client = client_for(&daemon).await;
    assert_all_served(&mut client, &ids).await;
    eprintln!(
        "budget=64MiB accepted={} rss_fresh_mib={} rss_recovered_mib={}",
        ids.len(),
        fresh / MIB,
        recovered / MIB
    );
    assert!(
        recovered.saturating_sub(fresh) * 2 <= budget * 3,
        "recovered at {} MiB RSS, from {} MiB fresh",
        recovered / MIB,
        fresh / MIB
    );
    let refused = client
        .new_timeout(NewTimeoutRequest {
            timer: Some(spec(NAMESPACE, 3_600_000, &payload(ids.len()))),
        })
        .await
        .expect_err("the recovered timers fill the budget");
    assert_memory_refusal(&refused);
    daemon.kill();

    // A quarter of the budget, in a container of 64 MiB: recovery cannot fit beside tickd
    // itself, so tickd says so and exits, never OOM-killed, changing nothing.
    match MemoryCgroup::create("tickd-recovery", budget) {
        Ok(group) => {
            let (status, log) =
                Daemon::refused(group.wrap(&with_budget("16MiB")), Duration::from_secs(60));
            assert_eq!(status.code(), Some(1), "a clear exit, not a kill: {log}");
            assert!(
                log.contains("recovery stopped") && log.contains("no timer was dropped"),
                "{log}"
            );
            assert_eq!(group.oom_kills(), 0);
        }
        Err(reason) => eprintln!("the container half skipped: no memory cgroup here: {reason}"),
    }

    // A quarter of the budget with the machine's memory: every timer served, new ones refused.
    let daemon = Daemon::start(with_budget("16MiB"));
    let mut client = client_for(&daemon).await;
    assert_all_served(&mut client, &ids).await;
    let refused = client
        .new_timeout(NewTimeoutRequest {
            timer: Some(spec(NAMESPACE, 3_600_000, b"small")),
        })
        .await
        .expect_err("past its budget, tickd takes no new timer");
    assert_memory_refusal(&refused);
    assert!(
        cancel(&mut client, by_id(NAMESPACE, &ids[0])).await,
        "cancels are served"
    );
    assert!(daemon
        .log_text()
        .contains("memory budget reached by the recovered timers"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repeating_timers_firings_past_the_budget_are_dead_not_buffered_until_there_is_room() {
    let mut command = tickd_command();
    command.args([
        "--sync",
        "none",
        "--max-memory",
        "1MiB",
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    let daemon = Daemon::start(command);
    let mut client = client_for(&daemon).await;
    let mut repeating = spec(NAMESPACE, 50, b"every 50ms");
    repeating.repeat = Some(millis(50));
    let repeating = register(&mut client, repeating).await.id;
    let (filled, refusal) = fill_until_refused(&mut client).await;
    assert_memory_refusal(&refusal);

    // Each firing needs bytes of its own, and there are none: it is kept dead, counted.
    let mut dead_client = client.clone();
    eventually(
        "a firing of the repeating timer is on the dead list",
        PATIENCE,
        Duration::from_millis(20),
        || {
            let mut client = dead_client.clone();
            let repeating = repeating.clone();
            async move {
                let dead = pending_with_dead(&mut client, NAMESPACE)
                    .await
                    .dead_expirations;
                match dead
                    .iter()
                    .any(|expiration| timer_id(expiration) == repeating)
                {
                    true => Ok(()),
                    false => Err(format!("{} dead, none of {repeating}", dead.len())),
                }
            }
        },
        || async { daemon.log_text() },
    )
    .await;
    let metrics = scrape(daemon.metrics_addr()).await;
    assert!(metrics.value("tickd_expirations_dead_total") >= 1.0);

    // Room again: its firings after those are delivered.
    for id in &filled {
        assert!(cancel(&mut dead_client, by_id(NAMESPACE, id)).await);
    }
    let last_dead = pending_with_dead(&mut client, NAMESPACE)
        .await
        .dead_expirations
        .iter()
        .filter_map(|expiration| expiration.timer.as_ref())
        .map(|timer| timer.fired_count)
        .max()
        .expect("dead firings");
    let mut stream = subscribe(&mut client, NAMESPACE, 0, 10).await;
    for _ in 0..10_000 {
        let delivered = within(next_expiration(&mut stream)).await;
        assert_eq!(timer_id(&delivered), repeating);
        ack(&mut client, NAMESPACE, vec![delivered.delivery_id.clone()]).await;
        if delivered.timer.expect("timer").fired_count > last_dead {
            return;
        }
    }
    panic!("no firing after the last dead one ({last_dead}) was delivered");
}

/// Registers batches of `batch` 64 KiB timers until one is refused at the memory budget
/// (the whole call, or its items): how many were acknowledged, and the refusal's message.
async fn batches_until_refused(mut client: TimersClient<Channel>, batch: usize) -> (usize, String) {
    let mut acknowledged = 0;
    for round in 0..MOST_REGISTRATIONS {
        let timers = (0..batch)
            .map(|item| spec(NAMESPACE, 3_600_000, &payload(round * batch + item)))
            .collect();
        let results = match client.new_timeouts(NewTimeoutsRequest { timers }).await {
            Ok(answer) => answer.into_inner().results,
            Err(refusal) => {
                assert_memory_refusal(&refusal);
                return (acknowledged, refusal.message().to_owned());
            }
        };
        // Items are answered one by one: one after a refused item may still fit (the
        // other callers' requests release memory meanwhile), and it counts.
        let mut refused = None;
        for result in results {
            match result.result.expect("a result per item") {
                new_timeout_result::Result::Registered(_) => acknowledged += 1,
                new_timeout_result::Result::Error(error) => {
                    assert_eq!(error.code, Code::ResourceExhausted as i32, "{error:?}");
                    refused.get_or_insert(error.message);
                }
            }
        }
        if let Some(message) = refused {
            return (acknowledged, message);
        }
    }
    panic!("never refused");
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_batches_of_large_timers_are_refused_within_the_budget_and_none_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let budget = 64 * MIB;
    let mut command = durable(dir.path());
    command.args(["--max-memory", "64MiB"]);
    let mut daemon = Daemon::start(command);
    let started_at = status_bytes(daemon.pid(), "VmRSS");
    let callers: Vec<_> = {
        let client = client_for(&daemon).await;
        (0..8)
            .map(|_| tokio::spawn(batches_until_refused(client.clone(), 4)))
            .collect()
    };
    let mut acknowledged = 0;
    for caller in callers {
        let (count, message) = caller.await.expect("caller");
        assert!(message.contains("memory budget"), "{message}");
        acknowledged += count;
    }
    let grown = status_bytes(daemon.pid(), "VmHWM").saturating_sub(started_at);
    eprintln!(
        "concurrent: acknowledged={acknowledged} rss_peak_growth_mib={} rss_now_growth_mib={}",
        grown / MIB,
        status_bytes(daemon.pid(), "VmRSS").saturating_sub(started_at) / MIB
    );
    // Beyond what the budget counts, the allocator keeps memory freed moments ago (the
    // requests' and the log's buffers) for reuse: the documented overhead of concurrent
    // large writes (docs/operations.md, "Sizing"), 35-52 MiB measured here.
    assert!(
        grown <= budget + CONCURRENT_WRITES_OVERHEAD,
        "RSS grew by {} MiB at its peak under 8 concurrent callers, past the {} MiB budget \
         and the {} MiB documented for concurrent large writes",
        grown / MIB,
        budget / MIB,
        CONCURRENT_WRITES_OVERHEAD / MIB
    );
    let mut client = client_for(&daemon).await;
    assert_eq!(
        pending_count(&mut client, NAMESPACE).await,
        acknowledged as u64
    );
    // Every acknowledged timer survives a crash.
    daemon.kill();
    let restarted = Daemon::start({
        let mut command = durable(dir.path());
        command.args(["--max-memory", "64MiB"]);
        command
    });
    let mut client = client_for(&restarted).await;
    assert_eq!(
        pending_count(&mut client, NAMESPACE).await,
        acknowledged as u64
    );
}
