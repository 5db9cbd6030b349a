//! Signed pushes (`--sink-secret-file`), checked as a receiver checks them: every push of
//! a real tickd to a real HTTP sink is verified with the Standard Webhooks reference
//! library (Python's `standardwebhooks`, in a venv of `tests/sink_signing/requirements.txt`)
//! across a secret rotation made while tickd runs; a body changed by one byte fails; and no
//! secret shows in tickd's log (at debug), its `/metrics`, `SinkStatus` or `GetSink`.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use common::daemon::{tickd_command, Daemon};
use common::http_sink::{always, HttpSink, Push};
use common::metrics::fetch_metrics;
use common::tooling::{python_venv, repo, run_with_stdin, skip_polyglot};
use common::*;
use tickd::proto::sinks_client::SinksClient;
use tickd::proto::timers_client::TimersClient;
use tickd::proto::{GetSinkRequest, ListSinksRequest, SetSinkRequest, SinkStatusRequest};
use tonic::transport::Channel;

const NAMESPACE: &str = "signed";
/// Timers registered in each phase of the rotation: many pushes, each verified.
const PER_PHASE: usize = 300;

/// A secret in the spec's form, of 32 bytes `byte`.
fn secret(byte: u8) -> String {
    format!("whsec_{}", STANDARD.encode([byte; 32]))
}

/// Writes `secrets` to the file, one per line, with a modification time past any before
/// (`generation` tens of seconds ahead), whatever the file system's clock granularity.
fn write_secrets(path: &Path, secrets: &[&str], generation: u64) {
    std::fs::write(path, secrets.join("\n") + "\n").unwrap();
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_modified(SystemTime::now() + Duration::from_secs(10 * generation))
        .unwrap();
}

fn signatures(push: &Push) -> usize {
    push.webhook[2]
        .as_deref()
        .map_or(0, |signature| signature.split(' ').count())
}

/// Registers `count` timers due at once and waits for a push of each; their pushes.
async fn round(client: &mut TimersClient<Channel>, sink: &HttpSink, count: usize) -> Vec<Push> {
    let ids: BTreeSet<String> = register_all(client, specs(NAMESPACE, count, 20))
        .await
        .into_iter()
        .collect();
    let of_round = |pushes: &[Push]| -> Vec<Push> {
        pushes
            .iter()
            .filter(|push| ids.iter().any(|id| push.key.contains(id.as_str())))
            .cloned()
            .collect()
    };
    sink.wait_for("a push of every timer of the round", |pushes| {
        of_round(pushes).len() >= count
    })
    .await;
    of_round(&sink.pushes())
}

/// Rounds of a few timers until a round's pushes all carry `wanted` signatures: the file
/// was read again. The pushes of those rounds.
async fn until_signed_with(
    client: &mut TimersClient<Channel>,
    sink: &HttpSink,
    wanted: usize,
) -> Vec<Push> {
    let mut seen = Vec::new();
    for _ in 0..1_000 {
        let pushes = round(client, sink, 5).await;
        let done = pushes.iter().all(|push| signatures(push) == wanted);
        seen.extend(pushes);
        if done {
            return seen;
        }
    }
    panic!("pushes never came signed with {wanted} secrets");
}

/// One check for the verifier: `push` (its body changed if `tampered`) under `secret`.
fn check(push: &Push, secret: &str, tampered: bool) -> String {
    let [id, timestamp, signature] = push.webhook.clone();
    let mut body = push.body.to_vec();
    if tampered {
        body[0] ^= 1;
    }
    serde_json::json!({
        "secret": secret,
        "headers": {
            "webhook-id": id.expect("webhook-id"),
            "webhook-timestamp": timestamp.expect("webhook-timestamp"),
            "webhook-signature": signature.expect("webhook-signature"),
        },
        "body": STANDARD.encode(body),
    })
    .to_string()
}

