//! `/metrics` as scrapers read it, from a real tickd: each format parses with a real
//! parser for the Content-Type it is declared with (Prometheus' `promtool check metrics`
//! for the text format 0.0.4, the Prometheus Python client's strict parser for
//! OpenMetrics 1.0); the process metrics agree with what `/proc` says of the tickd
//! process; build info names this build; and the subscriber and unacknowledged-delivery
//! gauges follow a subscriber and a delivery.
//!
//! Needs Debian's `prometheus` package for `promtool` (apt-installed when missing) and,
//! for the OpenMetrics test, PyPI the first time (`target/openmetrics-venv`, from
//! `tests/metrics_format/requirements.txt`; skipped with `TICKD_SKIP_POLYGLOT=1`).

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use common::daemon::{clock_ticks_per_second, cpu_ticks, tickd_command, Daemon};
use common::metrics::{exercise, fetch_metrics, scrape_until, Scrape};
use common::tooling::{promtool, python_venv, repo, run_with_stdin, skip_polyglot};
use common::*;
use tickd::proto::subscribe_request::Mode;
use tickd::proto::timers_client::TimersClient;
use tonic::transport::{Channel, Endpoint};

const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// What Prometheus 2.x sends when it scrapes.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,\
    application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

async fn client_of(addr: SocketAddr) -> TimersClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect");
    TimersClient::new(channel)
}

fn daemon_with_metrics() -> Daemon {
    let mut command = tickd_command();
    command.args(["--sync", "none", "--metrics-listen", "127.0.0.1:0"]);
    Daemon::start(command)
}

fn series_names(scrape_text: &str) -> BTreeSet<String> {
    scrape_text
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| line.split(['{', ' ']).next().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_text_format_is_declared_as_such_and_passes_promtool() {
    let promtool = promtool().unwrap_or_else(|failure| panic!("{failure}"));
    let daemon = daemon_with_metrics();
    exercise(&mut client_of(daemon.addr).await).await;
    // What curl and promtool ask for, or nothing at all: the text format.
    for accept in [
        None,
        Some("*/*"),
        Some("text/plain"),
        Some("application/json"),
    ] {
        let exposition = fetch_metrics(daemon.metrics_addr(), accept).await;
        assert_eq!(exposition.content_type, TEXT, "Accept: {accept:?}");
        let body = exposition.body;
        assert!(
            !body.contains("# EOF") && !body.contains("# UNIT"),
            "{body}"
        );
        let mut check = Command::new(&promtool);
        check.args(["check", "metrics"]);
        let checked =
            run_with_stdin(check, &body).unwrap_or_else(|failure| panic!("{failure}\n{body}"));
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
        // promtool prints each lint problem (a counter without help, a bad name...).
        assert!(
            said.trim().is_empty(),
            "promtool check metrics:\n{said}\n{body}"
        );
        for declared in [
            "# TYPE tickd_timers_registered_total counter",
            "# TYPE tickd_build_info gauge",
            "# TYPE process_cpu_seconds_total counter",
            "# TYPE tickd_firing_lateness_seconds histogram",
            "# TYPE tickd_subscribers gauge",
            "# TYPE tickd_delivery_unacked gauge",
        ] {
            assert!(body.contains(declared), "no `{declared}` in\n{body}");
        }
    }
}

/// The same scrape as OpenMetrics when Prometheus asks for it, read by a strict parser.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openmetrics_is_served_to_prometheus_and_passes_a_strict_parser() {
    if skip_polyglot("metrics_format openmetrics") {
        return;
    }
    let python = python_venv(
        "openmetrics-venv",
        &repo().join("tests/metrics_format/requirements.txt"),
    )
    .unwrap_or_else(|failure| panic!("{failure}"));
    let daemon = daemon_with_metrics();
    exercise(&mut client_of(daemon.addr).await).await;
    let exposition = fetch_metrics(daemon.metrics_addr(), Some(PROMETHEUS_ACCEPT)).await;
    assert_eq!(exposition.content_type, OPENMETRICS);
    assert!(exposition.body.ends_with("# EOF\n"));
    let mut parse = Command::new(&python);
    parse.arg(repo().join("tests/metrics_format/parse_openmetrics.py"));
    let parsed =
        run_with_stdin(parse, &exposition.body).unwrap_or_else(|failure| panic!("{failure}"));
    let parsed = String::from_utf8(parsed.stdout).expect("utf-8");
    let families: BTreeSet<&str> = parsed
        .lines()
        .filter_map(|line| line.strip_prefix("# FAMILY "))
        .collect();
    for family in [
        "tickd_timers_registered counter -",
        "tickd_firing_lateness_seconds histogram seconds",
        "tickd_log_fsync_seconds histogram seconds",
        "tickd_worker_busy_seconds counter seconds",
        "tickd_build info -",
        "tickd_subscribers gauge -",
        "tickd_delivery_unacked gauge -",
        "process_cpu_seconds counter seconds",
        "process_resident_memory_bytes gauge bytes",
        "process_virtual_memory_bytes gauge bytes",
        "process_start_time_seconds gauge seconds",
        "process_open_fds gauge -",
        "process_max_fds gauge -",
    ] {
        assert!(
            families.contains(family),
            "no family `{family}` in\n{parsed}"
        );
    }
    let scrape = Scrape::parse(&parsed);
    assert_eq!(scrape.value("tickd_timers_registered_total"), 2.0);
    assert_eq!(
        scrape.value("tickd_timers_pending{namespace=\"metrics\"}"),
        1.0
    );
    assert!(scrape.value("process_open_fds") > 0.0);
    // Both formats carry the same series.
    let text = fetch_metrics(daemon.metrics_addr(), None).await.body;
    assert_eq!(series_names(&parsed), series_names(&text));
}

