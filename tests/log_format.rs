//! The log's format: files written today are format 2 (a file header, checksummed frame
//! headers); data directories of format 1, written before, still recover; the decoder of
//! both survives any bytes and agrees with the fuzzer's seeds.

// Record literals end in `..Default::default()` so that new record fields do not break them.
#![allow(clippy::needless_update)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::rng::Rng;
use common::*;
use prost::Message;
use tickd::local::store::frame;
use tickd::local::store::records::{self as durable, record::Kind, Record};
use tickd::local::store::SyncMode;
use tonic::transport::Channel;

use tickd::proto::timers_client::TimersClient;

const PATIENCE: Duration = Duration::from_secs(30);

async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future)
        .await
        .expect("no answer in time")
}

fn random_record(rng: &mut Rng) -> Record {
    let timer = |rng: &mut Rng| durable::Timer {
        id: rng.next(),
        namespace: "ns".repeat(rng.below_usize(4)),
        key: "k".repeat(rng.below_usize(3)),
        deadline_unix_nanos: rng.next(),
        payload: {
            let length = rng.below_usize(64);
            rng.bytes(length).into()
        },
        repeat_nanos: rng.next() % 3,
        ttl_nanos: rng.next() % 3,
        fired_count: rng.next() % 5,
        ..Default::default()
    };
    let kind = match rng.below_usize(6) {
        0 => Kind::Registered(timer(rng)),
        1 => Kind::Cancelled(durable::Cancelled {
            id: rng.next(),
            namespace: "ns".into(),
            ..Default::default()
        }),
        2 => Kind::Touched(durable::Touched {
            id: rng.next(),
            namespace: "ns".into(),
            deadline_unix_nanos: rng.next(),
            ..Default::default()
        }),
        3 => Kind::Fired(durable::Fired {
            timer: Some(timer(rng)),
            fired_unix_nanos: rng.next(),
            rearmed_deadline_unix_nanos: rng.next() % 2,
            ..Default::default()
        }),
        4 => Kind::Settled(durable::Settled {
            id: rng.next(),
            fired_count: rng.next(),
            ..Default::default()
        }),
        _ => Kind::NextId(rng.next()),
    };
    Record { kind: Some(kind) }
}

/// A record framed as format 1 wrote it: `[length][crc32(record)][record]`.
fn legacy_frame(record: &Record, out: &mut Vec<u8>) {
    let body = record.encode_to_vec();
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
}

/// A whole file of `records` in format 2 (`legacy` false) or 1, and where its first frame's
/// length field is.
fn file_of(records: &[Record], legacy: bool) -> (Vec<u8>, usize) {
    let mut bytes = Vec::new();
    if !legacy {
        bytes.extend_from_slice(&frame::FILE_HEADER);
    }
    let first = bytes.len();
    for record in records {
        if legacy {
            legacy_frame(record, &mut bytes);
        } else {
            frame::encode(record, &mut bytes);
        }
    }
    (bytes, first)
}

fn check_decoded(bytes: &[u8]) -> frame::Decoded {
    let decoded = frame::decode_all(bytes);
    assert!(decoded.valid_bytes <= bytes.len());
    assert_eq!(decoded.damage.is_none(), decoded.valid_bytes == bytes.len());
    if decoded.damage.is_none() {
        assert!(!decoded.torn);
    }
    // The intact prefix decodes to the same records on its own.
    let prefix = frame::decode_all(&bytes[..decoded.valid_bytes]);
    assert!(prefix.damage.is_none());
    assert_eq!(prefix.records, decoded.records);
    decoded
}

#[test]
fn the_decoder_never_panics_on_random_or_mutated_frames() {
    let mut rng = Rng(0x7469_636b_6421);
    for _ in 0..2_000 {
        let length = rng.below_usize(300);
        check_decoded(&rng.bytes(length));
        let mut headed = frame::FILE_HEADER.to_vec();
        headed.extend(rng.bytes(length));
        check_decoded(&headed);
    }
    for round in 0..6_000 {
        let legacy = round % 2 == 1;
        let records: Vec<Record> = (0..1 + rng.below_usize(6))
            .map(|_| random_record(&mut rng))
            .collect();
        let (bytes, first) = file_of(&records, legacy);
        let decoded = check_decoded(&bytes);
        assert_eq!(decoded.records, records, "intact frames round-trip");
        assert!(decoded.damage.is_none());

        let mut mutated = bytes.clone();
        match rng.below_usize(6) {
            0 => {
                let at = rng.below_usize(mutated.len());
                mutated[at] ^= 1 << rng.below_usize(8);
            }
            1 => mutated.truncate(rng.below_usize(bytes.len())),
            2 => {
                let at = rng.below_usize(mutated.len());
                mutated.insert(at, rng.next() as u8);
            }
            3 => {
                // A length field (of the first frame) made huge or slightly off.
                let field = [
                    u32::MAX,
                    frame::MAX_RECORD_BYTES as u32 + 1,
                    rng.next() as u32 % 512,
                ];
                mutated[first..first + 4].copy_from_slice(&field[rng.below_usize(3)].to_le_bytes());
            }
            4 => {
                let extra = rng.below_usize(16);
                mutated.extend(rng.bytes(extra));
            }
            _ => {
                for _ in 0..1 + rng.below_usize(8) {
                    let at = rng.below_usize(mutated.len());
                    mutated[at] = rng.next() as u8;
                }
            }
        }
        let decoded = check_decoded(&mutated);
        // What decodes is the intact frames before the damage, as written (a damaged frame
        // passing its checksum is a 1 in 2^32 event; the seed is fixed).
        assert!(decoded.records.len() <= records.len());
        assert_eq!(decoded.records[..], records[..decoded.records.len()]);
    }
}

