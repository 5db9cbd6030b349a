//! `tickctl` on cron timers, Reschedule, replacing registrations and Redrive, against a
//! real in-process server; and `tickd --version`, which names the time zone database.

use std::process::Command;

use serde_json::Value;

use crate::common::TestServer;
use crate::support::{add, endpoint, json, run, stdout};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_cron_shows_the_schedule_and_its_next_firing() {
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    let id = add(
        &endpoint,
        &[
            "-n",
            "cal",
            "--key",
            "standup",
            "--cron",
            "0 9 * * MON-FRI",
            "--tz",
            "Europe/Berlin",
        ],
    )
    .await;
    let details = stdout(&endpoint, &["get", "-n", "cal", "--key", "standup"]).await;
    assert!(details.starts_with(&format!("id: {id}\n")), "{details}");
    assert!(details.contains("\ncron: 0 9 * * MON-FRI\n"), "{details}");
    assert!(
        details.contains("\ntime_zone: Europe/Berlin\n"),
        "{details}"
    );
    let timer = json(&endpoint, &["get", "-n", "cal", &id, "-o", "json"]).await;
    assert_eq!(timer["cron"], "0 9 * * MON-FRI");
    assert_eq!(timer["timeZone"], "Europe/Berlin");
    // 09:00 in Berlin is 07:00 or 08:00 UTC, by the season.
    let deadline = timer["deadline"].as_str().unwrap();
    assert!(
        deadline.ends_with("T07:00:00Z") || deadline.ends_with("T08:00:00Z"),
        "{deadline}"
    );

    // With a deadline: the first cron time at or after it.
    let json_add = json(
        &endpoint,
        &[
            "add",
            "-n",
            "cal",
            "--cron",
            "0 12 * * *",
            "--at",
            "2030-01-01T00:00:30Z",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(json_add["created"], true);
    assert_eq!(json_add["timer"]["cron"], "0 12 * * *");
    assert_eq!(json_add["timer"]["timeZone"], "UTC");
    assert_eq!(json_add["timer"]["deadline"], "2030-01-01T12:00:00Z");

    let table = stdout(&endpoint, &["pending", "-n", "cal"]).await;
    assert!(table.lines().next().unwrap().contains("CRON"), "{table}");
    assert!(table.contains("0 9 * * MON-FRI (Europe/Berlin)"), "{table}");
    let listed = json(&endpoint, &["pending", "-n", "cal", "-o", "json"]).await;
    assert_eq!(listed["timers"][0]["cron"], "0 9 * * MON-FRI");

    // Exclusive with --repeat, refused before anything is sent.
    let both = run(&endpoint, &["add", "--cron", "@daily", "--repeat", "1h"]).await;
    assert_eq!(both.code, 2, "{}", both.stderr);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_cron_or_zone_is_invalid_argument_naming_the_field() {
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    let bad = run(&endpoint, &["add", "-n", "cal", "--cron", "0 25 * * *"]).await;
    let line = bad.failed(1);
    assert!(line.starts_with("tickctl: INVALID_ARGUMENT: "), "{line}");
    assert!(line.contains("cron"), "{line}");
    assert!(line.contains("field 2 (hour)"), "{line}");
    let bad = run(
        &endpoint,
        &["add", "--cron", "@hourly", "--tz", "Mars/Olympus_Mons"],
    )
    .await;
    let line = bad.failed(1);
    assert!(line.starts_with("tickctl: INVALID_ARGUMENT: "), "{line}");
    assert!(line.contains("time_zone"), "{line}");
    // --tz alone means nothing.
    assert_eq!(
        run(&endpoint, &["add", "--delay", "1h", "--tz", "UTC"])
            .await
            .code,
        2
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_replace_swaps_the_pending_timer_under_the_key() {
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    let base = ["add", "-n", "jobs", "--key", "nightly"];
    let first = add(
        &endpoint,
        &[
            "-n",
            "jobs",
            "--key",
            "nightly",
            "--delay",
            "1h",
            "--payload",
            "one",
        ],
    )
    .await;
    let replaced = json(
        &endpoint,
        &[
            &base[..],
            &[
                "--delay",
                "2h",
                "--payload",
                "two",
                "--replace",
                "-o",
                "json",
            ],
        ]
        .concat(),
    )
    .await;
    // proto3 JSON leaves out false values: `created` is absent.
    assert_eq!(replaced.get("created"), None);
    assert_eq!(replaced["replaced"], true);
    // The timer keeps its id; its deadline and payload are the new ones.
    assert_eq!(replaced["timer"]["id"], first.as_str());
    let text = run(
        &endpoint,
        &[
            &base[..],
            &["--delay", "3h", "--payload", "three", "--replace"],
        ]
        .concat(),
    )
    .await
    .ok();
    assert!(text.stderr.contains("replaced"), "{}", text.stderr);
    assert_eq!(text.stdout.lines().count(), 1, "{}", text.stdout);

    let count = stdout(&endpoint, &["pending", "-n", "jobs", "--limit", "0"]).await;
    assert_eq!(count, "1 pending\n");
    let timer = json(
        &endpoint,
        &["get", "-n", "jobs", "--key", "nightly", "-o", "json"],
    )
    .await;
    assert_eq!(timer["payload"], "dGhyZWU="); // base64 of "three"
                                              // Without --replace the pending timer is kept, and said so.
    let kept = json(
        &endpoint,
        &[&base[..], &["--delay", "5h", "-o", "json"]].concat(),
    )
    .await;
    assert_eq!(kept.get("created"), None);
    assert_eq!(kept.get("replaced"), None);
    // --replace needs --key.
    assert_eq!(
        run(&endpoint, &["add", "--delay", "1h", "--replace"])
            .await
            .code,
        2
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reschedule_moves_the_next_firing() {
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    let id = add(
        &endpoint,
        &[
            "-n",
            "jobs",
            "--key",
            "report",
            "--delay",
            "1h",
            "--payload",
            "v1",
        ],
    )
    .await;
    let moved = stdout(
        &endpoint,
        &[
            "reschedule",
            "-n",
            "jobs",
            "--key",
            "report",
            "--deadline",
            "2031-05-06T07:08:09.000000000Z",
            "--payload",
            "v2",
        ],
    )
    .await;
    assert!(moved.starts_with(&format!("id: {id}\n")), "{moved}");
    assert!(
        moved.contains("\ndeadline: 2031-05-06T07:08:09.000Z\n"),
        "{moved}"
    );
    let timer = json(&endpoint, &["get", "-n", "jobs", &id, "-o", "json"]).await;
    assert_eq!(timer["deadline"], "2031-05-06T07:08:09Z");
    assert_eq!(timer["payload"], "djI="); // base64 of "v2"

    // By id, with a delay; the payload is kept when none is given.
    let by_id = json(
        &endpoint,
        &[
            "reschedule",
            "-n",
            "jobs",
            &id,
            "--delay",
            "2h",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(by_id["id"], id.as_str());
    assert_ne!(by_id["deadline"], "2031-05-06T07:08:09Z");
    let timer = json(&endpoint, &["get", "-n", "jobs", &id, "-o", "json"]).await;
    assert_eq!(timer["payload"], "djI="); // base64 of "v2"

    let unknown = run(
        &endpoint,
        &[
            "reschedule",
            "-n",
            "jobs",
            "--key",
            "no-such-key",
            "--delay",
            "1m",
        ],
    )
    .await;
    let line = unknown.failed(1);
    assert!(line.starts_with("tickctl: NOT_FOUND: "), "{line}");
    // A new time is required.
    let bare = run(&endpoint, &["reschedule", "-n", "jobs", &id]).await;
    assert_eq!(bare.code, 2, "{}", bare.stderr);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_reports_what_went_back_and_what_was_not_dead() {
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    assert_eq!(
        stdout(&endpoint, &["redrive", "-n", "jobs"]).await,
        "redriven 0\n"
    );
    let all = json(&endpoint, &["redrive", "-n", "jobs", "-o", "json"]).await;
    // Nothing redriven, nothing refused: proto3 JSON leaves out zero and empty fields.
    assert_eq!(all, serde_json::json!({}));

    let unknown = "00000000000000ff";
    let named = run(
        &endpoint,
        &["redrive", "-n", "jobs", unknown, "not-an-id", "-o", "json"],
    )
    .await;
    assert_eq!(named.code, 1, "{}", named.stderr);
    let answer = named.json();
    assert_eq!(answer.get("redriven"), None);
    let not_dead: Vec<_> = answer["notDead"].as_array().unwrap().iter().collect();
    assert!(not_dead.contains(&&Value::from(unknown)), "{answer}");
    assert!(not_dead.contains(&&Value::from("not-an-id")), "{answer}");
    let text = run(&endpoint, &["redrive", "-n", "jobs", unknown]).await;
    let line = text.failed(1);
    assert!(line.contains(unknown), "{line}");
    assert_eq!(text.stdout, "redriven 0\n");
    server.stop().await;
}

/// One Redrive call sends back at most 1,000; `tickctl redrive` with no ids calls until
/// none is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_of_all_takes_as_many_calls_as_it_needs() {
    use crate::common::*;
    const DEAD: usize = 1_234;
    let server = TestServer::start_with(config(|config| config.max_attempts = 1)).await;
    let endpoint = endpoint(&server);
    let mut client = server.client().await;
    register_all(&mut client, specs("jobs", DEAD, 10)).await;
    {
        // One delivery each, never acknowledged; the subscriber leaves, so all are dead.
        let mut stream = subscribe(&mut client, "jobs", 600_000, DEAD as u32).await;
        for _ in 0..DEAD {
            within(next_expiration(&mut stream)).await;
        }
    }
    crate::common::wait::eventually(
        "every expiration is dead",
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(20),
        || {
            let mut client = client.clone();
            async move {
                match pending_with_dead(&mut client, "jobs").await.dead_count as usize {
                    DEAD => Ok(()),
                    count => Err(format!("{count} dead")),
                }
            }
        },
        || async { String::new() },
    )
    .await;
    assert_eq!(
        stdout(&endpoint, &["redrive", "-n", "jobs"]).await,
        format!("redriven {DEAD}\n")
    );
    assert_eq!(pending_with_dead(&mut client, "jobs").await.dead_count, 0);
    server.stop().await;
}

#[test]
fn tickd_version_names_the_time_zone_database() {
    let output = Command::new(env!("CARGO_BIN_EXE_tickd"))
        .arg("--version")
        .output()
        .expect("run tickd --version");
    assert!(output.status.success());
    let release = tickd::cron::time_zone_database_version();
    assert_ne!(release, "unknown");
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        format!(
            "tickd {} (tz database {release})\n",
            env!("CARGO_PKG_VERSION")
        )
    );
}