fn proc_field(pid: u32, file: &str, prefix: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).expect("read /proc");
    text.lines()
        .find_map(|line| line.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix} in /proc/{pid}/{file}"))
        .trim()
        .to_owned()
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The process metrics describe the tickd process, as `/proc/PID` shows it to the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_metrics_describe_the_tickd_process_and_build_info_this_build() {
    let started_after = unix_now();
    let daemon = daemon_with_metrics();
    let serving_by = unix_now();
    exercise(&mut client_of(daemon.addr).await).await;
    let pid = daemon.pid();
    let ticks = clock_ticks_per_second() as f64;
    let cpu_before = cpu_ticks(pid) as f64 / ticks;
    let text = fetch_metrics(daemon.metrics_addr(), None).await.body;
    let cpu_after = cpu_ticks(pid) as f64 / ticks;
    let scrape = Scrape::parse(&text);

    let cpu = scrape.value("process_cpu_seconds_total");
    assert!(
        cpu_before <= cpu && cpu <= cpu_after,
        "{cpu_before} <= {cpu} <= {cpu_after}"
    );
    // Whole seconds of boot time plus ticks: within a second of when it was started.
    let start = scrape.value("process_start_time_seconds");
    assert!(
        started_after - 1.0 <= start && start <= serving_by + 1.0,
        "started between {started_after} and {serving_by}, says {start}"
    );
    let soft_limit: f64 = proc_field(pid, "limits", "Max open files")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(scrape.value("process_max_fds"), soft_limit);
    let open = scrape.value("process_open_fds");
    let open_now = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as f64;
    // Its listeners, its log and the scrape's own connection, give or take that one.
    assert!(
        open >= 4.0 && (open - open_now).abs() <= 3.0,
        "{open} vs {open_now}"
    );
    let rss = scrape.value("process_resident_memory_bytes");
    assert!(rss > 1_048_576.0, "{rss}");
    assert!(scrape.value("process_virtual_memory_bytes") >= rss);

    let build = format!(
        "tickd_build_info{{version=\"{}\",tz_database=\"{}\"}}",
        env!("CARGO_PKG_VERSION"),
        tickd::cron::time_zone_database_version()
    );
    assert_eq!(scrape.value(&build), 1.0);
    assert_eq!(scrape.series("tickd_build_info"), 1);

    // Lateness: the fine low end kept, and buckets up past a minute.
    let bounds: Vec<f64> = text
        .lines()
        .filter_map(|line| line.strip_prefix("tickd_firing_lateness_seconds_bucket{le=\""))
        .filter_map(|rest| rest.split('"').next()?.parse().ok())
        .filter(|bound: &f64| bound.is_finite())
        .collect();
    assert!(
        bounds.first().is_some_and(|low| *low <= 0.001),
        "{bounds:?}"
    );
    assert!(bounds.last().is_some_and(|top| *top >= 60.0), "{bounds:?}");
    assert_eq!(scrape.value("tickd_firing_lateness_seconds_count"), 1.0);
}

