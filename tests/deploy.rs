//! `deploy/` checked: every manifest validates offline against the Kubernetes 1.33 schemas,
//! the sidecar variant has the properties a native sidecar needs, and the real `tickd`
//! binary started with exactly the sidecar container's args and env serves gRPC health and
//! drains cleanly on SIGTERM. No Docker engine or cluster is needed.
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

mod common;

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::{CommandFactory, Parser};
use tickd::config::Config;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use common::tooling::{describe, must, python_venv, repo, run, skip_polyglot};
use common::unix_channel;

const KUBERNETES_VERSION: &str = "1.33.0";
const SIDECAR: &str = "deploy/overlays/sidecar";
/// The overlays README promises; any other directory under deploy/overlays is checked too.
const OVERLAYS: [&str; 3] = ["replicated", "sidecar", "standalone"];

/// `target/deploy-venv` with exactly the pinned requirements; returns its `bin/` directory.
fn ensure_venv() -> PathBuf {
    let python = python_venv("deploy-venv", &repo().join("tests/deploy/requirements.txt"))
        .unwrap_or_else(|failure| panic!("{failure}"));
    python.parent().expect("bin/python").to_path_buf()
}

/// `tests/deploy/manifests.py` under the venv's Python.
fn manifests_py(bin: &Path) -> Command {
    let mut command = Command::new(bin.join("python"));
    command
        .arg(repo().join("tests/deploy/manifests.py"))
        .current_dir(repo())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("PYTHONPATH")
        .env_remove("PYTHONHOME");
    command
}

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
    let rendered = out.join(format!("{name}.yaml"));
    let mut render = manifests_py(bin);
    render.arg("render").arg(overlay).arg(&rendered);
    must(render);
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

/// What manifests.py says about the sidecar overlay's tickd container.
struct Sidecar {
    facts: Vec<Vec<String>>,
}

impl Sidecar {
    fn load() -> Self {
        let bin = ensure_venv();
        let out = tempfile::tempdir().expect("temp dir");
        let rendered = render_one(&bin, &repo().join(SIDECAR), out.path(), None);
        let mut facts = manifests_py(&bin);
        facts.arg("facts").arg(&rendered);
        let output = must(facts);
        let facts = String::from_utf8(output.stdout)
            .expect("utf-8 facts")
            .lines()
            .map(|line| line.split('\t').map(str::to_owned).collect())
            .collect();
        Self { facts }
    }

    /// Every fact whose fields start with `prefix`, without the prefix.
    fn all(&self, prefix: &[&str]) -> Vec<&[String]> {
        self.facts
            .iter()
            .filter(|fields| {
                fields.len() >= prefix.len() && fields.iter().zip(prefix).all(|(a, b)| a == b)
            })
            .map(|fields| &fields[prefix.len()..])
            .collect()
    }

    fn one(&self, prefix: &[&str]) -> String {
        match self.all(prefix).as_slice() {
            [rest] => rest.join("\t"),
            other => panic!("expected one {prefix:?} fact, found {other:?}"),
        }
    }

    fn args(&self) -> Vec<String> {
        self.all(&["arg"])
            .into_iter()
            .map(|rest| rest.join("\t"))
            .collect()
    }

    fn env(&self) -> BTreeMap<String, String> {
        self.all(&["env"])
            .into_iter()
            .map(|rest| (rest[0].clone(), rest[1..].join("\t")))
            .collect()
    }

    /// Mounts as (mount path, volume source).
    fn mounts(&self) -> Vec<(PathBuf, String)> {
        self.all(&["mount"])
            .into_iter()
            .map(|rest| (PathBuf::from(&rest[0]), rest[1].clone()))
            .collect()
    }

    /// The value tickd would use for flag `--long`: from the args, else from its
    /// environment variable, else None (the default).
    fn flag(&self, long: &str) -> Option<String> {
        let prefix = format!("--{long}=");
        if let Some(value) = self.args().iter().find_map(|a| a.strip_prefix(&prefix)) {
            return Some(value.to_owned());
        }
        let env = format!("TICKD_{}", long.replace('-', "_").to_uppercase());
        self.env().get(&env).cloned()
    }

