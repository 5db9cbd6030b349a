//! What recovery does with a damaged log: a torn final append is dropped with a warning;
//! any other damage stops start-up naming the file and byte offset and leaves every file
//! byte for byte as it was; `--recover-truncate` keeps what precedes the damage and sets
//! the rest aside; `tickd check` reports all this without changing anything.

// Record literals end in `..Default::default()` so that new record fields do not break them.
#![allow(clippy::needless_update)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::daemon::{tickd_command, Daemon};
use common::data_dir::*;
use common::*;
use tickd::local::store::frame::{self, FILE_HEADER, HEADER_BYTES};

/// The smallest unit a disk writes whole: where space a crash left unwritten can begin.
const SECTOR_BYTES: usize = 512;
use tickd::local::store::records::{self as durable, record::Kind, Record};
use tickd::local::store::{repair, Store, StoreError, SyncMode};
use tickd::metrics::Metrics;
use tonic::transport::Channel;

use tickd::proto::timers_client::TimersClient;

const PATIENCE: Duration = Duration::from_secs(30);

/// Every file of a data directory, by name, with its bytes.
fn snapshot_dir(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect()
}

/// Where the frames of an intact format-2 file start.
fn frame_offsets(bytes: &[u8]) -> Vec<usize> {
    assert_eq!(&bytes[..FILE_HEADER.len()], &FILE_HEADER);
    let mut offsets = Vec::new();
    let mut offset = FILE_HEADER.len();
    while offset < bytes.len() {
        offsets.push(offset);
        let length = u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap()) as usize;
        offset += HEADER_BYTES + length;
    }
    assert_eq!(offset, bytes.len(), "the file is made of whole frames");
    offsets
}

/// The ids of the registrations in `bytes`, an intact run of frames, as the API shows them.
fn registered_ids(bytes: &[u8]) -> Vec<String> {
    let mut file = FILE_HEADER.to_vec();
    file.extend_from_slice(bytes);
    let decoded = frame::decode_all(&file);
    assert!(decoded.damage.is_none());
    decoded
        .records
        .into_iter()
        .filter_map(|record| match record.kind {
            Some(Kind::Registered(timer)) => Some(format!("{:016x}", timer.id)),
            _ => None,
        })
        .collect()
}

fn command(data: &Path, configure: impl FnOnce(&mut Command)) -> Command {
    let mut command = tickd_command();
    command.arg("--data-dir").arg(data);
    command.args(["--metrics-listen", "127.0.0.1:0"]);
    configure(&mut command);
    command
}

fn start(data: &Path, configure: impl FnOnce(&mut Command)) -> Daemon {
    Daemon::start(command(data, configure))
}

async fn client_of(daemon: &Daemon) -> TimersClient<Channel> {
    TimersClient::connect(format!("http://{}", daemon.addr))
        .await
        .expect("connect")
}

/// SIGTERM, and the clean exit that follows.
fn stop(mut daemon: Daemon) {
    daemon.signal("TERM");
    let status = daemon.wait_for_exit(PATIENCE);
    assert!(status.success(), "{status}: {}", daemon.log_text());
}

/// Starts tickd on `data`, expecting it to refuse; returns its log.
fn refused(data: &Path, configure: impl FnOnce(&mut Command)) -> String {
    let (status, log) = Daemon::refused(command(data, configure), PATIENCE);
    assert!(!status.success(), "refused: {log}");
    assert!(
        !log.contains("tickd serving"),
        "a refused start claimed to serve: {log}"
    );
    log
}

/// Registers `count` timers due in an hour, in batches, on a fresh daemon, then stops it.
/// Returns their ids in registration order.
async fn registered_then_stopped(data: &Path, count: usize) -> Vec<String> {
    let daemon = start(data, |_| {});
    let mut client = client_of(&daemon).await;
    let mut ids = Vec::new();
    for batch in 0..count.div_ceil(100) {
        let timers = (batch * 100..count.min(batch * 100 + 100))
            .map(|index| spec("damage", 3_600_000, format!("timer {index}").as_bytes()))
            .collect();
        let results = client
            .new_timeouts(NewTimeoutsRequest { timers })
            .await
            .expect("register")
            .into_inner()
            .results;
        for result in results {
            match result.result {
                Some(new_timeout_result::Result::Registered(registered)) => {
                    ids.push(registered.timer.unwrap().id)
                }
                other => panic!("not registered: {other:?}"),
            }
        }
    }
    drop(client);
    stop(daemon);
    ids
}

async fn pending_ids(daemon: &Daemon) -> Vec<String> {
    let mut client = client_of(daemon).await;
    let mut ids = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .pending(PendingRequest {
                namespace: "damage".into(),
                page_size: 1_000,
                page_token,
                ..Default::default()
            })
            .await
            .expect("pending")
            .into_inner();
        ids.extend(page.timers.into_iter().map(|timer| timer.id));
        if page.next_page_token.is_empty() {
            ids.sort();
            return ids;
        }
        page_token = page.next_page_token;
    }
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

