//! `--output json` as proto3's canonical JSON (what grpcurl prints), and `add-batch` reading
//! it back: binary payloads round-trip, and a file longer than a call may carry goes in
//! `--max-batch` chunks with a result per input line.

use serde_json::{json, Value};

use crate::common::{self, TestServer};
use crate::support::{add, endpoint, run, run_with_stdin, Running};

/// Every field name in lowerCamelCase, and no nulls anywhere: the proto3 JSON mapping.
fn assert_canonical(value: &Value) {
    match value {
        Value::Null => panic!("a null in proto3 JSON"),
        Value::Object(fields) => {
            for (name, field) in fields {
                assert!(!name.contains('_'), "field {name} is not lowerCamelCase");
                assert_canonical(field);
            }
        }
        Value::Array(items) => items.iter().for_each(assert_canonical),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_and_get_print_proto3_json() {
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    // A repeating timer that fired once, so firedCount is 1.
    let repeating = add_fired_once(&endpoint, "fmt", &["--key", "r"]).await;
    let binary = add_binary(&endpoint, "fmt", &["--deadline", "2100-01-01T00:00:00.5Z"]).await;

    let ran = run(&endpoint, &["-o", "json", "pending", "-n", "fmt"])
        .await
        .ok();
    let listed = ran.json();
    assert_canonical(&listed);
    assert_eq!(listed["count"], "2", "uint64 as a string");
    let timers = listed["timers"].as_array().unwrap();
    let fired = timers
        .iter()
        .find(|t| t["id"] == repeating.as_str())
        .unwrap();
    assert_eq!(fired["firedCount"], "1");
    assert_eq!(fired["repeat"], "3600s");
    assert_eq!(fired["namespace"], "fmt");
    assert_eq!(fired.get("payload"), None, "an empty payload is left out");
    let mut stored = timers
        .iter()
        .find(|t| t["id"] == binary.as_str())
        .unwrap()
        .clone();
    // A duration: whole seconds and 0, 3, 6 or 9 decimals, then `s`.
    let remaining = stored["remaining"].as_str().unwrap().to_owned();
    let seconds = remaining.strip_suffix('s').unwrap();
    let (whole, decimals) = seconds.split_once('.').unwrap_or((seconds, ""));
    assert!(
        whole.parse::<u64>().is_ok() && [0, 3, 6, 9].contains(&decimals.len()),
        "{remaining}"
    );
    stored.as_object_mut().unwrap().remove("remaining");
    assert_eq!(
        stored,
        json!({
            "id": binary,
            "namespace": "fmt",
            "deadline": "2100-01-01T00:00:00.500Z",
            "payload": "/wByYXc=",
        })
    );
    // Indented, fields in the .proto's order: as grpcurl prints an answer.
    assert!(
        ran.stdout
            .starts_with("{\n  \"count\": \"2\",\n  \"timers\": [\n    {\n      \"id\": "),
        "{}",
        ran.stdout
    );

    let got = run(&endpoint, &["get", "-n", "fmt", &binary, "-o", "json"])
        .await
        .ok();
    let expected_start = format!("{{\n  \"id\": \"{binary}\",\n  \"namespace\": \"fmt\",\n");
    assert!(got.stdout.starts_with(&expected_start), "{}", got.stdout);
    let mut got = got.json();
    got.as_object_mut().unwrap().remove("remaining");
    assert_eq!(got, stored);
    server.stop().await;
}

/// `tickctl add` of a timer repeating every hour, seen firing once by `watch`; its id.
async fn add_fired_once(endpoint: &str, namespace: &str, args: &[&str]) -> String {
    let mut watcher = Running::start(endpoint, &["watch", "-n", namespace, "--count", "1"]);
    let ready = watcher.stderr_line().await;
    assert!(ready.contains("watching namespace"), "{ready}");
    let command = [
        &["-n", namespace, "--delay", "1ms", "--repeat", "1h"][..],
        args,
    ]
    .concat();
    let id = add(endpoint, &command).await;
    assert!(watcher.stdout_line().await.contains(&id));
    assert_eq!(watcher.finished().await, 0);
    id
}

/// `tickctl add` with the payload `\xff\x00raw` (not UTF-8) from standard input; its id.
async fn add_binary(endpoint: &str, namespace: &str, args: &[&str]) -> String {
    let command = [&["add", "-n", namespace, "--payload-file", "-"][..], args].concat();
    let ran = run_with_stdin(endpoint, &command, Some(b"\xff\x00raw"))
        .await
        .ok();
    ran.stdout.trim().to_owned()
}

/// The pending timers of `namespace` as `pending -o json` lists them, less `remaining`
/// (which changes from one call to the next), by id.
async fn listed_timers(endpoint: &str, namespace: &str) -> Vec<Value> {
    let listed = run(endpoint, &["pending", "-n", namespace, "-o", "json"])
        .await
        .ok()
        .json();
    let mut timers = listed["timers"].as_array().cloned().unwrap_or_default();
    for timer in &mut timers {
        timer.as_object_mut().unwrap().remove("remaining");
    }
    timers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_batch_takes_back_what_get_and_pending_print() {
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    let binary = add_binary(&endpoint, "src", &["--deadline", "2100-01-01T00:00:00Z"]).await;
    let keyed = add(
        &endpoint,
        &[
            "-n",
            "src",
            "--delay",
            "2h",
            "--repeat",
            "1500ms",
            "--key",
            "k",
            "--ttl",
            "3h",
            "--payload",
            "text",
        ],
    )
    .await;
    let cron = add(
        &endpoint,
        &[
            "-n",
            "src",
            "--cron",
            "0 9 * * MON-FRI",
            "--tz",
            "Europe/Berlin",
        ],
    )
    .await;
    let before = listed_timers(&endpoint, "src").await;
    assert_eq!(before.len(), 3);
    let pending = run(&endpoint, &["pending", "-n", "src", "-o", "json"])
        .await
        .ok()
        .stdout;

    // A restore: cancel them all, then add-batch what pending printed.
    for id in [&binary, &keyed, &cron] {
        run(&endpoint, &["cancel", "-n", "src", id]).await.ok();
    }
    assert_eq!(listed_timers(&endpoint, "src").await, Vec::<Value>::new());
    let restored = run_with_stdin(&endpoint, &["add-batch"], Some(pending.as_bytes()))
        .await
        .ok();
    let lines: Vec<_> = restored.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", restored.stdout);
    // Each reported under the line its timer starts on in the listing: the `{` above its id.
    let listing: Vec<_> = pending.lines().collect();
    let start_of = |id: &str| {
        let id_line = listing
            .iter()
            .position(|line| line.contains(&format!("\"id\": \"{id}\"")))
            .unwrap();
        assert_eq!(listing[id_line - 1].trim(), "{");
        id_line // the `{` line's number, counting from 1
    };
    for (line, id) in lines.iter().zip([&binary, &keyed, &cron]) {
        assert!(
            line.starts_with(&format!("line={} id=", start_of(id))),
            "{line}"
        );
    }
    // The same timers (new ids), binary payload, deadlines, schedules and ttl included.
    let without_id = |timers: Vec<Value>| -> Vec<Value> {
        timers
            .into_iter()
            .map(|mut timer| {
                timer.as_object_mut().unwrap().remove("id");
                timer
            })
            .collect()
    };
    let after = listed_timers(&endpoint, "src").await;
    assert_eq!(without_id(after), without_id(before.clone()));
    assert_eq!(before[0]["payload"], "/wByYXc=");

    // The indented output of `get`, twice: JSON objects one after another, not only lines.
    let got = run(&endpoint, &["get", "-n", "src", "--key", "k", "-o", "json"])
        .await
        .ok()
        .stdout;
    let twice = format!("{got}{got}");
    let ran = run_with_stdin(
        &endpoint,
        &["add-batch", "-o", "json"],
        Some(twice.as_bytes()),
    )
    .await
    .ok();
    let results: Vec<Value> = ran
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(results.len(), 2, "{}", ran.stdout);
    assert_eq!(results[0]["line"], 1);
    assert_eq!(results[1]["line"], 1 + got.lines().count());
    // The key exists: the timer is returned, not made again (`created` false: left out).
    for result in &results {
        assert_eq!(result["registered"]["timer"]["key"], "k");
        assert_eq!(result["registered"].get("created"), None, "{result}");
    }
    assert!(
        ran.stdout
            .starts_with("{\"line\":1,\"registered\":{\"timer\":{\"id\":"),
        "{}",
        ran.stdout
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_batch_sends_long_files_in_chunks_and_reports_each_line() {
    // tickd takes at most 2 timers per call.
    let server = TestServer::start_with(common::config(|config| config.max_batch = 2)).await;
    let endpoint = endpoint(&server);
    let mut input = String::new();
    for index in 1..=5 {
        input.push_str(&format!("{{\"key\": \"t{index}\", \"delay\": \"1h\"}}\n"));
        if index == 2 {
            // Refused by the server alone; the others still register.
            input.push_str("{\"delay\": \"1h\", \"repeat\": \"0s\"}\n\n");
        }
    }
    // Chunks bigger than tickd takes: the first call is refused whole, nothing after is sent.
    let refused = run_with_stdin(
        &endpoint,
        &["add-batch", "-n", "b", "--max-batch", "3"],
        Some(input.as_bytes()),
    )
    .await;
    let line = refused.failed(1);
    assert!(
        line.contains("timers 1 to 3 of 6 (lines 1 to 3) not registered, 3 after them not sent")
            && line.contains("batch limit of 2"),
        "{line}"
    );
    assert!(refused.stdout.is_empty(), "{}", refused.stdout);
    assert_eq!(count(&endpoint, "b").await, None);

    let ran = run_with_stdin(
        &endpoint,
        &["add-batch", "-n", "b", "--max-batch", "2"],
        Some(input.as_bytes()),
    )
    .await;
    assert_eq!(ran.code, 1, "one timer refused: {}", ran.stderr);
    assert!(
        ran.stderr.contains("1 of 6 timers were refused"),
        "{}",
        ran.stderr
    );
    let lines: Vec<_> = ran.stdout.lines().collect();
    let numbers: Vec<_> = lines
        .iter()
        .map(|line| line.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(
        numbers,
        ["line=1", "line=2", "line=3", "line=5", "line=6", "line=7"]
    );
    assert!(
        lines[2].starts_with("line=3 error INVALID_ARGUMENT: "),
        "{}",
        lines[2]
    );
    assert_eq!(count(&endpoint, "b").await.as_deref(), Some("5"));

    // Again: the keys exist, so the same timers come back, marked as existing.
    let again = run_with_stdin(
        &endpoint,
        &["add-batch", "-n", "b", "--max-batch", "2"],
        Some(input.as_bytes()),
    )
    .await;
    assert!(
        again.stdout.lines().next().unwrap().ends_with(" existing"),
        "{}",
        again.stdout
    );
    assert_eq!(count(&endpoint, "b").await.as_deref(), Some("5"));

    // A bad line anywhere: nothing is sent.
    let bad = format!("{input}{{\"key\": \"t9\", \"delai\": \"1h\"}}\n");
    let ran = run_with_stdin(&endpoint, &["add-batch", "-n", "c"], Some(bad.as_bytes())).await;
    let line = ran.failed(2);
    assert!(
        line.starts_with("tickctl: line 8: ") && line.contains("delai"),
        "{line}"
    );
    assert_eq!(count(&endpoint, "c").await, None);
    server.stop().await;
}

/// The namespace's pending count as proto3 JSON prints it (None for 0, which it leaves out).
async fn count(endpoint: &str, namespace: &str) -> Option<String> {
    let listed = run(
        endpoint,
        &["pending", "-n", namespace, "--limit", "0", "-o", "json"],
    )
    .await
    .ok()
    .json();
    listed
        .get("count")
        .map(|count| count.as_str().unwrap().to_owned())
}

/// grpcurl 1.8.6 from PyPI, in the operators' tools venv under target/ (tests/tools.rs's).
fn grpcurl() -> Option<std::path::PathBuf> {
    if common::tooling::skip_polyglot("tickctl's JSON beside grpcurl's") {
        return None;
    }
    let python = common::tooling::tools_python()
        .unwrap_or_else(|error| panic!("installing grpcurl: {error}"));
    Some(python.with_file_name("grpcurl"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_prints_what_grpcurl_prints() {
    let Some(grpcurl) = grpcurl() else { return };
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    add_fired_once(&endpoint, "same", &["--ttl", "2h", "--key", "r"]).await;
    add_binary(
        &endpoint,
        "same",
        &["--deadline", "2100-01-01T00:00:00.000250Z"],
    )
    .await;
    add(
        &endpoint,
        &[
            "-n",
            "same",
            "--cron",
            "0 9 * * MON-FRI",
            "--tz",
            "Europe/Berlin",
        ],
    )
    .await;

    let tickctl = run(&endpoint, &["-o", "json", "pending", "-n", "same"])
        .await
        .ok()
        .stdout;
    let mut command = std::process::Command::new(grpcurl);
    command
        .args(["-plaintext", "-import-path"])
        .arg(common::tooling::repo().join("proto"))
        .args(["-proto", "tickd/v1/tickd.proto"])
        .args(["-d", r#"{"namespace": "same", "pageSize": 100}"#])
        .arg(server.addr.to_string())
        .arg("tickd.v1.Timers/Pending");
    // Off the async workers, which serve the server.
    let output = tokio::task::spawn_blocking(move || common::tooling::must(command))
        .await
        .unwrap();
    let grpcurl = String::from_utf8(output.stdout).unwrap();
    // The same text, but for `remaining`, which runs down between the two calls.
    let without_remaining = |text: &str| -> String {
        let lines = text
            .lines()
            .filter(|line| !line.contains("\"remaining\": "));
        lines.map(|line| format!("{}\n", line.trim_end())).collect()
    };
    assert_eq!(without_remaining(&tickctl), without_remaining(&grpcurl));
    assert!(tickctl.contains("\"firedCount\": \"1\""), "{tickctl}");
    server.stop().await;
}
