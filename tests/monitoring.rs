//! `deploy/monitoring/` checked: the alert rules pass `promtool check rules` and their unit
//! tests (`promtool test rules`); every dashboard query is PromQL that promtool accepts;
//! every metric the dashboard and the alerts name is one a real tickd exports; the
//! ServiceMonitor and PodMonitor point at ports the manifests declare; and a real
//! Prometheus scrapes a real tickd and evaluates the rules.
//!
//! Needs Debian's `prometheus` package for `promtool` and `prometheus` (apt-installed when
//! missing).

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::metrics::{exercise, fetch_metrics};
use common::tooling::{must, promtool, repo};
use common::wait::eventually;
use common::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MONITORING: &str = "deploy/monitoring";

/// How long Prometheus may take to start, scrape and evaluate; how often it is asked.
const PATIENCE: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);

/// Series Prometheus adds to every target itself.
const SYNTHETIC: [&str; 1] = ["up"];

fn promtool_or_panic() -> PathBuf {
    promtool().unwrap_or_else(|failure| panic!("{failure}"))
}

fn monitoring_file(name: &str) -> PathBuf {
    repo().join(MONITORING).join(name)
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `expr:` of every rule in a rule file (each on one line, as alerts.yaml writes them).
fn rule_expressions(rules: &str) -> Vec<String> {
    rules
        .lines()
        .filter_map(|line| line.trim().strip_prefix("expr: "))
        .map(str::to_owned)
        .collect()
}

fn alert_names(rules: &str) -> Vec<String> {
    rules
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- alert: "))
        .map(str::to_owned)
        .collect()
}

/// Every `expr` of the dashboard's panels (rows hold none), with its panel's title.
fn dashboard_queries() -> Vec<(String, String)> {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read(&monitoring_file("dashboard.json"))).expect("dashboard JSON");
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        if panel["type"] == "row" {
            continue;
        }
        let title = panel["title"].as_str().expect("title").to_owned();
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {title} queries nothing");
        for target in targets {
            let expr = target["expr"].as_str().expect("expr");
            queries.push((title.clone(), expr.to_owned()));
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if let Some(query) = variable["query"]["query"].as_str() {
            // label_values(METRIC_SELECTOR, label): the selector names a metric.
            let selector = query
                .strip_prefix("label_values(")
                .and_then(|rest| rest.rsplit_once(','))
                .map(|(selector, _)| selector)
                .expect("a label_values(...) variable");
            queries.push((
                format!("variable {}", variable["name"]),
                selector.to_owned(),
            ));
        }
    }
    queries
}

/// Grafana's variables replaced by what they stand for, so that promtool can parse it.
fn without_grafana_variables(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$job", ".*")
        .replace("$instance", ".*")
}

const AGGREGATIONS: [&str; 14] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
/// Followed by a parenthesised list of label names, not an expression.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const KEYWORDS: [&str; 7] = ["and", "or", "unless", "bool", "offset", "inf", "nan"];

/// Index just past the closing `close` that matches the opening at `start`, skipping
/// quoted strings.
fn past_closing(chars: &[char], start: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut index = start;
    while index < chars.len() {
        match chars[index] {
            '"' | '\'' | '`' => index = past_string(chars, index) - 1,
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return index + 1;
                }
            }
            _ => {}
        }
        index += 1;
    }
    panic!("unbalanced {open} in {}", chars.iter().collect::<String>())
}