    /// The configuration tickd builds from these args and env, parsed by tickd's own
    /// `Config` (so an unknown or malformed flag fails here). Env applies only where no
    /// arg gives the flag, as in clap.
    fn config(&self) -> Config {
        let args = self.args();
        let env = self.env();
        let mut argv = vec!["tickd".to_owned()];
        for arg in Config::command().get_arguments() {
            let (Some(long), Some(name)) = (arg.get_long(), arg.get_env()) else {
                continue;
            };
            let given = args
                .iter()
                .any(|a| a == &format!("--{long}") || a.starts_with(&format!("--{long}=")));
            if let Some(value) = env.get(name.to_str().unwrap_or_default()) {
                if !given {
                    argv.push(format!("--{long}={value}"));
                }
            }
        }
        argv.extend(args);
        Config::try_parse_from(&argv).unwrap_or_else(|error| {
            panic!("the sidecar's args and env do not parse as tickd flags ({argv:?}):\n{error}")
        })
    }

    fn grace(&self) -> Duration {
        Duration::from_secs(self.one(&["grace"]).parse().expect("grace seconds"))
    }
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

    // Probes: native gRPC, numeric port = the port in --listen, on every interface
    // (the kubelet probes the Pod IP, not localhost).
    let port = config.listen.port();
    assert!(
        config.listen.ip().is_unspecified(),
        "--listen {} is not reachable by the kubelet's probes on the Pod IP",
        config.listen
    );
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
            "{kind}Probe port {probe_port} must be the number in --listen ({port})"
        );
        let service = sidecar.one(&["probe", kind, "service"]);
        assert!(
            ["", "tickd.v1.Timers"].contains(&service.as_str()),
            "{kind}Probe asks for health service {service:?}, which tickd does not report"
        );
    }
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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("free port")
        .port()
}

/// The sidecar's args and env with exactly these substitutions: the port of each
/// `*listen` address becomes a free one, and each path under one of the container's
/// mounts (or its workingDir) moves under `root`.
struct Substituted {
    args: Vec<String>,
    env: BTreeMap<String, String>,
    working_dir: PathBuf,
    listen: SocketAddr,
}

fn substitute(sidecar: &Sidecar, root: &Path) -> Substituted {
    let mut prefixes: Vec<PathBuf> = sidecar.mounts().into_iter().map(|(m, _)| m).collect();
    let working_dir = sidecar.one(&["working_dir"]);
    if !working_dir.is_empty() {
        prefixes.push(PathBuf::from(&working_dir));
    }
    let relocate = |path: &Path| root.join(path.strip_prefix("/").unwrap_or(path));
    for prefix in &prefixes {
        fs::create_dir_all(relocate(prefix)).expect("create mount dir");
    }
    let value = |name: &str, value: &str| -> String {
        if name.ends_with("listen") {
            let addr: SocketAddr = value.parse().expect("listen address");
            return SocketAddr::new(addr.ip(), free_port()).to_string();
        }
        let path = Path::new(value);
        if prefixes.iter().any(|prefix| path.starts_with(prefix)) {
            return relocate(path).to_string_lossy().into_owned();
        }
        value.to_owned()
    };
    let args: Vec<String> = sidecar
        .args()
        .iter()
        .map(|arg| {
            let (flag, v) = arg.split_once('=').expect("--flag=value");
            format!("{flag}={}", value(flag, v))
        })
        .collect();
    let mut env: BTreeMap<String, String> = sidecar
        .env()
        .iter()
        .map(|(name, v)| (name.clone(), value(&name.to_lowercase(), v)))
        .collect();
    // A listener the manifest leaves at its default (fixed) port must not collide with
    // whatever else runs here: give it a free port too.
    for arg in Config::command().get_arguments() {
        let (Some(long), Some(name)) = (arg.get_long(), arg.get_env()) else {
            continue;
        };
        let name = name.to_string_lossy().into_owned();
        if long.ends_with("listen") && sidecar.flag(long).is_none() {
            eprintln!(
                "deploy: the sidecar leaves --{long} at its default; testing with a free port"
            );
            env.insert(name, format!("127.0.0.1:{}", free_port()));
        }
    }
    let listen_arg = args
        .iter()
        .find_map(|a| a.strip_prefix("--listen="))
        .map(str::to_owned)
        .or_else(|| env.get("TICKD_LISTEN").cloned())
        .expect("the sidecar sets --listen");
    let listen: SocketAddr = listen_arg.parse().expect("listen address");
    let working_dir = if working_dir.is_empty() {
        root.to_path_buf()
    } else {
        relocate(Path::new(&working_dir))
    };
    Substituted {
        args,
        env,
        working_dir,
        listen,
    }
}

/// Kills the child if the test fails before it exits.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

async fn health(channel: tonic::transport::Channel, service: &str) -> Result<i32, String> {
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .map(|answer| answer.into_inner().status)
        .map_err(|status| status.to_string())
}