fn gauges(scrape: &Scrape) -> [f64; 5] {
    [
        scrape.value("tickd_subscribers{mode=\"shared\"}"),
        scrape.value("tickd_subscribers{mode=\"auto_ack\"}"),
        scrape.value("tickd_subscribers{mode=\"observer\"}"),
        scrape.value("tickd_delivery_unacked"),
        scrape.value("tickd_delivery_buffered"),
    ]
}

/// `[shared, auto_ack, observer, unacked, buffered]` reach `expected`, or the test fails
/// showing what they were.
async fn await_gauges(addr: SocketAddr, expected: [f64; 5]) {
    let scrape = scrape_until(addr, |scrape| gauges(scrape) == expected).await;
    assert_eq!(
        gauges(&scrape),
        expected,
        "[shared, auto_ack, observer, unacked, buffered]"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriber_and_unacked_gauges_follow_streams_and_acks() {
    let server = TestServer::start().await;
    let metrics = server.metrics_addr;
    let mut client = server.client().await;
    await_gauges(metrics, [0.0, 0.0, 0.0, 0.0, 0.0]).await;

    let mut shared = subscribe(&mut client, "gauges", 600_000, 10).await;
    let auto_ack = client
        .subscribe(SubscribeRequest {
            namespace: "gauges-auto".into(),
            auto_ack: true,
            ..Default::default()
        })
        .await
        .expect("subscribe auto-ack")
        .into_inner();
    let observer = client
        .subscribe(SubscribeRequest {
            namespace: "gauges".into(),
            mode: Mode::Observer as i32,
            ..Default::default()
        })
        .await
        .expect("observe")
        .into_inner();
    await_gauges(metrics, [1.0, 1.0, 1.0, 0.0, 0.0]).await;

    // A delivery waits for its ack: unacked until acknowledged.
    register(&mut client, spec("gauges", 1, b"first")).await;
    let first = within(next_expiration(&mut shared)).await;
    await_gauges(metrics, [1.0, 1.0, 1.0, 1.0, 0.0]).await;
    let acked = ack(&mut client, "gauges", vec![first.delivery_id]).await;
    assert_eq!(acked.acknowledged, 1);
    await_gauges(metrics, [1.0, 1.0, 1.0, 0.0, 0.0]).await;

    // Its subscriber goes away with a delivery unacknowledged: the delivery waits again.
    register(&mut client, spec("gauges", 1, b"second")).await;
    within(next_expiration(&mut shared)).await;
    await_gauges(metrics, [1.0, 1.0, 1.0, 1.0, 0.0]).await;
    drop(shared);
    await_gauges(metrics, [0.0, 1.0, 1.0, 0.0, 1.0]).await;

    drop((auto_ack, observer));
    await_gauges(metrics, [0.0, 0.0, 0.0, 0.0, 1.0]).await;
    // A subscription refused (a control character in its namespace) leaves no count behind.
    let refused = client
        .subscribe(SubscribeRequest {
            namespace: "bad\u{1}namespace".into(),
            ..Default::default()
        })
        .await;
    assert_eq!(
        refused.expect_err("invalid namespace").code(),
        tonic::Code::InvalidArgument
    );
    await_gauges(metrics, [0.0, 0.0, 0.0, 0.0, 1.0]).await;
}
