//! `deploy/` checked: every manifest validates offline against the Kubernetes 1.33 schemas,
//! the sidecar variant has the properties a native sidecar needs (its API on loopback and
//! the Unix socket, its probes on `--health-listen`), the real `tickd` binary started with
//! exactly the sidecar container's args and env serves gRPC health and drains cleanly on
//! SIGTERM (`deploy/binary.rs`), the NetworkPolicies admit only tickd's ports and the
//! example auth Secret is a token file tickd enforces (`deploy/security.rs`). No container
//! engine or cluster is needed: `tests/image.rs` runs the built image.
//!
//! Needs `python3` (3.11+) and PyPI the first time: the test creates `target/deploy-venv`
//! from `tests/deploy/requirements.txt` (kubernetes-validate, which bundles the schemas,
//! and PyYAML) and rebuilds it when that file or the Python version changes. Overlays are
//! rendered by `tests/deploy/manifests.py` (which knows only the kustomize features
//! `deploy/` uses) and, when `kustomize` or `kubectl` is installed, also by the real
//! kustomize, and both renderings must agree.
//!
//! Environment:
//! - `TICKD_PYTHON`: the interpreter to build the venv from (default `python3`).
//! - `TICKD_KUSTOMIZE`: a kustomize binary to cross-check with, or `off` (default: the
//!   first of `kustomize`, `kubectl kustomize` that runs).
//! - `TICKD_SKIP_POLYGLOT=1`: skip the tests that need the venv (e.g. offline with no venv
//!   yet), as the other tests needing Python do; the check of the replicated overlay's
//!   flags needs no Python and always runs.

#[path = "deploy/binary.rs"]
mod binary;
mod common;
#[path = "deploy/security.rs"]
mod security;
#[path = "deploy/support.rs"]
mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::Parser;

use common::tooling::{must, repo, run, skip_polyglot};
use support::{ensure_venv, manifests_py, render, Sidecar};

const KUBERNETES_VERSION: &str = "1.33.0";
/// The overlays README promises; any other directory under deploy/overlays is checked too.
const OVERLAYS: [&str; 3] = ["replicated", "sidecar", "standalone"];

/// The real kustomize to cross-check with, if one is installed.
fn kustomize() -> Option<Command> {
    let works = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    match std::env::var("TICKD_KUSTOMIZE") {
        Ok(choice) if choice == "off" => None,
        Ok(program) => {
            let mut command = Command::new(program);
            command.arg("build");
            Some(command)
        }
        Err(_) if works("kustomize", &["version"]) => {
            let mut command = Command::new("kustomize");
            command.arg("build");
            Some(command)
        }
        Err(_) if works("kubectl", &["version", "--client"]) => {
            let mut command = Command::new("kubectl");
            command.arg("kustomize");
            Some(command)
        }
        Err(_) => None,
    }
}

/// Renders every overlay into `out` (`<overlay>.yaml`) and returns the files.
fn render_overlays(bin: &Path, out: &Path) -> Vec<PathBuf> {
    let mut overlays: Vec<PathBuf> = fs::read_dir(repo().join("deploy/overlays"))
        .expect("deploy/overlays")
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| path.join("kustomization.yaml").is_file())
        .collect();
    overlays.sort();
    for name in OVERLAYS {
        assert!(
            overlays.iter().any(|path| path.ends_with(name)),
            "deploy/overlays/{name} is missing"
        );
    }
    let mut checker = kustomize();
    if checker.is_none() {
        eprintln!("deploy: no kustomize or kubectl found; rendering with manifests.py alone");
    }
    overlays
        .iter()
        .map(|overlay| render_one(bin, overlay, out, checker.as_mut()))
        .collect()
}

