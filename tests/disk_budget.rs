//! The disk budget (`--max-disk`) against a real tickd: registrations past it are refused
//! with RESOURCE_EXHAUSTED naming the budget and the flag, and change nothing; cancels
//! still go through; the data directory stays within the budget plus its reserve (a
//! sixteenth of the budget, docs/operations.md); every acknowledged timer survives a
//! restart, under the same budget or a lowered one, and a restart counts the directory it
//! finds; cancelling, then the compaction that follows, lifts the refusal; and a full
//! disk under a larger budget still fails stop, as without one.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::daemon::Daemon;
use common::data_dir::*;
use common::metrics::scrape;
use common::tmpfs::Tmpfs;
use common::*;
use tickd::proto::timers_client::TimersClient;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

const MIB: u64 = 1 << 20;
/// The payload of every timer here: the largest tickd takes by default.
const PAYLOAD_BYTES: usize = 64 * 1024;
/// Far enough ahead that no timer fires during a test.
const HOUR_MS: u64 = 3_600_000;
/// Bound on waiting for tickd to exit once asked to.
const PATIENCE: Duration = Duration::from_secs(60);

fn tickd(dir: &Path, max_disk: &str) -> Command {
    let mut command = common::daemon::tickd_command();
    command
        .args(["--metrics-listen", "127.0.0.1:0", "--sync", "always"])
        .args(["--max-disk", max_disk])
        .arg("--data-dir")
        .arg(dir);
    command
}

async fn connect(daemon: &Daemon) -> TimersClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{}", daemon.addr))
        .unwrap()
        .connect()
        .await
        .expect("connect");
    TimersClient::new(channel)
}

/// The largest the directory is seen, sampled on a thread of its own while the test runs,
/// so that compactions (whose new snapshot exists beside the files it replaces for a
/// moment) are seen too, not only the state between calls. A sample can miss a peak,
/// never invent one: the bound it checks can only be missed, not fail wrongly. The files
/// of the largest sample are kept, so that a failure says what outgrew the bound.
struct LargestDirectory {
    stop: Arc<AtomicBool>,
    sampler: Option<std::thread::JoinHandle<Largest>>,
}

/// The largest sample: its bytes, its files (name and length), and how many were taken.
#[derive(Default)]
struct Largest {
    bytes: u64,
    files: Vec<(String, u64)>,
    samples: u64,
}

impl Largest {
    fn files_shown(&self) -> String {
        let shown: Vec<String> = self
            .files
            .iter()
            .map(|(name, length)| format!("{name}={length}"))
            .collect();
        shown.join(" ")
    }
}

/// The directory's files (name, length), sorted by name; files gone meanwhile left out.
fn directory_files(dir: &Path) -> Vec<(String, u64)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<(String, u64)> = entries
        .flatten()
        .filter_map(|entry| {
            let metadata = entry.metadata().ok()?;
            metadata.is_file().then(|| {
                (
                    entry.file_name().to_string_lossy().into_owned(),
                    metadata.len(),
                )
            })
        })
        .collect();
    files.sort();
    files
}

impl LargestDirectory {
    fn watch(dir: &Path) -> Self {
        let (dir, stop) = (dir.to_owned(), Arc::new(AtomicBool::new(false)));
        let stopping = stop.clone();
        let sampler = std::thread::spawn(move || {
            let mut largest = Largest::default();
            while !stopping.load(Ordering::Relaxed) {
                let files = directory_files(&dir);
                let bytes = files.iter().map(|(_, length)| length).sum();
                if bytes > largest.bytes {
                    largest.bytes = bytes;
                    largest.files = files;
                }
                largest.samples += 1;
                // A pause between samples keeps the sampler off the two cores tickd and
                // the test share; it sets how often the directory is looked at, nothing more.
                std::thread::sleep(Duration::from_millis(1));
            }
            largest
        });
        Self {
            stop,
            sampler: Some(sampler),
        }
    }

    /// The largest sample.
    fn finish(mut self) -> Largest {
        self.stop.store(true, Ordering::Relaxed);
        self.sampler.take().unwrap().join().unwrap()
    }
}

fn timer(index: usize) -> TimerSpec {
    let mut timer = spec("disk", HOUR_MS, &vec![(index % 251) as u8; PAYLOAD_BYTES]);
    timer.key = format!("timer-{index}");
    timer
}