/// The fuzzer's seed files (`fuzz/seeds/decode_frames`) are valid files of both formats, so
/// the fuzzer starts from records that pass their checksums.
#[test]
fn the_fuzz_seeds_are_valid_frames() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/decode_frames");
    let kinds = |decoded: &frame::Decoded| -> Vec<_> {
        decoded
            .records
            .iter()
            .map(|record| std::mem::discriminant(record.kind.as_ref().unwrap()))
            .collect()
    };
    let legacy = check_decoded(&std::fs::read(seeds.join("log")).unwrap());
    let current = check_decoded(&std::fs::read(seeds.join("v2_log")).unwrap());
    assert!(legacy.damage.is_none() && current.damage.is_none());
    assert_eq!(kinds(&legacy).len(), 6, "one record of each kind");
    assert_eq!(
        current.records, legacy.records,
        "the same records in both formats"
    );
    for name in ["one_registered", "v2_one_registered"] {
        let decoded = check_decoded(&std::fs::read(seeds.join(name)).unwrap());
        assert_eq!((decoded.records.len(), decoded.damage), (1, None));
    }
    for name in ["torn", "v2_torn"] {
        let decoded = check_decoded(&std::fs::read(seeds.join(name)).unwrap());
        assert_eq!(decoded.records.len(), 1);
        assert_eq!(decoded.damage, Some(frame::Damage::BodyCut));
        assert!(decoded.torn);
    }
}

/// `tests/fixtures/legacy-v1` was written by tickd before format 2 (`--snapshot-after-bytes
/// 380`, so it holds a snapshot and a segment). In namespace `legacy`: key-1 to key-8, each
/// due on 2099-01-0N with payload "payload N", key-3 cancelled; `repeating` (2099-02-01,
/// every hour) and `lease` (a ttl of 800,000 hours, touched). In namespace `due`: `due`, which
/// fired and was never acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_of_format_1_recovers_and_continues_in_format_2() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/legacy-v1");
    let mut old_files = Vec::new();
    for entry in std::fs::read_dir(&fixture).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        assert!(!bytes.starts_with(b"TICKD"), "the fixture is format 1");
        std::fs::write(data.join(path.file_name().unwrap()), &bytes).unwrap();
        old_files.push(path.file_name().unwrap().to_owned());
    }

    let server = start_on(&data).await;
    let mut client = server.client().await;
    assert_legacy_timers(&mut client).await;
    let mut stream = subscribe(&mut client, "due", 30_000, 10).await;
    let expiration = within(next_expiration(&mut stream)).await;
    let timer = expiration.timer.as_ref().unwrap();
    assert_eq!(timer.key, "due");
    assert_eq!(timer.payload, &b"fired before the upgrade"[..]);
    ack(&mut client, "due", vec![expiration.delivery_id]).await;
    drop(stream);
    drop(client);
    server.stop().await;

    // New writes went to a new segment, in format 2; the old files are read as they are.
    let mut names: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    names.sort();
    let newest = names.last().unwrap();
    assert!(!old_files.contains(newest), "a new segment: {names:?}");
    let bytes = std::fs::read(data.join(newest)).unwrap();
    assert_eq!(&bytes[..8], &frame::FILE_HEADER);
    let decoded = frame::decode_all(&bytes);
    assert!(decoded.damage.is_none());
    assert!(decoded
        .records
        .iter()
        .any(|record| matches!(record.kind, Some(Kind::Settled(_)))));

    // Both formats side by side recover, and the acknowledged expiration stays settled.
    let server = start_on(&data).await;
    let mut client = server.client().await;
    assert_legacy_timers(&mut client).await;
    let pending = pending_count(&mut client, "due").await;
    assert_eq!(pending, 0);
    drop(client);
    server.stop().await;
}

async fn start_on(data: &Path) -> TestServer {
    let data = data.to_owned();
    TestServer::start_with(config(move |c| {
        c.data_dir = data;
        c.sync = SyncMode::Always;
    }))
    .await
}

/// The fixture's pending timers, looked up by key.
async fn assert_legacy_timers(client: &mut TimersClient<Channel>) {
    assert_eq!(pending_count(client, "legacy").await, 9);
    let lookup = |key: &str| GetRequest {
        timer: by_key("legacy", key),
    };
    for n in [1, 2, 4, 5, 6, 7, 8] {
        let timer = client
            .get(lookup(&format!("key-{n}")))
            .await
            .expect("get")
            .into_inner()
            .timer
            .unwrap();
        assert_eq!(timer.payload, format!("payload {n}").into_bytes());
        let deadline = timer.deadline.unwrap();
        // 2099-01-0N, midnight UTC.
        assert_eq!(deadline.seconds, 4_070_908_800 + (n - 1) * 86_400);
    }
    let missing = client.get(lookup("key-3")).await.expect_err("cancelled");
    assert_eq!(missing.code(), tonic::Code::NotFound);
    let repeating = client.get(lookup("repeating")).await.unwrap().into_inner();
    let repeating = repeating.timer.unwrap();
    assert_eq!(repeating.repeat.unwrap().seconds, 3_600);
    let lease = client.get(lookup("lease")).await.unwrap().into_inner();
    let lease = lease.timer.unwrap();
    assert_eq!(lease.payload, &b"lease"[..]);
    assert_eq!(lease.ttl.unwrap().seconds, 800_000 * 3_600);
}