fn render_one(bin: &Path, overlay: &Path, out: &Path, checker: Option<&mut Command>) -> PathBuf {
    let name = overlay.file_name().unwrap().to_string_lossy().into_owned();
    let rendered = render(bin, overlay, out);
    if let Some(checker) = checker {
        let mut real = Command::new(checker.get_program());
        real.args(checker.get_args()).arg(overlay);
        let output = must(real);
        let by_kustomize = out.join(format!("{name}.kustomize.yaml"));
        fs::write(&by_kustomize, &output.stdout).expect("write kustomize output");
        let mut same = manifests_py(bin);
        same.arg("same").arg(&rendered).arg(&by_kustomize);
        if let Err(failure) = run(same) {
            panic!("manifests.py and kustomize render {name} differently:\n{failure}");
        }
    }
    rendered
}

/// Every YAML file under deploy/ that is a Kubernetes object (not a kustomization).
fn manifest_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.ends_with("deploy/monitoring") {
            // Prometheus Operator objects (no schema to validate them with here) and
            // Prometheus rule files: tests/monitoring.rs checks them.
            continue;
        }
        if path.is_dir() {
            manifest_files(&path, found);
        } else if path
            .extension()
            .is_some_and(|ext| ext == "yaml" || ext == "yml")
            && path.file_stem().is_some_and(|stem| stem != "kustomization")
        {
            found.push(path);
        }
    }
}

#[test]
fn every_manifest_validates_against_kubernetes_1_33() {
    if skip_polyglot("deploy") {
        return;
    }
    let bin = ensure_venv();
    let out = tempfile::tempdir().expect("temp dir");
    let mut files = Vec::new();
    manifest_files(&repo().join("deploy"), &mut files);
    files.extend(render_overlays(&bin, out.path()));

    let mut validate = Command::new(bin.join("kubernetes-validate"));
    validate
        .args([
            "--strict",
            "--quiet",
            "--kubernetes-version",
            KUBERNETES_VERSION,
        ])
        .args(&files);
    let output = must(validate);
    // --quiet prints only warnings and failures; a warning (e.g. a kind with no schema,
    // which would go unchecked) fails the test too.
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        said.trim().is_empty(),
        "kubernetes-validate warned:\n{said}"
    );
    println!(
        "validated {} files against {KUBERNETES_VERSION}",
        files.len()
    );
}

/// The replicated overlay's container arguments, with the two settings it takes from its
/// environment, are flags tickd accepts, selecting the shared store.
#[test]
fn replicated_overlay_args_are_tickd_flags() {
    let manifest = fs::read_to_string(repo().join("deploy/overlays/replicated/deployment.yaml"))
        .expect("deployment.yaml");
    let args: Vec<&str> = manifest
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- --"))
        .collect();
    assert!(
        args.iter().any(|arg| arg.starts_with("lease-ttl=")),
        "{args:?}"
    );
    for variable in ["TICKD_STORE", "TICKD_REPLICA_ID"] {
        assert!(
            manifest.contains(&format!("name: {variable}")),
            "{variable} is not set"
        );
    }
    let command_line = std::iter::once("tickd".to_owned())
        .chain(args.iter().map(|arg| format!("--{arg}")))
        .chain([
            "--store=postgres://db/tickd".to_owned(),
            "--replica-id=tickd-0".to_owned(),
        ]);
    let config = tickd::config::Config::try_parse_from(command_line).expect("tickd flags");
    assert_eq!(config.store.as_deref(), Some("postgres://db/tickd"));
}

