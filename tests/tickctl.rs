//! `tickctl` end to end: the built binary against a real in-process server.
//!
//! Streaming commands (`watch`, `consume`, `keepalive`) run as child processes whose output
//! lines are awaited one by one; `watch` and `consume` announce on stderr once their
//! subscription is registered, and only then is a timer added. The helpers that run tickctl
//! are in `tickctl/support.rs`; cron timers, Reschedule, replace, Redrive and `tickd
//! --version` are tested in `tickctl/schedules.rs`; proto3 JSON and add-batch in
//! `tickctl/json_and_batches.rs`; completions, the manual page, help and usage errors in
//! `tickctl/command_line.rs`; streams across tickd restarts in `tickctl/streams.rs`; `sink` in `tickctl/sinks.rs`.

#[path = "tickctl/command_line.rs"]
mod command_line;
mod common;
#[path = "tickctl/json_and_batches.rs"]
mod json_and_batches;
#[path = "tickctl/schedules.rs"]
mod schedules;
#[path = "tickctl/sinks.rs"]
mod sinks;
#[path = "tickctl/streams.rs"]
mod streams;
#[path = "tickctl/support.rs"]
mod support;

use serde_json::Value;

use common::pki::TestCa;
use common::TestServer;
use support::{
    add, endpoint, first_line, json, run, run_with_stdin, stdout, tickctl, Ran, Running,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_then_watch_prints_the_expiration() {
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    let mut text = Running::start(&endpoint, &["watch", "-n", "orders", "--count", "1"]);
    let mut json = Running::start(
        &endpoint,
        &["watch", "-n", "orders", "--count", "1", "-o", "json"],
    );
    for watcher in [&mut text, &mut json] {
        let ready = watcher.stderr_line().await;
        assert!(ready.contains("watching namespace orders"), "{ready}");
    }

    let id = add(
        &endpoint,
        &[
            "-n",
            "orders",
            "--delay",
            "100ms",
            "--key",
            "order-42",
            "--payload",
            "close order 42",
        ],
    )
    .await;
    assert!(!id.is_empty());

    let line = text.stdout_line().await;
    assert!(line.starts_with("fired "), "{line}");
    for field in [
        format!("id={id}"),
        "namespace=orders".into(),
        "key=order-42".into(),
        "attempt=1".into(),
        "payload=\"close order 42\"".into(),
    ] {
        assert!(line.contains(&field), "{field} missing from {line}");
    }
    let object: Value = serde_json::from_str(&json.stdout_line().await).expect("a JSON line");
    assert_eq!(object["timer"]["id"], id.as_str());
    assert_eq!(object["timer"]["key"], "order-42");
    // proto3 JSON: bytes in base64 ("close order 42"), 32-bit integers as numbers.
    assert_eq!(object["timer"]["payload"], "Y2xvc2Ugb3JkZXIgNDI=");
    assert_eq!(object["attempt"], 1);
    assert_eq!(text.finished().await, 0);
    assert_eq!(json.finished().await, 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_lists_timers_and_cancel_removes_them() {
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    let first = add(
        &endpoint,
        &["-n", "jobs", "--delay", "1h", "--payload", "one"],
    )
    .await;
    let second = add(
        &endpoint,
        &["-n", "jobs", "--delay", "2h", "--key", "nightly"],
    )
    .await;
    add(&endpoint, &["-n", "other", "--delay", "1h"]).await;

    let table = stdout(&endpoint, &["pending", "-n", "jobs"]).await;
    let lines: Vec<_> = table.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("DEADLINE"),
        "{table}"
    );
    assert!(
        lines[1].starts_with(&first) && lines[1].contains("\"one\""),
        "{table}"
    );
    assert!(
        lines[2].starts_with(&second) && lines[2].contains("nightly"),
        "{table}"
    );
    assert_eq!(lines[3], "2 pending", "{table}");
    // Without a namespace: every namespace.
    let all = stdout(&endpoint, &["pending"]).await;
    assert!(all.ends_with("3 pending\n"), "{all}");
    // Counting only.
    let count = stdout(&endpoint, &["pending", "-n", "jobs", "--limit", "0"]).await;
    assert_eq!(count, "2 pending\n");

    let listed = json(&endpoint, &["pending", "-n", "jobs", "--output", "json"]).await;
    // proto3 JSON: 64-bit integers as strings, bytes in base64 ("one").
    assert_eq!(listed["count"], "2");
    let ids: Vec<_> = listed["timers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].clone())
        .collect();
    assert_eq!(
        ids,
        [Value::from(first.clone()), Value::from(second.clone())]
    );
    assert_eq!(listed["timers"][1]["key"], "nightly");
    assert_eq!(listed["timers"][0]["payload"], "b25l");

    assert_eq!(
        stdout(&endpoint, &["cancel", "-n", "jobs", &first]).await,
        "cancelled\n"
    );
    let again = json(&endpoint, &["cancel", "-n", "jobs", &first, "-o", "json"]).await;
    // proto3 JSON leaves out default values: `"cancelled": false` is an empty object.
    assert_eq!(again, serde_json::json!({}));
    let cancelled = json(
        &endpoint,
        &["cancel", "-n", "jobs", "--key", "nightly", "-o", "json"],
    )
    .await;
    assert_eq!(cancelled["cancelled"], true);
    let listed = json(&endpoint, &["pending", "-n", "jobs", "-o", "json"]).await;
    assert_eq!(listed, serde_json::json!({}), "no count, no timers");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_touch_and_keepalive_a_lease() {
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    let id = add(
        &endpoint,
        &["-n", "workers", "--ttl", "1h", "--key", "worker-1"],
    )
    .await;

    let got = json(
        &endpoint,
        &["get", "-n", "workers", "--key", "worker-1", "-o", "json"],
    )
    .await;
    assert_eq!(got["id"], id.as_str());
    assert_eq!(got["ttl"], "3600s");
    let text = stdout(&endpoint, &["get", "-n", "workers", &id]).await;
    assert!(
        text.contains(&format!("id: {id}\n")) && text.contains("ttl: 1h\n"),
        "{text}"
    );

    let touched = json(
        &endpoint,
        &["touch", "-n", "workers", &id, "--ttl", "2h", "-o", "json"],
    )
    .await;
    // now + 2h is later than the deadline the lease had (about now + 1h).
    assert!(touched["deadline"].as_str().unwrap() > got["deadline"].as_str().unwrap());

    // Two rounds of heartbeats for the lease, by id and by key, over one stream.
    let kept = stdout(
        &endpoint,
        &[
            "keepalive",
            "-n",
            "workers",
            &id,
            "--key",
            "worker-1",
            "--interval",
            "10ms",
            "--count",
            "2",
        ],
    )
    .await;
    let lines: Vec<_> = kept.lines().collect();
    assert_eq!(lines.len(), 4, "{kept}");
    for (index, line) in lines.iter().enumerate() {
        assert!(
            line.starts_with(&format!("kept id={id} deadline=")),
            "{line}"
        );
        assert!(line.ends_with(&format!("sequence={}", index + 1)), "{line}");
    }
    // The default interval comes from the lease's own ttl, read with Get.
    let kept = json(
        &endpoint,
        &[
            "keepalive",
            "-n",
            "workers",
            &id,
            "--count",
            "1",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(kept["id"], id.as_str());

    // Not a lease: nothing to derive the interval from.
    let plain = add(&endpoint, &["-n", "workers", "--delay", "1h"]).await;
    let refused = run(&endpoint, &["keepalive", "-n", "workers", &plain]).await;
    assert!(
        refused.failed(2).contains("not a lease"),
        "{}",
        refused.stderr
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_stops_with_the_code_when_the_lease_is_gone() {
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    let lost = run(
        &endpoint,
        &["keepalive", "-n", "workers", "--key", "gone", "--ttl", "1s"],
    )
    .await;
    assert!(lost.failed(1).contains("NOT_FOUND"), "{}", lost.stderr);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_prints_and_acknowledges() {
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    let mut consumer = Running::start(
        &endpoint,
        &["consume", "-n", "mail", "--count", "2", "-o", "json"],
    );
    assert!(consumer
        .stderr_line()
        .await
        .contains("consuming namespace mail"));
    // From stdin, and bytes that are not UTF-8.
    let ran = run_with_stdin(
        &endpoint,
        &[
            "add",
            "-n",
            "mail",
            "--delay",
            "10ms",
            "--payload-file",
            "-",
        ],
        Some(b"\xff\x00raw"),
    )
    .await
    .ok();
    let first = ran.stdout.trim().to_owned();
    let second = add(
        &endpoint,
        &["-n", "mail", "--delay", "20ms", "--payload", "2"],
    )
    .await;

    let mut deliveries = Vec::new();
    for expected in [&first, &second] {
        let object: Value = serde_json::from_str(&consumer.stdout_line().await).unwrap();
        assert_eq!(object["timer"]["id"], expected.as_str());
        deliveries.push(object["deliveryId"].as_str().unwrap().to_owned());
        if *expected == first {
            assert_eq!(object["timer"]["payload"], "/wByYXc=");
        }
    }
    assert_eq!(consumer.finished().await, 0);

    // consume acknowledged both: acknowledging again finds nothing awaiting.
    let again = run(
        &endpoint,
        &["ack", "-n", "mail", &deliveries[0], &deliveries[1]],
    )
    .await;
    assert!(again.failed(1).contains(&deliveries[0]));
    assert_eq!(again.stdout, "acknowledged 0\n");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_acknowledges_a_delivery() {
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    // A sharing subscriber that leaves acknowledging to tickctl.
    let mut client = server.client().await;
    let mut stream = common::subscribe(&mut client, "acks", 60_000, 10).await;
    let id = add(&endpoint, &["-n", "acks", "--delay", "1ms"]).await;
    let expiration = common::next_expiration(&mut stream).await;
    assert_eq!(expiration.timer.unwrap().id, id);

    let acked = stdout(&endpoint, &["ack", "-n", "acks", &expiration.delivery_id]).await;
    assert_eq!(acked, "acknowledged 1\n");
    let again = run(
        &endpoint,
        &["ack", "-n", "acks", &expiration.delivery_id, "-o", "json"],
    )
    .await;
    assert!(again.failed(1).contains(&expiration.delivery_id));
    assert_eq!(again.json().get("acknowledged"), None, "0 is left out");
    assert_eq!(again.json()["unknown"][0], expiration.delivery_id.as_str());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_batch_reports_each_item() {
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    let input = b"{\"key\": \"a\", \"delay\": \"1h\", \"payloadText\": \"x\"}\n\n{\"delay\": \"1h\", \"repeat\": \"0s\"}\n{\"namespace\": \"elsewhere\", \"deadline\": \"2100-01-01T00:00:00Z\"}\n";
    let ran = run_with_stdin(&endpoint, &["add-batch", "-n", "batch"], Some(input)).await;
    assert_eq!(ran.code, 1, "one item was refused");
    let lines: Vec<_> = ran.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", ran.stdout);
    let id_of = |line: &str, number: usize| {
        let prefix = format!("line={number} id=");
        assert!(line.starts_with(&prefix), "{line}");
        line[prefix.len()..].to_owned()
    };
    assert!(
        lines[1].starts_with("line=3 error INVALID_ARGUMENT: "),
        "{}",
        lines[1]
    );
    let got = json(
        &endpoint,
        &["get", "-n", "elsewhere", &id_of(lines[2], 4), "-o", "json"],
    )
    .await;
    assert_eq!(got["deadline"], "2100-01-01T00:00:00Z");
    let got = json(
        &endpoint,
        &["get", "-n", "batch", "--key", "a", "-o", "json"],
    )
    .await;
    assert_eq!(got["id"], id_of(lines[0], 1));
    assert_eq!(got["payload"], "eA==", "base64 of the payloadText x");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_with_offsets_and_health() {
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    let id = add(
        &endpoint,
        &[
            "--deadline",
            "2100-01-01T01:30:00+01:30",
            "--payload",
            "y2k1",
        ],
    )
    .await;
    let got = json(&endpoint, &["get", &id, "-o", "json"]).await;
    assert_eq!(got["deadline"], "2100-01-01T00:00:00Z");

    assert_eq!(stdout(&endpoint, &["health"]).await, "SERVING\n");
    assert_eq!(
        stdout(&endpoint, &["health", "--service", ""]).await,
        "SERVING\n"
    );
    // A token is sent as metadata; today's server does not check it.
    let with_token = json(&endpoint, &["--token", "s3cret", "health", "-o", "json"]).await;
    assert_eq!(with_token["status"], "SERVING");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_over_a_unix_socket() {
    let server = TestServer::start_with_unix_socket(tickd::config::Config::defaults()).await;
    let endpoint = format!("unix:{}", server.unix_socket.as_ref().unwrap().display());
    assert_eq!(stdout(&endpoint, &["health"]).await, "SERVING\n");
    let id = add(&endpoint, &["-n", "sidecar", "--delay", "1h"]).await;
    let got = json(&endpoint, &["get", "-n", "sidecar", &id, "-o", "json"]).await;
    assert_eq!(got["id"], id.as_str());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_one_clear_line_with_an_exit_code() {
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);

    // Usage: clap's own message, exit 2, before anything is sent.
    let bad = run(&endpoint, &["add", "--delay", "ten seconds"]).await;
    assert_eq!(bad.code, 2);
    assert!(
        first_line(&bad.stderr).contains("invalid duration \"ten seconds\""),
        "{}",
        bad.stderr
    );
    let bad = run(&endpoint, &["--timeout", "5x", "health"]).await;
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("--timeout"), "{}", bad.stderr);
    let bad = run(&endpoint, &["add", "--deadline", "tomorrow"]).await;
    assert_eq!(bad.code, 2);
    assert!(
        first_line(&bad.stderr).contains("invalid RFC 3339 time"),
        "{}",
        bad.stderr
    );
    let bad = run(&endpoint, &["add", "--payload", "x"]).await;
    assert!(bad.failed(2).contains("--delay"), "{}", bad.stderr);
    let bad = run(&endpoint, &["--token-file", "/nonexistent/token", "health"]).await;
    let line = bad.failed(2);
    assert!(line.starts_with("tickctl: reading --token-file"), "{line}");

    // Server errors: exit 1, naming the gRPC code.
    let missing = run(&endpoint, &["get", "-n", "jobs", "--key", "no-such-key"]).await;
    let line = missing.failed(1);
    assert!(line.starts_with("tickctl: NOT_FOUND: "), "{line}");
    assert!(missing.stdout.is_empty());
    // A key where an id goes: a usage error that says how to give a key.
    let invalid = run(&endpoint, &["cancel", "not-an-id"]).await;
    assert_eq!(invalid.code, 2);
    assert!(
        first_line(&invalid.stderr).contains("16 hexadecimal digits")
            && invalid.stderr.contains("--key not-an-id"),
        "{}",
        invalid.stderr
    );
    server.stop().await;

    // Unreachable: exit 3. A port that was just free refuses connections.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("127.0.0.1:{port}");
    let down = run(&endpoint, &["pending"]).await;
    let line = down.failed(3);
    assert!(
        line.starts_with(&format!("tickctl: cannot reach tickd at {endpoint}: ")),
        "{line}"
    );
    assert!(line.to_lowercase().contains("refused"), "{line}");
    let socket = run("unix:/nonexistent/tickd.sock", &["health"]).await;
    let line = socket.failed(3);
    assert!(line.contains("unix:/nonexistent/tickd.sock"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_are_sent() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "s3cret orders\nadmin *\n").unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let server = TestServer::start_with(common::config(|c| c.auth_token_file = Some(tokens))).await;
    let endpoint = endpoint(&server);

    let refused = run(&endpoint, &["add", "-n", "orders", "--delay", "1h"]).await;
    let line = refused.failed(1);
    assert!(line.starts_with("tickctl: UNAUTHENTICATED: "), "{line}");

    let added = stdout(
        &endpoint,
        &["--token", "s3cret", "add", "-n", "orders", "--delay", "1h"],
    )
    .await;
    let added = added.trim();
    let token_file = token_file.to_str().unwrap();
    let got = stdout(
        &endpoint,
        &["--token-file", token_file, "get", "-n", "orders", added],
    )
    .await;
    assert!(got.starts_with(&format!("id: {added}")));
    let mut from_env = tickctl(&endpoint);
    from_env
        .env("TICKCTL_TOKEN", "s3cret")
        .args(["pending", "-n", "orders", "--limit", "0"]);
    let output = tokio::task::spawn_blocking(move || from_env.output().unwrap())
        .await
        .unwrap();
    assert_eq!(Ran::from(output).ok().stdout, "1 pending\n");

    let elsewhere = run(&endpoint, &["--token", "s3cret", "pending", "-n", "jobs"]).await;
    let line = elsewhere.failed(1);
    assert!(line.starts_with("tickctl: PERMISSION_DENIED: "), "{line}");
    // Health stays open, for probes.
    assert_eq!(stdout(&endpoint, &["health"]).await, "SERVING\n");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_mutual_tls() {
    let pki = TestCa::new("tickctl");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = pki
        .server("tickd", &["localhost", "127.0.0.1"])
        .write(dir.path(), "tickd");
    let (client_cert, client_key) = pki.client("client").write(dir.path(), "client");
    let ca_file = pki.write(dir.path(), "ca.pem");
    let server = TestServer::start_with(common::config(|c| {
        c.tls_cert = Some(cert.clone());
        c.tls_key = Some(key.clone());
    }))
    .await;
    let port = server.addr.port();
    let ca = ca_file.display().to_string();
    let https = format!("https://127.0.0.1:{port}");
    assert_eq!(
        stdout(&https, &["--tls-ca", &ca, "health"]).await,
        "SERVING\n"
    );
    // HOST:PORT with a TLS flag means https; the certificate is checked against a given name.
    let plain = format!("127.0.0.1:{port}");
    let added = stdout(
        &plain,
        &[
            "--tls-ca",
            &ca,
            "--tls-server-name",
            "localhost",
            "add",
            "--delay",
            "1h",
        ],
    )
    .await;
    assert!(!added.trim().is_empty());

    let no_ca = run(&https, &["health"]).await;
    assert!(no_ca.failed(2).contains("--tls-ca"), "{}", no_ca.stderr);
    let wrong_name = run(
        &https,
        &[
            "--tls-ca",
            &ca,
            "--tls-server-name",
            "elsewhere.example",
            "health",
        ],
    )
    .await;
    assert_ne!(wrong_name.code, 0);
    wrong_name.one_error_line();
    server.stop().await;

    // Mutual TLS: a client certificate signed by the client CA is required.
    let server = TestServer::start_with(common::config(|c| {
        c.tls_cert = Some(cert);
        c.tls_key = Some(key);
        c.tls_client_ca = Some(ca_file.clone());
    }))
    .await;
    let https = format!("https://127.0.0.1:{}", server.addr.port());
    let (client_cert, client_key) = (client_cert.display(), client_key.display());
    let with_identity = stdout(
        &https,
        &[
            "--tls-ca",
            &ca,
            "--tls-cert",
            &client_cert.to_string(),
            "--tls-key",
            &client_key.to_string(),
            "pending",
        ],
    )
    .await;
    assert_eq!(with_identity, "0 pending\n");
    let without = run(&https, &["--tls-ca", &ca, "pending"]).await;
    assert_ne!(without.code, 0);
    without.one_error_line();
    server.stop().await;
}