/// What the disk budget checks a registration of [`timer`]`(index)` against: its payload,
/// key and namespace plus 256 bytes (docs/operations.md, "Sizing").
fn record_bound(index: usize) -> u64 {
    let timer = timer(index);
    (timer.namespace.len() + timer.key.len() + timer.payload.len()) as u64 + 256
}

async fn try_register(
    client: &mut TimersClient<Channel>,
    index: usize,
) -> Result<Timer, tonic::Status> {
    client
        .new_timeout(NewTimeoutRequest {
            timer: Some(timer(index)),
        })
        .await
        .map(|answer| answer.into_inner().timer.expect("timer"))
}

fn assert_disk_refusal(code: Code, message: &str) {
    assert_eq!(code, Code::ResourceExhausted, "{message}");
    assert!(message.contains("disk budget"), "{message}");
    assert!(message.contains("--max-disk"), "{message}");
}

/// What filling a budget left: the acknowledged timers (index, id), the index refused,
/// and the largest the directory was seen.
struct Filled {
    acknowledged: Vec<(usize, String)>,
    refused: usize,
    largest_directory: u64,
}

/// Registers 64 KiB timers until the disk budget refuses one, checking the directory's
/// size after each.
async fn fill(client: &mut TimersClient<Channel>, dir: &Path, budget: u64) -> Filled {
    let mut filled = Filled {
        acknowledged: Vec::new(),
        refused: 0,
        largest_directory: 0,
    };
    // Twice the budget in payloads: a budget that never refuses fails here.
    let most = (2 * budget / PAYLOAD_BYTES as u64) as usize;
    for index in 0..most {
        let answer = try_register(client, index).await;
        filled.largest_directory = filled.largest_directory.max(directory_bytes(dir));
        match answer {
            Ok(timer) => filled.acknowledged.push((index, timer.id)),
            Err(status) => {
                assert_disk_refusal(status.code(), status.message());
                filled.refused = index;
                return filled;
            }
        }
    }
    panic!("{most} timers of 64 KiB were never refused under a disk budget of {budget}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_disk_budget_refuses_registrations_serves_cancels_and_keeps_what_it_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let (budget, reserve) = (64 * MIB, 64 * MIB / 16);
    let mut daemon = Daemon::start(tickd(dir.path(), "64MiB"));
    let serving = daemon.lines_with(&["tickd serving"]).join("\n");
    assert!(serving.contains("max_disk=64.0 MiB"), "{serving}");
    let mut client = connect(&daemon).await;

    let watch = LargestDirectory::watch(dir.path());
    let filled = fill(&mut client, dir.path(), budget).await;
    let acknowledged = filled.acknowledged.len();
    // The log may hold half the budget (the other half is room for compaction): it took
    // timers until then, not a handful. Less up to a reserve's worth for the refusal's
    // margin, and up to another for what was logged during a compaction (counted twice
    // until its snapshot is sealed: src/local/store/disk_budget.rs).
    assert!(
        acknowledged as u64 * PAYLOAD_BYTES as u64 >= budget / 2 - 2 * budget / 16,
        "only {acknowledged} timers of 64 KiB were taken under a budget of 64 MiB"
    );

    // Nothing of a refused call took effect.
    let refused_key = format!("timer-{}", filled.refused);
    let missing = get(&mut client, by_key("disk", &refused_key)).await;
    assert_eq!(missing.unwrap_err().code(), Code::NotFound);
    // Nor in a namespace of its own: no namespace is left behind.
    let mut fresh = timer(100_002);
    fresh.namespace = "fresh".into();
    let refused = client
        .new_timeout(NewTimeoutRequest { timer: Some(fresh) })
        .await
        .unwrap_err();
    assert_disk_refusal(refused.code(), refused.message());
    // A batch is refused item by item, the same way.
    let batch = client
        .new_timeouts(NewTimeoutsRequest {
            timers: vec![timer(100_000), timer(100_001)],
        })
        .await
        .expect("a batch is answered item by item")
        .into_inner();
    for result in batch.results {
        match result.result.expect("result") {
            new_timeout_result::Result::Error(error) => {
                assert_disk_refusal(Code::from(error.code), &error.message)
            }
            other => panic!("accepted past the disk budget: {other:?}"),
        }
    }
    // A reschedule rewrites the whole timer: refused too, the timer left as it was.
    let (first_index, first_id) = filled.acknowledged[0].clone();
    let rescheduled = client
        .reschedule(RescheduleRequest {
            timer: by_id("disk", &first_id),
            delay: Some(millis(2 * HOUR_MS)),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_disk_refusal(rescheduled.code(), rescheduled.message());
    // Cancels still go through.
    let (cancelled_index, cancelled_id) = filled.acknowledged[1].clone();
    assert!(cancel(&mut client, by_id("disk", &cancelled_id)).await);

    let metrics = scrape(daemon.metrics_addr()).await;
    assert_eq!(metrics.value("tickd_disk_budget_bytes"), budget as f64);
    assert_eq!(metrics.value("tickd_namespaces"), 1.0);
    assert_eq!(
        metrics.get(r#"tickd_timers_pending{namespace="fresh"}"#),
        None
    );
    assert!(metrics.value(r#"tickd_refusals_total{reason="disk"}"#) >= 5.0);
    let used = metrics.value("tickd_disk_used_bytes");
    assert!(used > (budget / 4) as f64 && used <= (budget + reserve) as f64);
    let sampled = watch.finish();
    let largest = filled
        .largest_directory
        .max(sampled.bytes)
        .max(directory_bytes(dir.path()));
    println!(
        "disk_budget acknowledged={acknowledged} largest_directory={largest} samples={} used_metric={used} budget={budget} reserve={reserve} compactions={}",
        sampled.samples,
        daemon.count("log compacted")
    );
    assert!(
        largest <= budget + reserve,
        "the data directory reached {largest} bytes, past the budget {budget} and reserve {reserve}; \
         the largest sample held {}",
        sampled.files_shown()
    );

    // SIGTERM, then a restart on the same directory: every acknowledged timer is there,
    // as it was acknowledged; the cancelled one and the refused ones are not.
    daemon.signal("TERM");
    let status = daemon.wait_for_exit(PATIENCE);
    assert!(status.success(), "{status}; log:\n{}", daemon.log_text());
    // Its whole log read: the budget was reached once, however many calls it refused.
    daemon.logged("tickd stopped").await;
    assert_eq!(
        daemon.count("refusing registrations until compaction"),
        1,
        "{}",
        daemon.log_text()
    );
    let daemon = Daemon::start(tickd(dir.path(), "64MiB"));
    let mut client = connect(&daemon).await;
    for (index, id) in &filled.acknowledged {
        let found = get(&mut client, by_id("disk", id)).await;
        if *index == cancelled_index {
            assert_eq!(found.unwrap_err().code(), Code::NotFound);
            continue;
        }
        let found = found.unwrap_or_else(|status| panic!("timer {index} ({id}) lost: {status}"));
        assert_eq!(found.key, format!("timer-{index}"));
        assert_eq!(found.payload, vec![(index % 251) as u8; PAYLOAD_BYTES]);
    }
    let first = get(&mut client, by_id("disk", &first_id)).await.unwrap();
    assert_eq!(first.key, format!("timer-{first_index}"));
    let missing = get(&mut client, by_key("disk", &refused_key)).await;
    assert_eq!(missing.unwrap_err().code(), Code::NotFound);
    // The budget is counted from the directory it restarted on, and from nothing else: the
    // gauge is the directory's bytes, and a registration is taken exactly while the log and
    // the registration's bound fit in half the budget. Whether one more fits is not fixed:
    // what the refusal kept back (until a compaction brings the log a reserve's worth
    // under the limit) is not carried over a restart, and a compaction sealed after the
    // refusal may have given back a few timers' worth (the timers its predecessor, a fuzzy
    // snapshot, held twice; the cancelled one). So registrations go on, each checked
    // against the directory's size, until one is refused. Nothing else writes meanwhile:
    // no compaction starts before a reserve's worth (64 of these timers) is logged, or a
    // timer is removed.
    let restarted_with = directory_bytes(dir.path());
    let metrics = scrape(daemon.metrics_addr()).await;
    assert_eq!(
        metrics.value("tickd_disk_used_bytes"),
        restarted_with as f64
    );
    let mut index = filled.refused;
    let mut taken_after_restart = Vec::new();
    let refused_after_restart = loop {
        let held = directory_bytes(dir.path());
        let fits = held + record_bound(index) <= budget / 2;
        match try_register(&mut client, index).await {
            Ok(timer) => {
                assert!(
                    fits,
                    "timer {index} taken after the restart, {held} bytes held: past half the budget"
                );
                taken_after_restart.push((index, timer.id));
            }
            Err(status) => {
                assert_disk_refusal(status.code(), status.message());
                assert!(
                    !fits,
                    "timer {index} refused after the restart, {held} bytes held: it fits in half the budget"
                );
                break index;
            }
        }
        index += 1;
    };
    println!(
        "disk_budget_restart restarted_with={restarted_with} taken_after_restart={}",
        taken_after_restart.len()
    );
    assert!(directory_bytes(dir.path()) <= budget + reserve);

    // Restarted under a budget lowered below what the directory holds: every timer is still
    // served, and the budget starts reached (logged before any call), refusing registrations.
    let mut daemon = daemon;
    daemon.signal("TERM");
    assert!(daemon.wait_for_exit(PATIENCE).success());
    let daemon = Daemon::start(tickd(dir.path(), "16MiB"));
    daemon
        .logged("refusing registrations until compaction")
        .await;
    let mut client = connect(&daemon).await;
    let refused = try_register(&mut client, refused_after_restart)
        .await
        .unwrap_err();
    assert_disk_refusal(refused.code(), refused.message());
    for (index, id) in filled.acknowledged.iter().chain(&taken_after_restart) {
        let found = get(&mut client, by_id("disk", id)).await;
        assert_eq!(
            found.is_ok(),
            *index != cancelled_index,
            "timer {index} ({id})"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_and_the_compaction_that_follows_lift_the_disk_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let (budget, reserve) = (16 * MIB, 16 * MIB / 16);
    let daemon = Daemon::start(tickd(dir.path(), "16MiB"));
    let mut client = connect(&daemon).await;
    let watch = LargestDirectory::watch(dir.path());
    let filled = fill(&mut client, dir.path(), budget).await;
    let used_when_refused = scrape(daemon.metrics_addr())
        .await
        .value("tickd_disk_used_bytes");

    // Cancel half of what is held.
    let half = filled.acknowledged.len() / 2;
    for (_, id) in &filled.acknowledged[..half] {
        assert!(cancel(&mut client, by_id("disk", id)).await);
    }
    // Each refused attempt is a call after which the worker looks at whether compacting
    // would free space; the compaction then lifts the refusal. Bounded by count.
    let mut index = filled.refused;
    let mut refusals_after_cancelling = 0;
    let accepted = loop {
        match try_register(&mut client, index).await {
            Ok(timer) => break timer,
            Err(status) => {
                assert_disk_refusal(status.code(), status.message());
                refusals_after_cancelling += 1;
                assert!(
                    refusals_after_cancelling < 10_000,
                    "still refused after cancelling half; log:\n{}",
                    daemon.log_text()
                );
                // Between attempts, a scrape: what the compaction has given back so far.
                let _ = scrape(daemon.metrics_addr()).await;
            }
        }
        assert!(directory_bytes(dir.path()) <= budget + reserve);
        index += 1;
    };
    let used_after = scrape(daemon.metrics_addr())
        .await
        .value("tickd_disk_used_bytes");
    println!(
        "disk_budget_lift acknowledged={} cancelled={half} refusals_after_cancelling={refusals_after_cancelling} used_when_refused={used_when_refused} used_after={used_after} compactions={}",
        filled.acknowledged.len(),
        daemon.count("log compacted")
    );
    assert!(!accepted.id.is_empty());
    assert!(get(&mut client, by_id("disk", &accepted.id)).await.is_ok());
    daemon.logged("disk budget no longer reached").await;
    daemon.logged("log compacted").await;
    // What the compaction that lifted the refusal gave back, as it counted the directory
    // once done (the gauge may meanwhile hold the partial snapshot of a compaction begun
    // since): its "log compacted" line follows the "no longer reached" one.
    let log = daemon.log_text();
    let compacted_to = log
        .lines()
        .skip_while(|line| !line.contains("disk budget no longer reached"))
        .find(|line| line.contains("log compacted"))
        .and_then(|line| {
            line.split_whitespace()
                .find_map(|field| field.strip_prefix("disk_used="))
                .and_then(|bytes| bytes.parse::<f64>().ok())
        })
        .unwrap_or_else(|| panic!("no compaction after the lift:\n{log}"));
    assert!(
        compacted_to < used_when_refused,
        "a compaction brought the directory to {compacted_to} bytes, from {used_when_refused} \
         when refused (the gauge now: {used_after})"
    );
    // Room again for about what was cancelled, once compaction has caught up: the
    // compaction that lifted the refusal may have begun before the last cancels, its fuzzy
    // snapshot holding some of the cancelled timers, so a refusal may come first. Each
    // refusal is followed by the compaction it starts (a refused call is where the worker
    // looks), awaited before the next registration; a refusal that starts none fails here.
    let mut more = 0;
    let mut refusals_on_the_way = 0;
    while more + 1 < half / 2 {
        let compactions = daemon.count("log compacted");
        match try_register(&mut client, index + 1 + more + refusals_on_the_way).await {
            Ok(_) => more += 1,
            Err(status) => {
                assert_disk_refusal(status.code(), status.message());
                refusals_on_the_way += 1;
                assert!(
                    refusals_on_the_way <= 10,
                    "only {more} more timers after cancelling {half}, refused {refusals_on_the_way} times"
                );
                common::wait::eventually(
                    "a compaction after the refusal",
                    common::PATIENCE,
                    Duration::from_millis(10),
                    || async {
                        (daemon.count("log compacted") > compactions)
                            .then_some(())
                            .ok_or_else(|| format!("{more} more taken"))
                    },
                    || async { daemon.log_text() },
                )
                .await;
            }
        }
        assert!(directory_bytes(dir.path()) <= budget + reserve);
    }
    // And the budget still refuses in the end.
    let mut beyond = 0;
    while try_register(&mut client, index + 1 + more + refusals_on_the_way + beyond)
        .await
        .is_ok()
    {
        beyond += 1;
        assert!(
            beyond <= filled.acknowledged.len(),
            "the budget no longer refuses"
        );
    }
    let more = more + beyond;
    let sampled = watch.finish();
    let largest = sampled.bytes.max(directory_bytes(dir.path()));
    println!(
        "disk_budget_lift largest_directory={largest} samples={} more={more} refusals_on_the_way={refusals_on_the_way}",
        sampled.samples
    );
    assert!(
        largest <= budget + reserve,
        "the data directory reached {largest} bytes, past the budget {budget} and reserve {reserve}; \
         the largest sample held {}",
        sampled.files_shown()
    );
}

/// A budget larger than the volume does not hide a full disk: the store fails stop as it
/// does without a budget (tests/failsafe.rs), and every acknowledged timer comes back.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_under_a_larger_budget_still_fails_stop() {
    let scratch = tempfile::tempdir().unwrap();
    let small = scratch.path().join("small");
    let Some(tmpfs) = Tmpfs::mount(&small, "2m") else {
        eprintln!("full disk under a budget: skipped (this machine refuses to mount a tmpfs)");
        return;
    };
    let mut daemon = Daemon::start(tickd(&small, "64MiB"));
    let mut client = connect(&daemon).await;
    let mut acknowledged = Vec::new();
    let refusal = loop {
        match try_register(&mut client, acknowledged.len()).await {
            Ok(timer) => acknowledged.push(timer.id),
            Err(status) => break status,
        }
        assert!(acknowledged.len() < 1_000, "a 2 MiB disk never filled");
    };
    // The disk, not the budget, refused: UNAVAILABLE, and tickd stops.
    assert_eq!(refusal.code(), Code::Unavailable, "{refusal:?}");
    let status = daemon.wait_for_exit(PATIENCE);
    assert!(
        !status.success(),
        "tickd exited {status} after its log failed"
    );
    println!("disk_budget_enospc acknowledged={}", acknowledged.len());

    let large = scratch.path().join("large");
    std::fs::create_dir_all(&large).unwrap();
    for file in std::fs::read_dir(&small).unwrap().flatten() {
        std::fs::copy(file.path(), large.join(file.file_name())).unwrap();
    }
    drop(tmpfs);
    let daemon = Daemon::start(tickd(&large, "64MiB"));
    let mut client = connect(&daemon).await;
    for id in &acknowledged {
        let found = get(&mut client, by_id("disk", id)).await;
        assert!(found.is_ok(), "acknowledged timer {id} lost: {found:?}");
    }
}
