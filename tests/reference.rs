//! docs/reference.md against what it describes: the flag tables of `tickd` and `tickctl`
//! (rendered from their clap definitions, which hold every flag and default), and the
//! metrics table (against a scrape of a real server's `/metrics`, both ways: every family
//! served is on the page with its type and labels, and every row of the page is served).
//!
//! After changing a flag on purpose, `TICKD_BLESS=1 cargo test --test reference` writes the
//! new flag tables into the page (then read the diff).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use clap::CommandFactory;
use common::metrics::{exercise, scrape_text};
use common::*;
use tickd::config::Config;

fn page_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/reference.md")
}

fn page() -> String {
    std::fs::read_to_string(page_path()).expect("read docs/reference.md")
}

fn markers(name: &str) -> (String, String) {
    (
        format!("<!-- generated: {name} flags -->\n"),
        format!("<!-- end of generated: {name} flags -->\n"),
    )
}

/// Where the text between the page's markers for `name`'s flags lies.
fn generated_range(page: &str, name: &str) -> std::ops::Range<usize> {
    let (begin, end) = markers(name);
    let start = page
        .find(&begin)
        .unwrap_or_else(|| panic!("docs/reference.md has no {begin:?}"))
        + begin.len();
    let stop = page[start..]
        .find(&end)
        .unwrap_or_else(|| panic!("docs/reference.md has no {end:?}"))
        + start;
    start..stop
}

/// The tests of this file run on threads of one process: one at a time rewrites the page.
static PAGE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Compares the page's tables for `name` with `rendered`; with TICKD_BLESS=1, writes
/// `rendered` into the page instead.
fn check_flags(name: &str, rendered: &str) {
    let _page = PAGE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let page = page();
    let range = generated_range(&page, name);
    let current = &page[range.clone()];
    let rendered = format!("\n{rendered}");
    if std::env::var_os("TICKD_BLESS").is_some() {
        let mut blessed = page.clone();
        blessed.replace_range(range, &rendered);
        std::fs::write(page_path(), blessed).expect("write page");
        return;
    }
    if current != rendered {
        let differing: Vec<String> = rendered
            .lines()
            .filter(|line| !current.lines().any(|other| other == *line))
            .map(|line| format!("  now:  {line}"))
            .chain(
                current
                    .lines()
                    .filter(|line| !rendered.lines().any(|other| other == *line))
                    .map(|line| format!("  page: {line}")),
            )
            .collect();
        panic!(
            "docs/reference.md's {name} flags differ from the command line \
             (TICKD_BLESS=1 cargo test --test reference rewrites them):\n{}",
            differing.join("\n")
        );
    }
}

#[test]
fn tickd_flags_and_defaults_are_those_on_the_page() {
    check_flags("tickd", &tickd::reference::flag_tables(&Config::command()));
}

#[test]
fn tickctl_flags_and_defaults_are_those_on_the_page() {
    let output = Command::new(env!("CARGO_BIN_EXE_tickctl"))
        .args(["man", "--markdown"])
        .env_remove("TICKCTL_NAMESPACE")
        .env_remove("TICKCTL_OUTPUT")
        .output()
        .expect("run tickctl man --markdown");
    assert!(output.status.success(), "{output:?}");
    check_flags("tickctl", &String::from_utf8(output.stdout).expect("utf-8"));
}

/// A metric family as the page or the scrape describes it: its type and label names.
#[derive(Debug, PartialEq, Eq)]
struct Family {
    kind: String,
    labels: BTreeSet<String>,
}

/// The page's metrics table: rows `| `name` | type | labels | meaning |` under "## Metrics".
fn page_families(page: &str) -> BTreeMap<String, Family> {
    let section = page
        .split("\n## Metrics\n")
        .nth(1)
        .expect("docs/reference.md has a \"## Metrics\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut families = BTreeMap::new();
    for row in section.lines().filter(|line| line.starts_with("| `")) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        assert!(cells.len() >= 3, "a metrics row with too few cells: {row}");
        let labels = cells[2]
            .split(',')
            .map(|label| label.trim().trim_matches('`').to_owned())
            .filter(|label| !label.is_empty() && label != "—")
            .collect();
        let previous = families.insert(
            cells[0].trim_matches('`').to_owned(),
            Family {
                kind: cells[1].to_owned(),
                labels,
            },
        );
        assert!(previous.is_none(), "a metric listed twice: {row}");
    }
    families
}

/// Families of a text-format scrape: `# TYPE` lines, and the label names of their samples
/// (a histogram's `le` is its buckets, not a label).
fn scraped_families(text: &str) -> BTreeMap<String, Family> {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
            families.insert(
                name.to_owned(),
                Family {
                    kind: kind.to_owned(),
                    labels: BTreeSet::new(),
                },
            );
        }
    }
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let Some((series, labels)) = line.split_once('{') else {
            continue;
        };
        let family = families
            .keys()
            .filter(|name| {
                series == name.as_str()
                    || ["_bucket", "_sum", "_count", "_total", "_info"]
                        .iter()
                        .any(|suffix| series.strip_suffix(suffix) == Some(name.as_str()))
            })
            .max_by_key(|name| name.len())
            .cloned()
            .unwrap_or_else(|| panic!("a sample of no family: {line}"));
        let labels = labels.split('}').next().unwrap_or_default();
        for pair in labels.split("\",") {
            if let Some((label, _)) = pair.split_once('=') {
                if label != "le" {
                    families
                        .get_mut(&family)
                        .expect("family")
                        .labels
                        .insert(label.trim_start_matches(',').to_owned());
                }
            }
        }
    }
    families
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_served_is_on_the_page_with_its_type_and_labels_and_no_other() {
    let server = TestServer::start_with(config(|config| {
        config.sync = tickd::local::store::SyncMode::None;
        // A sink's series show from its start, whether it is ever reached or not.
        config.sinks = vec!["pushed=http://127.0.0.1:9/".parse().expect("a valid sink")];
    }))
    .await;
    let mut client = server.client().await;
    exercise(&mut client).await;
    let scraped = scraped_families(&scrape_text(server.metrics_addr).await);
    let documented = page_families(&page());
    let missing: Vec<_> = scraped
        .keys()
        .filter(|name| !documented.contains_key(*name))
        .collect();
    let extra: Vec<_> = documented
        .keys()
        .filter(|name| !scraped.contains_key(*name))
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/reference.md's metrics differ from /metrics: served but not on the page {missing:?}; \
         on the page but not served {extra:?}"
    );
    for (name, served) in &scraped {
        let listed = &documented[name];
        assert_eq!(listed.kind, served.kind, "the type of {name}");
        // A family whose series appear only under load (or in replicated mode) shows no
        // labels here; the labels it does show must be the page's.
        assert!(
            served.labels.is_subset(&listed.labels),
            "{name}: served with labels {:?}, the page says {:?}",
            served.labels,
            listed.labels
        );
        if !served.labels.is_empty() {
            assert_eq!(served.labels, listed.labels, "the labels of {name}");
        }
    }
    server.stop().await;
}
