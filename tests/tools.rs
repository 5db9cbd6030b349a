//! tickd as standard tools see it, against a real server:
//! - grpcurl 1.8.6, which speaks reflection v1alpha only, lists and describes the API and
//!   makes a call from JSON;
//! - grpcio's reflection client (v1alpha too) lists the services, and a NewTimeout built from
//!   the descriptors it returns goes through gzip-compressed;
//! - answers are compressed (gzip or zstd) when the client asks for it, and only then;
//! - the log carries colour codes on a terminal only: never into a pipe or a file, never
//!   with `NO_COLOR`.
//!
//! The Python tools come from `tests/tools/requirements.txt`, installed into
//! `target/tools-venv` on first use; `TICKD_SKIP_POLYGLOT=1` skips the tests needing them.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tonic::codec::CompressionEncoding;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use common::daemon::tickd_command;
use common::tooling::{must, repo, skip_polyglot, tools_python};
use common::*;
use tickd::proto::timers_client::TimersClient;

/// Runs `program` with `args` on a blocking thread; its standard output, or a failure
/// naming the command and what it printed.
async fn output_of(program: PathBuf, args: Vec<String>) -> String {
    tokio::task::spawn_blocking(move || {
        let mut command = Command::new(program);
        command.args(args);
        String::from_utf8(must(command).stdout).expect("utf-8 output")
    })
    .await
    .expect("tool task")
}

