//! The documentation a user reads (README.md, docs/, the client packages' and deploy/
//! READMEs) names no path of the machine it was written on, no issue of the tracker and no
//! work session; the README shows how to run and test tickd on its first screen and says
//! where its figures come from; docs/performance.md stays a reference, not a notebook.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn markdown_under(dir: &Path, only_readmes: bool, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "node_modules" | "target" | "build" | ".git") {
                markdown_under(&path, only_readmes, found);
            }
        } else if name.ends_with(".md") && (!only_readmes || name == "README.md") {
            found.push(path);
        }
    }
}

/// Every page the checks read.
fn pages() -> Vec<PathBuf> {
    let root = repo();
    let mut pages = vec![root.join("README.md"), root.join("CHANGELOG.md")];
    markdown_under(&root.join("docs"), false, &mut pages);
    markdown_under(&root.join("clients"), true, &mut pages);
    markdown_under(&root.join("deploy"), true, &mut pages);
    pages.retain(|page| page.exists());
    assert!(pages.len() >= 10, "too few pages found: {pages:?}");
    pages
}

/// Machine paths: folders of a user or of a scratch area, never part of an install.
const MACHINE_PATHS: [&str; 4] = ["/tmp/", "/work/", "/home/", "/root/"];

/// Words that, before "session", make it a work session (a database session is fine).
const SESSION_WORDS: [&str; 12] = [
    "this",
    "that",
    "a later",
    "an earlier",
    "the next",
    "the previous",
    "the last",
    "another",
    "later",
    "earlier",
    "previous",
    "work",
];

/// The faults of one line: machine paths, issue numbers, work sessions.
fn faults(line: &str) -> Vec<String> {
    let mut faults = Vec::new();
    for path in MACHINE_PATHS {
        if line.contains(path) {
            faults.push(format!("names the machine path {path}"));
        }
    }
    let lower = line.to_lowercase();
    for (at, _) in lower.match_indices("issue") {
        let rest = lower[at + "issue".len()..].trim_start_matches('s');
        let rest = rest
            .trim_start_matches([' ', '\u{a0}'])
            .trim_start_matches('#');
        if rest.starts_with(|c: char| c.is_ascii_digit()) {
            faults.push("names an issue number".to_owned());
        }
    }
    for (at, _) in lower.match_indices("session") {
        let before = lower[..at].trim_end();
        if SESSION_WORDS.iter().any(|word| {
            before.ends_with(word)
                && !before[..before.len() - word.len()].ends_with(|c: char| c.is_alphanumeric())
        }) {
            faults.push("speaks of a work session".to_owned());
        }
    }
    faults
}

#[test]
fn the_fault_finder_finds_what_it_looks_for() {
    assert!(!faults("see /tmp/tickd-data").is_empty());
    assert!(!faults("kept in /work/main/target").is_empty());
    assert!(!faults("Issue 27's levers").is_empty());
    assert!(!faults("as issue #40 asked").is_empty());
    assert!(!faults("issues 27 and 28").is_empty());
    assert!(!faults("measured in this session").is_empty());
    assert!(!faults("in a later session").is_empty());
    assert!(faults("installed under /usr/share/java and /etc/tickd").is_empty());
    assert!(faults("the replica loses its session after 10 s").is_empty());
    assert!(faults("an issue with the clock").is_empty());
}

#[test]
fn no_page_names_a_machine_path_an_issue_or_a_work_session() {
    let root = repo();
    let mut found = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read page");
        for (number, line) in text.lines().enumerate() {
            for fault in faults(line) {
                found.push(format!(
                    "{}:{}: {fault}: {}",
                    page.strip_prefix(&root).unwrap_or(&page).display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_readme_shows_how_to_run_and_test_on_its_first_screen() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let screen: Vec<&str> = readme.lines().take(60).collect();
    let screen = screen.join("\n");
    for command in [
        "cargo run --release --bin tickd",
        "\ncargo test\n",
        "TICKD_SKIP_POLYGLOT=1 TICKD_SKIP_POSTGRES=1 TICKD_SKIP_BROKERS=1 cargo test",
    ] {
        assert!(
            screen.contains(command),
            "README.md's first 60 lines do not show {command:?}"
        );
    }
}

/// The groups of tests/tools/packages, each with its packages in order.
fn package_groups(text: &str) -> Vec<(String, Vec<String>)> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .map(|(group, packages)| {
            let packages = packages.split_whitespace().map(str::to_owned).collect();
            (group.trim().to_owned(), packages)
        })
        .collect()
}

/// The README's "What the suite installs" rows: `| `group` | `a` `b` | for |`.
fn readme_package_rows(readme: &str) -> Vec<(String, Vec<String>)> {
    readme
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            // ["", group, packages, for, ""]
            if cells.len() != 5 || !cells[1].starts_with('`') {
                return None;
            }
            let group = cells[1].trim_matches('`').to_owned();
            let packages: Vec<String> = cells[2]
                .split_whitespace()
                .map(|package| package.trim_matches('`').to_owned())
                .collect();
            let all_code = cells[2]
                .split_whitespace()
                .all(|word| word.starts_with('`'));
            all_code.then_some((group, packages))
        })
        .collect()
}

#[test]
fn the_readme_lists_every_package_the_suite_installs_as_the_install_script_does() {
    let list = std::fs::read_to_string(repo().join("tests/tools/packages")).expect("packages");
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let groups = package_groups(&list);
    assert!(groups.len() >= 10, "tests/tools/packages lost its groups");
    let rows = readme_package_rows(&readme);
    assert_eq!(
        rows, groups,
        "README.md's table of what the suite installs differs from tests/tools/packages"
    );
}

#[test]
fn the_package_table_reader_sees_a_changed_row() {
    let list = "# comment\nnats: nats-server\nredis: redis-server\n";
    let table = "| `nats` | `nats-server` | x |\n| `redis` | `redis-tools` | y |\n";
    assert_ne!(readme_package_rows(table), package_groups(list));
    let table = "| `nats` | `nats-server` | x |\n| `redis` | `redis-server` | y |\n";
    assert_eq!(readme_package_rows(table), package_groups(list));
}

#[test]
fn the_readme_says_where_its_figures_come_from_and_when() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let table = readme
        .split("## Why tickd")
        .nth(1)
        .expect("a \"## Why tickd\" section")
        .split("\n## ")
        .next()
        .unwrap_or_default();
    assert!(
        table.contains("benches/headline.sh"),
        "the figures' section names no script"
    );
    assert!(
        table.contains("Measured ") && table.contains(" at commit ") && table.contains(" cores ("),
        "the figures' section gives no date, commit or machine"
    );
    assert!(repo().join("benches/headline.sh").exists());
}

#[test]
fn the_performance_page_is_a_reference_not_a_notebook() {
    let text = std::fs::read_to_string(repo().join("docs/performance.md")).expect("page");
    let lines = text.lines().count();
    assert!(
        lines <= 450,
        "docs/performance.md has {lines} lines (450 at most)"
    );
}