/// Issue 17's reproduction: the length of frame 10 of the newest segment overwritten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_length_stops_start_up_and_recover_truncate_sets_the_rest_aside() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let ids = registered_then_stopped(&data, 1_000).await;
    let segment = segments(&data).pop().unwrap();
    let original = std::fs::read(&segment).unwrap();
    // Frame 0 is the boot's record, which every start writes first; 1 to 9 registrations.
    let offset = frame_offsets(&original)[10];
    let mut damaged = original.clone();
    damaged[offset..offset + 4].copy_from_slice(&0x20_0000u32.to_le_bytes());
    std::fs::write(&segment, &damaged).unwrap();
    let before = snapshot_dir(&data);

    let log = refused(&data, |_| {});
    let name = segment.file_name().unwrap().to_str().unwrap();
    assert!(log.contains(name), "names the segment: {log}");
    assert!(log.contains(&format!("byte offset {offset}")), "{log}");
    assert!(log.contains("checksum"), "says what is wrong: {log}");
    assert_eq!(snapshot_dir(&data), before, "every file as it was");

    let daemon = start(&data, |command| {
        command.arg("--recover-truncate");
    });
    let kept = registered_ids(&original[FILE_HEADER.len()..offset]);
    assert_eq!(kept.len(), 9, "the registrations in frames 1 to 9");
    assert_eq!(kept[..], ids[..kept.len()]);
    assert_eq!(pending_ids(&daemon).await, sorted(kept.clone()));
    assert_eq!(daemon.count("recover-truncate: moved"), 1);
    stop(daemon);
    let aside = PathBuf::from(format!("{}.damaged-at-{offset}", segment.display()));
    assert_eq!(
        std::fs::read(&aside).unwrap(),
        damaged[offset..],
        "the tail, as it was"
    );
    assert_eq!(std::fs::read(&segment).unwrap(), original[..offset]);

    // Repaired: a plain start recovers the same timers.
    let daemon = start(&data, |_| {});
    assert_eq!(pending_ids(&daemon).await, sorted(kept));
    stop(daemon);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_final_record_is_dropped_with_a_warning_zeros_after_it_or_not() {
    // Cut mid-record; and the record's end never written, zeros in its place and past it, as
    // a crash can leave space whose data never reached the disk: from a sector boundary
    // inside the record, or from the record's start if none is inside it.
    for zero_filled in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let ids = registered_then_stopped(&data, 20).await;
        let segment = segments(&data).pop().unwrap();
        let bytes = std::fs::read(&segment).unwrap();
        let last = *frame_offsets(&bytes).last().unwrap();
        let torn = if zero_filled {
            let unwritten_from = (last + HEADER_BYTES + 4) / SECTOR_BYTES * SECTOR_BYTES;
            let mut torn = bytes[..unwritten_from.max(last)].to_vec();
            torn.resize(bytes.len() + 4096, 0);
            torn
        } else {
            bytes[..bytes.len() - 3].to_vec()
        };
        std::fs::write(&segment, torn).unwrap();

        let daemon = start(&data, |_| {});
        assert_eq!(pending_ids(&daemon).await, sorted(ids[..19].to_vec()));
        let warnings = daemon.lines_with(&["dropping a torn record"]);
        assert_eq!(warnings.len(), 1, "{}", daemon.log_text());
        assert!(
            warnings[0].contains(&format!("offset={last}")),
            "{warnings:?}"
        );
        stop(daemon);
        assert_eq!(std::fs::read(&segment).unwrap(), bytes[..last]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_last_record_whose_final_byte_turned_to_zero_stops_start_up() {
    // What the simulation found (seed 12,753): a bit flip left the newest segment's final
    // record whole in length but ending in a zero. Taken for a torn append, it was cut and
    // an acknowledged record lost; it is damage, and refused.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    registered_then_stopped(&data, 20).await;
    let segment = segments(&data).pop().unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    let last = *frame_offsets(&bytes).last().unwrap();
    let final_byte = bytes.last_mut().unwrap();
    assert_ne!(*final_byte, 0, "the final record ends in a non-zero byte");
    *final_byte = 0;
    std::fs::write(&segment, &bytes).unwrap();
    let before = snapshot_dir(&data);

    let log = refused(&data, |_| {});
    assert!(log.contains(&format!("byte offset {last}")), "{log}");
    assert_eq!(snapshot_dir(&data), before, "nothing cut or rewritten");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_byte_in_a_record_stops_start_up_and_check_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let ids = registered_then_stopped(&data, 50).await;

    let good = check(&data);
    assert!(good.status.success(), "{}", good.text);
    assert!(good.text.contains("result=ok"), "{}", good.text);
    assert!(good.text.contains("live_timers=50"), "{}", good.text);

    let segment = segments(&data).pop().unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    // Past the boot's record (frame 0) and 20 registrations.
    let offset = frame_offsets(&bytes)[21];
    bytes[offset + HEADER_BYTES + 5] ^= 0x40;
    std::fs::write(&segment, &bytes).unwrap();
    let before = snapshot_dir(&data);

    let log = refused(&data, |_| {});
    assert!(log.contains(&segment.display().to_string()), "{log}");
    assert!(log.contains(&format!("byte offset {offset}")), "{log}");
    assert_eq!(snapshot_dir(&data), before);

    let damaged = check(&data);
    assert_eq!(damaged.status.code(), Some(1), "{}", damaged.text);
    let line = format!("damage path={} offset={offset}", segment.display());
    assert!(damaged.text.contains(&line), "{}", damaged.text);
    assert!(damaged.text.contains("result=damaged"), "{}", damaged.text);
    assert!(damaged.text.contains("live_timers=20"), "{}", damaged.text);
    assert_eq!(snapshot_dir(&data), before, "check changes nothing");

    // The environment variable works as the flag does.
    let daemon = start(&data, |command| {
        command.env("TICKD_RECOVER_TRUNCATE", "1");
    });
    assert_eq!(pending_ids(&daemon).await, sorted(ids[..20].to_vec()));
    stop(daemon);
    assert!(check(&data).status.success());
}

struct Checked {
    status: std::process::ExitStatus,
    text: String,
}

fn check(data: &Path) -> Checked {
    let output = Command::new(env!("CARGO_BIN_EXE_tickd"))
        .arg("check")
        .arg(data)
        .output()
        .expect("run tickd check");
    Checked {
        status: output.status,
        text: String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr),
    }
}

/// Writes `count` registrations through the store directly, in a segment of its own.
fn fill_log(dir: &Path, first: u64, count: u64) -> PathBuf {
    let (store, handle, _) =
        Store::open(dir, SyncMode::Always, Metrics::new(), 0, |_| {}).expect("open");
    for id in first..first + count {
        let mut batch = tickd::local::store::Batch::default();
        batch.record(&registered(id));
        handle.append(batch);
    }
    drop(handle);
    store.join();
    segments(dir).pop().expect("a segment")
}

fn registered(id: u64) -> Record {
    Record {
        kind: Some(Kind::Registered(durable::Timer {
            id,
            namespace: "ns".into(),
            key: format!("key-{id}"),
            deadline_unix_nanos: 1_700_000_000_000_000_000 + id,
            payload: vec![id as u8; 20].into(),
            ..Default::default()
        })),
    }
}

fn replayed_ids(dir: &Path) -> Result<Vec<u64>, StoreError> {
    let mut ids = Vec::new();
    let (store, handle, _) = Store::open(dir, SyncMode::Always, Metrics::new(), 0, |record| {
        if let Some(Kind::Registered(timer)) = record.kind {
            ids.push(timer.id);
        }
    })?;
    drop(handle);
    store.join();
    Ok(ids)
}

fn assert_corrupt_at(error: StoreError, file: &Path, at: usize) {
    match &error {
        StoreError::Corrupt { path, offset, .. } => {
            assert_eq!((path.as_path(), *offset), (file, at as u64), "{error}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn a_whole_last_record_that_fails_its_checksum_is_damage_not_a_torn_append() {
    let dir = tempfile::tempdir().unwrap();
    let segment = fill_log(dir.path(), 1, 10);
    let mut bytes = std::fs::read(&segment).unwrap();
    let last = *frame_offsets(&bytes).last().unwrap();
    bytes[last + HEADER_BYTES + 2] ^= 0x01;
    std::fs::write(&segment, &bytes).unwrap();
    let before = snapshot_dir(dir.path());
    let error = replayed_ids(dir.path()).expect_err("refused");
    assert_corrupt_at(error, &segment, last);
    assert_eq!(snapshot_dir(dir.path()), before);
}

#[test]
fn only_the_newest_segment_may_end_in_a_torn_append() {
    let dir = tempfile::tempdir().unwrap();
    let older = fill_log(dir.path(), 1, 10);
    let newer = fill_log(dir.path(), 11, 10);
    assert_ne!(older, newer);
    let bytes = std::fs::read(&older).unwrap();
    let last = *frame_offsets(&bytes).last().unwrap();
    std::fs::write(&older, &bytes[..bytes.len() - 3]).unwrap();
    let error = replayed_ids(dir.path()).expect_err("a cut in an older segment is damage");
    assert_corrupt_at(error, &older, last);

    // Set aside: the older segment's tail, and the newer segment whole.
    let newer_bytes = std::fs::read(&newer).unwrap();
    let moved = repair::set_aside_damage(dir.path())
        .unwrap()
        .expect("moved");
    assert_eq!(
        (moved.path.as_path(), moved.offset),
        (older.as_path(), last as u64)
    );
    assert_eq!(
        std::fs::read(&moved.tail).unwrap(),
        bytes[last..bytes.len() - 3]
    );
    assert_eq!(moved.renamed.len(), 1);
    assert_eq!(moved.renamed[0].0, newer);
    assert_eq!(std::fs::read(&moved.renamed[0].1).unwrap(), newer_bytes);
    assert_eq!(
        replayed_ids(dir.path()).unwrap(),
        (1..=9).collect::<Vec<_>>()
    );
    assert!(repair::set_aside_damage(dir.path()).unwrap().is_none());
}