fn past_string(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut index = start + 1;
    while index < chars.len() && chars[index] != quote {
        index += if chars[index] == '\\' { 2 } else { 1 };
    }
    index + 1
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The metric names a PromQL expression selects: identifiers that are not functions,
/// aggregations, keywords or label names (in `{...}` matchers or `by (...)` lists), nor
/// inside strings, ranges (`[5m]`) or numbers.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut index = 0;
    while index < chars.len() {
        let c = chars[index];
        if c == '"' || c == '\'' || c == '`' {
            index = past_string(&chars, index);
        } else if c == '{' {
            index = past_closing(&chars, index, '{', '}');
        } else if c == '[' {
            index = past_closing(&chars, index, '[', ']');
        } else if c.is_ascii_digit() || c == '.' {
            // Numbers, durations (`offset 5m`) and exponents.
            while index < chars.len() && (is_name_char(chars[index]) || chars[index] == '.') {
                index += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = index;
            while index < chars.len() && is_name_char(chars[index]) {
                index += 1;
            }
            let word: String = chars[start..index].iter().collect();
            let mut next = index;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let called = chars.get(next) == Some(&'(');
            if LABEL_LISTS.contains(&word.as_str()) {
                if called {
                    index = past_closing(&chars, next, '(', ')');
                }
            } else if !called
                && !AGGREGATIONS.contains(&word.as_str())
                && !KEYWORDS.contains(&word.to_ascii_lowercase().as_str())
            {
                names.insert(word);
            }
        } else {
            index += 1;
        }
    }
    names
}

/// Names a scrape exports: each sample's, and each declared family's with a histogram's
/// `_bucket`, `_sum` and `_count`. (A family shows only once it has a series: tickd
/// creates the series of its fixed label values, such as close reasons, at 0.)
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(declared) = line.strip_prefix("# TYPE ") {
            let (name, kind) = declared.split_once(' ').expect("# TYPE name kind");
            names.insert(name.to_owned());
            if kind == "histogram" || kind == "summary" {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            names.insert(line.split(['{', ' ']).next().unwrap().to_owned());
        }
    }
    names
}

#[test]
fn the_metric_name_reader_skips_functions_labels_strings_and_keywords() {
    let expr = r#"histogram_quantile(0.99, sum by (job, le) (rate(a_bucket{code="x", le!~"y{1}"}[5m] offset 1h)))
        / on(instance) group_left(version) b_info > bool 1e3 and up{job="tickd"} unless count without (mode) (c:recorded) or Inf"#;
    let expected: BTreeSet<String> = ["a_bucket", "b_info", "up", "c:recorded"]
        .map(String::from)
        .into();
    assert_eq!(metric_names(expr), expected);
}

#[test]
fn alert_rules_pass_promtool_and_their_unit_tests() {
    let promtool = promtool_or_panic();
    let mut check = Command::new(&promtool);
    check
        .args(["check", "rules"])
        .arg(monitoring_file("alerts.yaml"));
    must(check);
    let mut test = Command::new(&promtool);
    test.args(["test", "rules"])
        .arg(monitoring_file("alerts.test.yaml"));
    must(test);

    // What the alerts must cover, and a unit test for every alert.
    let alerts = alert_names(&read(&monitoring_file("alerts.yaml")));
    for required in [
        "TickdNotServing",
        "TickdStoreFailed",
        "TickdFiringLate",
        "TickdDeadExpirationsGrowing",
        "TickdShedding",
    ] {
        assert!(
            alerts.iter().any(|alert| alert == required),
            "no alert {required}"
        );
    }
    let tests = read(&monitoring_file("alerts.test.yaml"));
    for alert in &alerts {
        assert!(
            tests.contains(&format!("alertname: {alert}\n")),
            "alert {alert} has no unit test in alerts.test.yaml"
        );
    }
}

