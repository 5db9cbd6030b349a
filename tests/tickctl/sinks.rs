//! `tickctl sink set|get|status|remove` against a real tickd and a real HTTP sink: the
//! URL's credentials are never printed, status counts the pushes, refusals exit 1 with
//! the server's code, and `--output json` prints the answers in proto3 JSON.

use std::time::Duration;

use crate::common::http_sink::{always, HttpSink};
use crate::common::wait::eventually;
use crate::common::TestServer;
use crate::common::PATIENCE;
use crate::support::{add, endpoint, json, run, stdout};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sink_set_get_status_and_remove() {
    let sink = HttpSink::start(always(200)).await;
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    let url = format!("http://user:secret@{}/timers", sink.addr);
    let shown = format!("http://***@{}/timers", sink.addr);

    let set = stdout(&endpoint, &["sink", "set", "hooks", &url]).await;
    assert_eq!(
        set,
        format!("set namespace=hooks url={shown} from=api paused=false\n")
    );
    let again = stdout(&endpoint, &["sink", "set", "hooks", &url]).await;
    assert!(again.starts_with("unchanged "), "{again}");
    let got = stdout(&endpoint, &["sink", "get", "hooks"]).await;
    assert_eq!(
        got,
        format!("namespace=hooks url={shown} from=api paused=false\n")
    );
    let got = json(&endpoint, &["sink", "get", "hooks", "-o", "json"]).await;
    assert_eq!(got["sink"]["url"], shown.as_str());
    assert_eq!(got["sink"]["origin"], "SINK_ORIGIN_API");

    let id = add(&endpoint, &["-n", "hooks", "--delay", "1ms"]).await;
    sink.wait_for("the expiration", |pushes| {
        pushes.iter().any(|push| push.key.contains(&id))
    })
    .await;
    // Counted once answered: asked until the count shows it.
    eventually(
        "the status counts the push",
        PATIENCE,
        Duration::from_millis(50),
        || async {
            let status = json(&endpoint, &["sink", "status", "hooks", "-o", "json"]).await;
            match status["sinks"][0]["delivered"].as_str() {
                Some("1") => Ok(()),
                _ => Err(status.to_string()),
            }
        },
        || async { String::new() },
    )
    .await;
    let status = json(&endpoint, &["sink", "status", "hooks", "-o", "json"]).await;
    assert_eq!(status["sinks"][0]["circuit"], "SINK_CIRCUIT_CLOSED");
    let table = stdout(&endpoint, &["sink", "status"]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert!(lines[0].starts_with("NAMESPACE"), "{table}");
    for cell in ["hooks", shown.as_str(), "api", "closed"] {
        assert!(lines[1].contains(cell), "{cell} missing: {table}");
    }
    assert!(!table.contains("secret") && !set.contains("secret"));

    let refused = run(&endpoint, &["sink", "set", "hooks", "http://10.1.2.3/"]).await;
    assert!(
        refused.failed(1).contains("--sink-allow"),
        "{}",
        refused.stderr
    );
    let refused = run(&endpoint, &["sink", "set", "hooks", "gopher://x/"]).await;
    assert!(refused.failed(1).contains("url"), "{}", refused.stderr);

    let removed = stdout(&endpoint, &["sink", "remove", "hooks"]).await;
    assert_eq!(removed, "removed the sink of hooks\n");
    let missing = run(&endpoint, &["sink", "get", "hooks"]).await;
    assert!(
        missing.failed(1).contains("NOT_FOUND"),
        "{}",
        missing.stderr
    );
    let none = stdout(&endpoint, &["sink", "status"]).await;
    assert_eq!(none.lines().count(), 1, "the header alone: {none}");
    server.stop().await;
}