/// The verifier's verdict on each check, in order.
fn verdicts(python: &Path, checks: &[String]) -> Vec<String> {
    let mut verify = Command::new(python);
    verify.arg(repo().join("tests/sink_signing/verify.py"));
    let output = run_with_stdin(verify, &(checks.join("\n") + "\n"))
        .unwrap_or_else(|failure| panic!("{failure}"));
    let verdicts: Vec<String> = String::from_utf8(output.stdout)
        .expect("utf-8")
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(verdicts.len(), checks.len(), "a verdict per check");
    verdicts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_verifies_every_push_across_a_rotation_and_no_secret_is_shown() {
    if skip_polyglot("sink_signing (the standardwebhooks library from PyPI)") {
        return;
    }
    let python = python_venv(
        "signing-venv",
        &repo().join("tests/sink_signing/requirements.txt"),
    )
    .unwrap_or_else(|failure| panic!("{failure}"));
    let (old, new) = (secret(0xa1), secret(0xb2));
    let dir = tempfile::tempdir().unwrap();
    let secrets = dir.path().join("secrets");
    write_secrets(&secrets, &[&old], 0);
    let sink = HttpSink::start(always(200)).await;
    let mut command = tickd_command();
    command
        .args(["--sink", &format!("{NAMESPACE}={}", sink.url("/hook"))])
        .arg("--sink-secret-file")
        .arg(format!("{NAMESPACE}={}", secrets.display()))
        .args(["--metrics-listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .env("TICKD_LOG", "debug");
    let daemon = Daemon::start(command);
    let mut client = TimersClient::connect(format!("http://{}", daemon.addr))
        .await
        .unwrap();

    let mut checks = Vec::new();
    let mut expected = Vec::new();
    let mut expect = |push: &Push, secret: &str, tampered: bool, verified: bool| {
        checks.push(check(push, secret, tampered));
        expected.push(verified);
    };
    // Before the rotation: the old secret alone.
    for push in round(&mut client, &sink, PER_PHASE).await {
        assert_eq!(signatures(&push), 1, "{push:?}");
        assert_eq!(push.webhook[0].as_deref(), Some(push.key.as_str()));
        expect(&push, &old, false, true);
        expect(&push, &new, false, false);
        expect(&push, &old, true, false);
    }
    // Both secrets: every push verifies under either, so receivers move at their pace.
    write_secrets(&secrets, &[&old, &new], 1);
    for push in until_signed_with(&mut client, &sink, 2).await {
        expect(&push, &old, false, true);
    }
    for push in round(&mut client, &sink, PER_PHASE).await {
        assert_eq!(signatures(&push), 2, "{push:?}");
        expect(&push, &old, false, true);
        expect(&push, &new, false, true);
        expect(&push, &new, true, false);
    }
    // The old one removed: pushes verify under the new one only.
    write_secrets(&secrets, &[&new], 2);
    for push in until_signed_with(&mut client, &sink, 1).await {
        expect(&push, &new, false, true);
    }
    for push in round(&mut client, &sink, PER_PHASE).await {
        expect(&push, &new, false, true);
        expect(&push, &old, false, false);
        expect(&push, &new, true, false);
    }
    let verdicts = verdicts(&python, &checks);
    for (index, (verdict, verified)) in verdicts.iter().zip(&expected).enumerate() {
        assert_eq!(
            verdict == "ok",
            *verified,
            "check {index}: {verdict} for {}",
            checks[index]
        );
    }
    eprintln!(
        "sink_signing verified={} refused={}",
        expected.iter().filter(|verified| **verified).count(),
        expected.iter().filter(|verified| !**verified).count()
    );

    // No secret anywhere tickd shows things: its log at debug, /metrics, the Sinks API.
    let mut sinks = SinksClient::connect(format!("http://{}", daemon.addr))
        .await
        .unwrap();
    let status = sinks
        .sink_status(SinkStatusRequest {
            namespace: String::new(),
            all: true,
        })
        .await
        .expect("sink status")
        .into_inner();
    let got = sinks
        .get_sink(GetSinkRequest {
            namespace: NAMESPACE.into(),
        })
        .await
        .expect("get sink")
        .into_inner();
    let metrics = fetch_metrics(daemon.metrics_addr(), None).await.body;
    let shown = [
        ("the log", daemon.log_text()),
        ("/metrics", metrics),
        ("SinkStatus", format!("{status:?}")),
        ("GetSink", format!("{got:?}")),
    ];
    for secret in [&old, &new] {
        let encoded = secret.trim_start_matches("whsec_");
        for (where_shown, text) in &shown {
            assert!(!text.contains(encoded), "a secret in {where_shown}");
        }
    }
    assert!(
        status.sinks.iter().any(|sink| sink.delivered > 0),
        "{status:?}"
    );
}

/// A secret file tickd cannot use stops the start, the message naming the flag, the file
/// and the line, never what the line holds.
#[test]
fn an_unusable_secret_file_refuses_the_start_without_echoing_it() {
    let dir = tempfile::tempdir().unwrap();
    let secrets = dir.path().join("secrets");
    let leaked = "whsec_not-base64-hunter2";
    std::fs::write(&secrets, format!("{}\n{leaked}\n", secret(1))).unwrap();
    let mut command = tickd_command();
    command
        .args(["--sink", "n=http://127.0.0.1:9/", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--sink-secret-file")
        .arg(format!("n={}", secrets.display()));
    let (status, log) = Daemon::refused(command, rpc::PATIENCE);
    assert!(!status.success(), "{log}");
    assert!(
        log.contains(&format!("--sink-secret-file {}: line 2", secrets.display())),
        "{log}"
    );
    assert!(!log.contains("hunter2"), "{log}");
}

/// Secrets given in SetSink rather than a file: every push verifies under them, a rotation
/// is a SetSink with both then the new one, they are kept across SIGKILL, a secret tickd
/// cannot use is INVALID_ARGUMENT naming `secrets` (never echoing it) and changes nothing,
/// and none shows in the log, `/metrics`, SinkStatus or GetSink (which says `signed`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_given_in_set_sink_sign_every_push_across_a_rotation_and_a_restart() {
    if skip_polyglot("sink_signing (the standardwebhooks library from PyPI)") {
        return;
    }
    let python = python_venv(
        "signing-venv",
        &repo().join("tests/sink_signing/requirements.txt"),
    )
    .unwrap_or_else(|failure| panic!("{failure}"));
    let (old, new) = (secret(0xc3), secret(0xd4));
    let dir = tempfile::tempdir().unwrap();
    let sink = HttpSink::start(always(200)).await;
    let start = || {
        let mut command = tickd_command();
        command
            .args(["--metrics-listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .env("TICKD_LOG", "debug");
        Daemon::start(command)
    };
    let mut daemon = start();
    let connect = |daemon: &Daemon| {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", daemon.addr))
            .unwrap()
            .connect_lazy();
        (
            SinksClient::new(channel.clone()),
            TimersClient::new(channel),
        )
    };
    let (mut sinks, mut client) = connect(&daemon);
    let set = |secrets: &[&str]| SetSinkRequest {
        namespace: NAMESPACE.into(),
        url: sink.url("/api"),
        secrets: secrets.iter().map(|secret| (*secret).to_owned()).collect(),
        ..Default::default()
    };
    let answer = sinks.set_sink(set(&[&old])).await.unwrap().into_inner();
    assert!(answer.sink.unwrap().signed);

    let mut checks = Vec::new();
    let mut expected = Vec::new();
    let mut expect = |push: &Push, secret: &str, tampered: bool, verified: bool| {
        checks.push(check(push, secret, tampered));
        expected.push(verified);
    };
    for push in round(&mut client, &sink, 100).await {
        expect(&push, &old, false, true);
        expect(&push, &old, true, false);
    }
    // Refused, and nothing changes: still signed with the old secret alone.
    let short = format!("whsec_{}", STANDARD.encode([7u8; 8]));
    for unusable in [
        vec!["not-a-secret".to_owned()],
        vec![short.clone()],
        vec![old.clone(); 5],
    ] {
        let request = SetSinkRequest {
            secrets: unusable.clone(),
            ..set(&[])
        };
        let refused = sinks.set_sink(request).await.expect_err("unusable");
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
        assert!(refused.message().contains("secrets"), "{refused:?}");
        assert!(
            !refused.message().contains(&short[6..]),
            "echoed: {refused:?}"
        );
    }
    // A rotation: both, then the new one; each answered before any push of the next round.
    let both = sinks
        .set_sink(set(&[&old, &new]))
        .await
        .unwrap()
        .into_inner();
    assert!(both.changed);
    for push in round(&mut client, &sink, 100).await {
        assert_eq!(signatures(&push), 2, "{push:?}");
        expect(&push, &old, false, true);
        expect(&push, &new, false, true);
    }
    sinks.set_sink(set(&[&new])).await.unwrap();
    daemon.kill();
    let daemon = start();
    let (mut sinks, mut client) = connect(&daemon);
    for push in round(&mut client, &sink, 100).await {
        assert_eq!(signatures(&push), 1, "{push:?}");
        expect(&push, &new, false, true);
        expect(&push, &old, false, false);
        expect(&push, &new, true, false);
    }
    // A new rate alone keeps the secrets given before.
    let rated = SetSinkRequest {
        rate: "1000/s".into(),
        ..set(&[])
    };
    let answer = sinks.set_sink(rated.clone()).await.unwrap().into_inner();
    assert!(
        answer.changed && answer.sink.as_ref().unwrap().signed,
        "{answer:?}"
    );
    for push in round(&mut client, &sink, 50).await {
        assert_eq!(signatures(&push), 1, "{push:?}");
        expect(&push, &new, false, true);
    }
    // Clearing them while giving some is refused, and changes nothing.
    let both_ways = SetSinkRequest {
        clear_secrets: true,
        ..set(&[&old])
    };
    let refused = sinks.set_sink(both_ways).await.expect_err("both");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("clear_secrets"), "{refused:?}");
    for push in round(&mut client, &sink, 50).await {
        expect(&push, &new, false, true);
    }
    // Cleared: no --sink-secret-file here, so unsigned.
    let cleared = SetSinkRequest {
        clear_secrets: true,
        ..rated
    };
    let answer = sinks.set_sink(cleared).await.unwrap().into_inner();
    assert!(
        answer.changed && !answer.sink.as_ref().unwrap().signed,
        "{answer:?}"
    );
    for push in round(&mut client, &sink, 50).await {
        assert_eq!(signatures(&push), 0, "signed after clear_secrets: {push:?}");
    }
    sinks.set_sink(set(&[&new])).await.unwrap();
    let verdicts = verdicts(&python, &checks);
    for (index, (verdict, verified)) in verdicts.iter().zip(&expected).enumerate() {
        assert_eq!(verdict == "ok", *verified, "check {index}: {verdict}");
    }

    let status = sinks
        .sink_status(SinkStatusRequest {
            namespace: String::new(),
            all: true,
        })
        .await
        .expect("sink status")
        .into_inner();
    let got = sinks
        .get_sink(GetSinkRequest {
            namespace: NAMESPACE.into(),
        })
        .await
        .expect("get sink")
        .into_inner();
    assert!(got.sink.as_ref().is_some_and(|sink| sink.signed), "{got:?}");
    let listed = sinks
        .list_sinks(ListSinksRequest {})
        .await
        .expect("list sinks")
        .into_inner();
    assert!(
        listed
            .sinks
            .iter()
            .any(|sink| sink.namespace == NAMESPACE && sink.signed),
        "{listed:?}"
    );
    let metrics = fetch_metrics(daemon.metrics_addr(), None).await.body;
    let shown = [
        ("the log", daemon.log_text()),
        ("/metrics", metrics),
        ("SinkStatus", format!("{status:?}")),
        ("GetSink", format!("{got:?}")),
        ("ListSinks", format!("{listed:?}")),
    ];
    for secret in [&old, &new] {
        let encoded = secret.trim_start_matches("whsec_");
        for (where_shown, text) in &shown {
            assert!(!text.contains(encoded), "a secret in {where_shown}");
        }
    }
}