async fn tcp_channel(addr: SocketAddr) -> Result<tonic::transport::Channel, String> {
    tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{}", addr.port()))
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(1))
        .connect()
        .await
        .map_err(|e| e.to_string())
}

fn logs(root: &Path) -> String {
    format!(
        "--- tickd stdout ---\n{}\n--- tickd stderr ---\n{}",
        fs::read_to_string(root.join("tickd.stdout")).unwrap_or_default(),
        fs::read_to_string(root.join("tickd.stderr")).unwrap_or_default()
    )
}

#[test]
fn tickd_started_with_the_sidecar_args_and_env_serves_health_and_drains_on_sigterm() {
    if skip_polyglot("deploy") {
        return;
    }
    let sidecar = Sidecar::load();
    let config = sidecar.config();
    let root = tempfile::tempdir().expect("temp dir");
    let root = root.path();
    let run = substitute(&sidecar, root);
    let socket = config.unix_socket.as_ref().map(|path| {
        let prefixes: Vec<PathBuf> = sidecar.mounts().into_iter().map(|(m, _)| m).collect();
        assert!(prefixes.iter().any(|m| path.starts_with(m)));
        root.join(path.strip_prefix("/").unwrap_or(path))
    });

    // Exactly the container's args and env (the kubelet adds only HOSTNAME, service
    // links and the like, which tickd does not read).
    let mut command = Command::new(env!("CARGO_BIN_EXE_tickd"));
    command
        .args(&run.args)
        .env_clear()
        .envs(&run.env)
        .current_dir(&run.working_dir)
        .stdin(Stdio::null())
        .stdout(File::create(root.join("tickd.stdout")).expect("stdout file"))
        .stderr(File::create(root.join("tickd.stderr")).expect("stderr file"));
    println!("starting {}", describe(&command));
    let mut child = Running(command.spawn().expect("spawn tickd"));

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let serving = ServingStatus::Serving as i32;
    let started = Instant::now();
    let channel = runtime.block_on(async {
        loop {
            if let Some(status) = child.0.try_wait().expect("try_wait") {
                panic!("tickd exited at start ({status})\n{}", logs(root));
            }
            if let Ok(channel) = tcp_channel(run.listen).await {
                if health(channel.clone(), "").await == Ok(serving) {
                    break channel;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "tickd did not answer SERVING on {} within 10s\n{}",
                run.listen,
                logs(root)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    println!("SERVING after {:?}", started.elapsed());
    runtime.block_on(async {
        // What the startup/readiness probes ask for, over TCP and the app's Unix socket.
        let status = health(channel.clone(), "tickd.v1.Timers").await;
        assert_eq!(
            status,
            Ok(serving),
            "tickd.v1.Timers health\n{}",
            logs(root)
        );
        if let Some(socket) = &socket {
            let unix = unix_channel(socket.clone()).await.expect("unix socket");
            let status = health(unix, "tickd.v1.Timers").await;
            assert_eq!(status, Ok(serving), "health over {}", socket.display());
        }
    });

    // SIGTERM, as the kubelet sends once the app has exited; the open connection must not
    // hold tickd past its drain bound.
    let terminated = Instant::now();
    let mut kill = Command::new("kill");
    kill.args(["-TERM", &child.0.id().to_string()]);
    must(kill);
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            terminated.elapsed() < config.drain_timeout,
            "tickd still running {:?} after SIGTERM (drain timeout {:?})\n{}",
            terminated.elapsed(),
            config.drain_timeout,
            logs(root)
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(channel);
    println!("exited {status} {:?} after SIGTERM", terminated.elapsed());
    assert!(status.success(), "tickd exited {status}\n{}", logs(root));
    if let Some(socket) = &socket {
        assert!(!socket.exists(), "tickd left its socket behind");
    }
    // The data dir was written on the (relocated) emptyDir.
    if let Some(dir) = run.args.iter().find_map(|a| a.strip_prefix("--data-dir=")) {
        assert!(
            Path::new(dir).is_dir(),
            "no data dir at {dir}\n{}",
            logs(root)
        );
    }
    // The ConfigMap's TICKD_LOG_FORMAT reached the binary.
    if run.env.get("TICKD_LOG_FORMAT").map(String::as_str) == Some("json") {
        let stdout = fs::read_to_string(root.join("tickd.stdout")).unwrap_or_default();
        assert!(
            stdout.lines().count() > 0 && stdout.lines().all(|line| line.starts_with('{')),
            "expected JSON log lines\n{}",
            logs(root)
        );
    }
}