#[test]
fn dashboard_queries_are_promql_promtool_accepts() {
    let promtool = promtool_or_panic();
    // Each query as a recording rule: `promtool check rules` parses its expression.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (index, (_, expr)) in dashboard_queries().iter().enumerate() {
        let expr = serde_json::to_string(&without_grafana_variables(expr)).unwrap();
        rules.push_str(&format!(
            "      - record: dashboard:query_{index}\n        expr: {expr}\n"
        ));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("dashboard-queries.yaml");
    fs::write(&file, &rules).expect("write rules");
    let mut check = Command::new(&promtool);
    check.args(["check", "rules"]).arg(&file);
    must(check);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_alerts_name_is_exported() {
    let server = TestServer::start().await;
    exercise(&mut server.client().await).await;
    let text = fetch_metrics(server.metrics_addr, None).await.body;
    let exported = exported_names(&text);

    let mut named: Vec<(String, String)> = Vec::new();
    for (title, expr) in dashboard_queries() {
        for name in metric_names(&without_grafana_variables(&expr)) {
            named.push((format!("dashboard panel {title:?}"), name));
        }
    }
    let rules = read(&monitoring_file("alerts.yaml"));
    for expr in rule_expressions(&rules) {
        for name in metric_names(&expr) {
            named.push((format!("alert expression {expr:?}"), name));
        }
    }
    let unknown: Vec<String> = named
        .iter()
        .filter(|(_, name)| !exported.contains(name) && !SYNTHETIC.contains(&name.as_str()))
        .map(|(place, name)| format!("{name} (in {place})"))
        .collect();
    assert!(
        unknown.is_empty(),
        "not exported by tickd: {unknown:#?}\nexported: {exported:#?}"
    );
    // The dashboard covers what an operator watches.
    let dashboard_names: BTreeSet<&str> = named
        .iter()
        .filter(|(place, _)| place.starts_with("dashboard"))
        .map(|(_, name)| name.as_str())
        .collect();
    for watched in [
        "tickd_firing_lateness_seconds_bucket",
        "tickd_timers_registered_total",
        "tickd_timers_fired_total",
        "tickd_timers_pending",
        "tickd_delivery_buffered",
        "tickd_delivery_unacked",
        "tickd_delivery_dead",
        "tickd_log_fsync_seconds_bucket",
        "tickd_rpc_requests_total",
        "tickd_connections_closed_by_server_total",
        "tickd_subscribers",
        "tickd_serving",
        "process_resident_memory_bytes",
    ] {
        assert!(
            dashboard_names.contains(watched),
            "the dashboard shows no {watched}"
        );
    }
}

/// A port `name:` in a manifest's `ports:` lists.
fn declares_port(manifest: &str, name: &str) -> bool {
    manifest
        .lines()
        .any(|line| line.trim() == format!("- name: {name}"))
}

#[test]
fn the_monitors_point_at_ports_the_manifests_declare() {
    let service_monitor = read(&monitoring_file("servicemonitor.yaml"));
    assert!(service_monitor.contains("kind: ServiceMonitor"));
    assert!(service_monitor.contains("- port: metrics\n"));
    assert!(service_monitor.contains("app.kubernetes.io/name: tickd"));
    for overlay in ["standalone", "replicated"] {
        let service = read(&repo().join(format!("deploy/overlays/{overlay}/service.yaml")));
        assert!(
            declares_port(&service, "metrics") && service.contains("app.kubernetes.io/name: tickd"),
            "the {overlay} Service has no `metrics` port for the ServiceMonitor"
        );
        // The job is named after the Service.
        assert!(
            service.contains("\n  name: tickd\n"),
            "{overlay}: {service}"
        );
    }
    let pod_monitor = read(&monitoring_file("podmonitor.yaml"));
    assert!(pod_monitor.contains("kind: PodMonitor"));
    assert!(pod_monitor.contains("- port: tickd-metrics\n"));
    let sidecar = read(&repo().join("deploy/overlays/sidecar/deployment.yaml"));
    assert!(
        declares_port(&sidecar, "tickd-metrics"),
        "the sidecar declares no `tickd-metrics` port for the PodMonitor"
    );
    // Both give the job name the `up` alert expects.
    let rules = read(&monitoring_file("alerts.yaml"));
    assert!(rules.contains("up{job=\"tickd\"}"));
    assert!(pod_monitor.contains("replacement: tickd"));
}

/// A process killed (and reaped) when dropped, so that a failing test leaves none behind.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `GET path` from Prometheus' HTTP API, as JSON (HTTP/1.0: the body ends with the
/// connection); Err while it does not answer yet.
async fn prometheus_api(addr: SocketAddr, path: &str) -> Result<serde_json::Value, String> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: prometheus\r\n\r\n").as_bytes())
        .await
        .map_err(|e| format!("send: {e}"))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .await
        .map_err(|e| format!("read: {e}"))?;
    let response = String::from_utf8_lossy(&response);
    let (_, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no body in {response}"))?;
    serde_json::from_str(body).map_err(|e| format!("{e}: {body}"))
}

/// A port free a moment ago (Prometheus cannot report one it picked itself).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind")
        .port()
}

