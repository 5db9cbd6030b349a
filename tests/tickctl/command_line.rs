//! tickctl's command line itself: completion scripts and the manual page generated from it
//! (which need no server), help that keeps the connection flags apart, and the usage errors
//! for a key given where an id goes and for negative durations.

use std::process::Command;

use crate::common::TestServer;
use crate::support::{endpoint, first_line, json, run, tickctl, Ran};

/// An endpoint nothing listens on: the commands below must not try to reach it.
const NOWHERE: &str = "http://127.0.0.1:9";

fn run_offline(args: &[&str]) -> Ran {
    Ran::from(tickctl(NOWHERE).args(args).output().expect("run tickctl"))
}

#[test]
fn bash_completion_completes_subcommands_and_flags() {
    let script = run_offline(&["completion", "bash"]).ok().stdout;
    assert!(script.contains("complete -F _tickctl"), "{script}");
    // Loaded into bash, the script completes a subcommand and a flag of one.
    let dir = tempfile::tempdir().unwrap();
    let script_path = dir.path().join("tickctl.bash");
    std::fs::write(&script_path, &script).unwrap();
    let complete = |words: &str| {
        let output = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source {path}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
                 _tickctl tickctl \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; \
                 printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                path = script_path.display()
            ))
            .output()
            .expect("run bash");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    assert_eq!(complete("tickctl add-b"), "add-batch\n");
    let flags = complete("tickctl consume --no-");
    assert!(
        flags.contains("--no-ack") && flags.contains("--no-reconnect"),
        "{flags}"
    );
}

#[test]
fn zsh_and_fish_completions_and_the_manual_page() {
    let zsh = run_offline(&["completion", "zsh"]).ok().stdout;
    assert!(zsh.starts_with("#compdef tickctl"), "{zsh}");
    let fish = run_offline(&["completion", "fish"]).ok().stdout;
    assert!(fish.contains("complete -c tickctl"), "{fish}");
    assert!(fish.contains("add-batch"), "{fish}");
    let unknown = run_offline(&["completion", "tcsh"]);
    assert_eq!(unknown.code, 2, "{}", unknown.stderr);

    let page = run_offline(&["man"]).ok().stdout;
    assert!(
        page.starts_with(".ie") || page.contains(".TH tickctl 1"),
        "{page}"
    );
    assert!(page.contains("add\\-batch"), "{page}");
    let dir = tempfile::tempdir().unwrap();
    run_offline(&["man", "--dir", dir.path().to_str().unwrap()]).ok();
    for page in ["tickctl.1", "tickctl-add-batch.1", "tickctl-consume.1"] {
        let text = std::fs::read_to_string(dir.path().join(page))
            .unwrap_or_else(|error| panic!("{page}: {error}"));
        assert!(text.contains(".TH"), "{page}: {text}");
    }
    let consume = std::fs::read_to_string(dir.path().join("tickctl-consume.1")).unwrap();
    assert!(consume.contains("no\\-ack"), "{consume}");
}

#[test]
fn help_keeps_connection_flags_under_their_own_heading() {
    let help = run_offline(&["get", "--help"]).ok().stdout;
    let position = |needle: &str| {
        help.find(needle)
            .unwrap_or_else(|| panic!("{needle} missing from:\n{help}"))
    };
    let connection = position("\nConnection options:\n");
    let global = position("\nGlobal options:\n");
    // The command's own flags first, then the global ones, each under its heading.
    assert!(position("--key <KEY>") < global.min(connection), "{help}");
    for flag in ["--endpoint", "--token ", "--tls-ca", "--timeout"] {
        assert!(position(flag) > connection, "{flag} in:\n{help}");
    }
    for flag in ["--namespace", "--output"] {
        let at = position(flag);
        assert!(
            at > global && (at < connection || global > connection),
            "{help}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_for_an_id_and_negative_durations_are_clear_usage_errors() {
    let server = TestServer::start().await;
    let endpoint = endpoint(&server);
    for command in [
        &["get", "order-7"][..],
        &["cancel", "order-7"],
        &["touch", "order-7"],
        &["reschedule", "order-7", "--delay", "1s"],
        &["keepalive", "order-7"],
    ] {
        let ran = run(&endpoint, command).await;
        assert_eq!(ran.code, 2, "{command:?}: {}", ran.stderr);
        let line = first_line(&ran.stderr);
        assert!(
            line.contains("\"order-7\" is not a timer id")
                && line.contains("16 hexadecimal digits")
                && line.contains("use --key order-7"),
            "{command:?}: {}",
            ran.stderr
        );
    }

    for command in [
        &["add", "--delay", "-5s"][..],
        &["add", "--ttl", "-1m"],
        &["add", "--delay", "1h", "--repeat", "-1h"],
        &["--timeout", "-1s", "add", "--delay", "1s"],
        &["reschedule", "--key", "k", "--delay", "-5s"],
        &["consume", "--ack-timeout", "-5s"],
    ] {
        let ran = run(&endpoint, command).await;
        assert_eq!(ran.code, 2, "{command:?}: {}", ran.stderr);
        let line = first_line(&ran.stderr);
        assert!(
            line.contains("cannot be negative") && !ran.stderr.contains("unexpected argument"),
            "{command:?}: {}",
            ran.stderr
        );
    }
    // A flag where a duration goes is named as one.
    let ran = run(&endpoint, &["add", "--delay", "--key"]).await;
    assert_eq!(ran.code, 2);
    assert!(
        ran.stderr.contains("found the flag \"--key\""),
        "{}",
        ran.stderr
    );
    // None of it registered anything.
    let listed = json(&endpoint, &["pending", "-o", "json"]).await;
    assert_eq!(listed, serde_json::json!({}));
    server.stop().await;
}