#[test]
fn sidecar_is_a_native_sidecar_with_matching_probes_and_a_drain_inside_the_grace_period() {
    if skip_polyglot("deploy") {
        return;
    }
    let sidecar = Sidecar::load();
    let config = sidecar.config();

    // Native sidecar: an init container that keeps running.
    assert_eq!(sidecar.one(&["in_init_containers"]), "true");
    assert_eq!(sidecar.one(&["in_containers"]), "false");
    assert_eq!(sidecar.one(&["restart_policy"]), "Always");
    // The image's exec-form ENTRYPOINT is tickd; a `command` would replace it.
    assert!(
        sidecar.all(&["command"]).is_empty(),
        "tickd must not set command"
    );
    for arg in sidecar.args() {
        assert!(
            arg.starts_with("--") && arg.contains('='),
            "write args as --flag=value (the binary test substitutes values): {arg}"
        );
    }

    // The API is for the app in the same Pod: on loopback (or the Unix socket alone), never
    // on the Pod IP without a token to check.
    assert!(
        config.listen.ip().is_loopback() || config.auth_token_file.is_some(),
        "--listen {} serves the API beyond the Pod without --auth-token-file",
        config.listen
    );
    assert!(
        sidecar
            .all(&["port"])
            .iter()
            .all(|rest| rest[1] != config.listen.port().to_string()
                || !config.listen.ip().is_loopback()),
        "containerPort {} is declared, but --listen binds it to loopback",
        config.listen.port()
    );
    // Probes: native gRPC to a numeric port, the one in --health-listen, on every interface
    // (the kubelet probes the Pod IP, not localhost).
    let health = config
        .health_listen
        .expect("the sidecar sets --health-listen for the kubelet's probes");
    assert!(
        health.ip().is_unspecified(),
        "--health-listen {health} is not reachable by the kubelet's probes on the Pod IP"
    );
    let port = health.port();
    for kind in ["startup", "readiness", "liveness"] {
        assert_eq!(
            sidecar.one(&["probe", kind, "handler"]),
            "grpc",
            "{kind}Probe"
        );
        let probe_port = sidecar.one(&["probe", kind, "port"]);
        assert_eq!(
            probe_port.parse::<u16>().ok(),
            Some(port),
            "{kind}Probe port {probe_port} must be the number in --health-listen ({port})"
        );
        let service = sidecar.one(&["probe", kind, "service"]);
        assert!(
            ["", "tickd.v1.Timers"].contains(&service.as_str()),
            "{kind}Probe asks for health service {service:?}, which tickd does not report"
        );
    }
    assert_eq!(sidecar.probe_port(), port);
    assert!(
        sidecar
            .all(&["port"])
            .iter()
            .any(|rest| rest[1] == port.to_string()),
        "no containerPort {port}"
    );

    // Non-root, no escalation, read-only root filesystem.
    assert_eq!(sidecar.one(&["security", "runAsNonRoot"]), "true");
    let user = sidecar.one(&["security", "runAsUser"]);
    assert!(user.is_empty() || user != "0", "runAsUser is root");
    assert_eq!(
        sidecar.one(&["security", "allowPrivilegeEscalation"]),
        "false"
    );
    assert_eq!(sidecar.one(&["security", "readOnlyRootFilesystem"]), "true");

    // Termination: tickd's drain bound fits in the Pod's grace period.
    assert!(
        config.drain_timeout < sidecar.grace(),
        "--drain-timeout {:?} must be shorter than terminationGracePeriodSeconds {:?}",
        config.drain_timeout,
        sidecar.grace()
    );

    // The data dir (given, or the default ./tickd-data under workingDir) and the Unix
    // socket's directory live on emptyDirs.
    let on_empty_dir = |path: &Path| {
        sidecar
            .mounts()
            .iter()
            .any(|(mount, source)| source == "emptyDir" && path.starts_with(mount))
    };
    let data_dir = PathBuf::from(sidecar.flag("data-dir").unwrap_or("tickd-data".into()));
    let data_dir = if data_dir.is_absolute() {
        data_dir
    } else {
        let working_dir = sidecar.one(&["working_dir"]);
        assert!(
            !working_dir.is_empty(),
            "relative data dir with no workingDir"
        );
        Path::new(&working_dir).join(data_dir)
    };
    assert!(
        on_empty_dir(&data_dir),
        "data dir {} is not on an emptyDir",
        data_dir.display()
    );
    if let Some(socket) = &config.unix_socket {
        assert!(
            on_empty_dir(socket.parent().expect("socket dir")),
            "--unix-socket {} is not on an emptyDir shared with the app",
            socket.display()
        );
    }
}