/// The real Prometheus (Debian's, from the same package as promtool) scrapes a real tickd
/// every second: the target is up with no scrape error, the series arrive with their
/// labels, the alert rules load and evaluate, and none of them fires on a healthy tickd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_tickd_and_evaluates_the_rules_without_alerting() {
    promtool_or_panic(); // the package that brings promtool brings prometheus
    let server = TestServer::start().await;
    exercise(&mut server.client().await).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("prometheus.yml");
    fs::write(
        &config,
        format!(
            "global: {{ scrape_interval: 1s, evaluation_interval: 1s }}\n\
             rule_files: [{:?}]\n\
             scrape_configs:\n  - job_name: tickd\n    static_configs:\n      - targets: [\"{}\"]\n",
            monitoring_file("alerts.yaml"),
            server.metrics_addr
        ),
    )
    .expect("write prometheus.yml");
    let web: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let log = fs::File::create(dir.path().join("prometheus.log")).expect("log file");
    let _prometheus = Reaped(
        Command::new("/usr/bin/prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start prometheus"),
    );
    let report = || async { read(&dir.path().join("prometheus.log")) };

    eventually(
        "Prometheus scraped tickd successfully",
        PATIENCE,
        POLL,
        || async {
            let targets = prometheus_api(web, "/api/v1/targets").await?;
            let target = &targets["data"]["activeTargets"][0];
            match (target["health"].as_str(), target["lastError"].as_str()) {
                (Some("up"), Some("")) => Ok(()),
                // A scrape that failed to parse says so here: no point waiting.
                (Some("down"), Some(error)) if !error.is_empty() => {
                    panic!("Prometheus could not scrape tickd: {error}")
                }
                _ => Err(format!("{target}")),
            }
        },
        report,
    )
    .await;

    let query = |expr: &'static str| async move {
        let answer = prometheus_api(web, &format!("/api/v1/query?query={expr}")).await?;
        answer["data"]["result"]
            .as_array()
            .filter(|result| !result.is_empty())
            .cloned()
            .ok_or_else(|| format!("{expr}: {answer}"))
    };
    let build = query("tickd_build_info").await.expect("tickd_build_info");
    assert_eq!(
        build[0]["metric"]["version"],
        env!("CARGO_PKG_VERSION"),
        "{build:?}"
    );
    for expr in [
        "process_open_fds",
        "process_start_time_seconds",
        "tickd_firing_lateness_seconds_bucket",
        "tickd_subscribers",
        "tickd_timers_registered_total",
    ] {
        query(expr).await.unwrap_or_else(|e| panic!("{e}"));
    }

    let alerts = alert_names(&read(&monitoring_file("alerts.yaml")));
    eventually(
        "every alert rule loaded and evaluated without error",
        PATIENCE,
        POLL,
        || async {
            let rules = prometheus_api(web, "/api/v1/rules").await?;
            let rules = rules["data"]["groups"][0]["rules"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let healthy = rules.iter().filter(|rule| rule["health"] == "ok").count();
            if healthy == alerts.len() && rules.len() == alerts.len() {
                Ok(())
            } else {
                Err(format!("{rules:#?}"))
            }
        },
        report,
    )
    .await;
    let firing = prometheus_api(web, "/api/v1/alerts").await.expect("alerts");
    assert_eq!(firing["data"]["alerts"], serde_json::json!([]), "{firing}");
}