async fn tools() -> PathBuf {
    tokio::task::spawn_blocking(tools_python)
        .await
        .expect("venv task")
        .unwrap_or_else(|failure| panic!("{failure}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcurl_lists_describes_and_calls_through_reflection() {
    if skip_polyglot("grpcurl") {
        return;
    }
    let server = TestServer::start().await;
    let grpcurl = tools().await.with_file_name("grpcurl");
    let address = server.addr.to_string();
    let grpcurl_with = |args: &[&str]| {
        let mut all = vec!["-plaintext".to_owned()];
        all.extend(args.iter().map(|arg| arg.to_string()));
        output_of(grpcurl.clone(), all)
    };

    let version = grpcurl_with(&["-version"]).await;
    let listed = grpcurl_with(&[&address, "list"]).await;
    let services: Vec<&str> = listed.lines().collect();
    for service in ["tickd.v1.Timers", "grpc.health.v1.Health"] {
        assert!(services.contains(&service), "{version}: {listed}");
    }
    let described = grpcurl_with(&[&address, "describe", "tickd.v1.Timers"]).await;
    assert!(
        described.contains("tickd.v1.Timers is a service"),
        "{described}"
    );
    assert!(
        described.contains("rpc NewTimeout ( .tickd.v1.NewTimeoutRequest )"),
        "{described}"
    );

    // A call from JSON, with the message types from reflection; "aGk=" is "hi".
    let request = r#"{"timer": {"namespace": "grpcurl", "delay": "3600s", "payload": "aGk="}}"#;
    let answer = grpcurl_with(&["-d", request, &address, "tickd.v1.Timers/NewTimeout"]).await;
    let answer: serde_json::Value = serde_json::from_str(&answer).expect("grpcurl JSON");
    let id = answer["timer"]["id"].as_str().expect("timer id").to_owned();
    let mut client = server.client().await;
    let stored = get(&mut client, by_id("grpcurl", &id)).await.expect("get");
    assert_eq!(stored.payload.as_ref(), b"hi");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_lists_services_by_reflection_and_registers_gzip_compressed() {
    if skip_polyglot("grpcio") {
        return;
    }
    let server = TestServer::start().await;
    let python = tools().await;
    // Repetitive, so that gzip shrinks it: a compressed message the server must inflate.
    let payload = "tick ".repeat(2_000);
    let script = repo().join("tests/tools/grpcio_client.py");
    let args = [
        script.to_str().unwrap(),
        &server.addr.to_string(),
        "gzip",
        &payload,
    ];
    let printed = output_of(python, args.map(str::to_owned).to_vec()).await;
    let printed: serde_json::Value = serde_json::from_str(&printed).expect("script JSON");
    let services = printed["services"].as_array().expect("services");
    for service in ["tickd.v1.Timers", "grpc.health.v1.Health"] {
        assert!(services.iter().any(|name| name == service), "{printed}");
    }
    assert_eq!(printed["response"]["created"], true, "{printed}");
    let id = printed["response"]["timer"]["id"].as_str().expect("id");
    let mut client = server.client().await;
    let stored = get(&mut client, by_id("gzip", id)).await.expect("get");
    assert_eq!(stored.payload.as_ref(), payload.as_bytes());
    server.stop().await;
}

/// The `grpc-encoding` of an answer's headers: how its messages were compressed.
fn encoding_of<T>(response: &tonic::Response<T>) -> Option<String> {
    let value = response.metadata().get("grpc-encoding")?;
    Some(value.to_str().expect("ascii").to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_compressed_when_the_client_asks_and_only_then() {
    let server = TestServer::start().await;
    let channel = server.channel().await;
    let payload = vec![7u8; 32 * 1024];
    let get_request = |id: &str| GetRequest {
        timer: by_id("compressed", id),
    };

    let mut plain = TimersClient::new(channel.clone());
    let timer = register(&mut plain, spec("compressed", 3_600_000, &payload)).await;
    let answer = plain.get(get_request(&timer.id)).await.expect("get");
    assert_eq!(encoding_of(&answer), None);

    for (encoding, name) in [
        (CompressionEncoding::Gzip, "gzip"),
        (CompressionEncoding::Zstd, "zstd"),
    ] {
        let mut client = TimersClient::new(channel.clone())
            .send_compressed(encoding)
            .accept_compressed(encoding);
        // A compressed request, decoded whole...
        let sent = register(&mut client, spec("compressed", 3_600_000, &payload)).await;
        // ...and a compressed answer, carrying the payload intact.
        let answer = client.get(get_request(&sent.id)).await.expect("get");
        assert_eq!(encoding_of(&answer).as_deref(), Some(name));
        assert_eq!(answer.into_inner().timer.unwrap().payload.as_ref(), payload);

        let mut health = HealthClient::new(channel.clone())
            .send_compressed(encoding)
            .accept_compressed(encoding);
        let answer = health
            .check(HealthCheckRequest::default())
            .await
            .expect("health");
        assert_eq!(encoding_of(&answer).as_deref(), Some(name), "health");
    }
    server.stop().await;
}

/// A `tickd` start that fails at once (its token file is missing) after logging an error:
/// what it writes to standard output shows whether the log is coloured.
fn failing_start(dir: &Path) -> Command {
    let mut command = tickd_command();
    command
        .env_remove("NO_COLOR")
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--metrics-listen", "127.0.0.1:0", "--auth-token-file"])
        .arg(dir.join("missing-tokens"));
    command
}

const ESC: u8 = 0x1b;

#[test]
fn the_log_is_not_coloured_into_a_pipe_or_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let piped = failing_start(dir.path()).output().expect("run tickd");
    let text = String::from_utf8_lossy(&piped.stdout);
    assert!(text.contains("tickd failed"), "{text}");
    assert!(!piped.stdout.contains(&ESC), "colour into a pipe: {text:?}");

    let log_path = dir.path().join("tickd.log");
    let log_file = std::fs::File::create(&log_path).unwrap();
    let status = failing_start(dir.path())
        .stdout(Stdio::from(log_file))
        .status()
        .expect("run tickd");
    assert!(!status.success());
    let written = std::fs::read(&log_path).unwrap();
    let text = String::from_utf8_lossy(&written);
    assert!(text.contains("tickd failed"), "{text}");
    assert!(!written.contains(&ESC), "colour into a file: {text:?}");
}

#[test]
fn the_log_is_coloured_on_a_terminal_unless_no_color_is_set() {
    let dir = tempfile::tempdir().unwrap();
    // `script` (util-linux) runs tickd with a pseudo-terminal as its standard output.
    let on_terminal = |no_color: Option<&str>| {
        let start = failing_start(dir.path());
        let mut line = shell_quote(start.get_program());
        for arg in start.get_args() {
            line.push(' ');
            line.push_str(&shell_quote(arg));
        }
        let mut script = Command::new("script");
        script.args(["-q", "-e", "-c", &line, "/dev/null"]);
        script.envs(
            start
                .get_envs()
                .filter_map(|(key, value)| Some((key, value?))),
        );
        script.env_remove("NO_COLOR").stdin(Stdio::null());
        if let Some(value) = no_color {
            script.env("NO_COLOR", value);
        }
        script.output().expect("run script").stdout
    };
    let coloured = on_terminal(None);
    let text = String::from_utf8_lossy(&coloured);
    assert!(text.contains("tickd failed"), "{text}");
    assert!(coloured.contains(&ESC), "no colour on a terminal: {text:?}");
    let plain = on_terminal(Some("1"));
    let text = String::from_utf8_lossy(&plain);
    assert!(text.contains("tickd failed"), "{text}");
    assert!(!plain.contains(&ESC), "colour despite NO_COLOR: {text:?}");
}

fn shell_quote(word: &std::ffi::OsStr) -> String {
    format!("'{}'", word.to_string_lossy().replace('\'', r"'\''"))
}
