//! The image `deploy/build-image` makes, run as the sidecar manifest runs it: built offline
//! (a static binary on `scratch`), started by podman with exactly the sidecar container's
//! args, env, user, mounts and read-only root filesystem. The kubelet's view: health
//! SERVING on the Pod IP's probe port (`--health-listen`), the API not reachable there. The
//! app's view: a timer registered, delivered and acknowledged over the Unix socket in the
//! shared volume. The end: SIGTERM drains and the container exits 0, having logged JSON.
//!
//! Needs podman (Debian's 4.3 with runc works offline) and the deploy venv (for the sidecar
//! manifest, so `TICKD_SKIP_POLYGLOT=1` skips this too). Run as root with podman missing, the
//! test installs `podman` and `runc` with apt-get; where podman is missing and cannot be
//! installed, or cannot run a container, the test says why and skips, unless
//! `TICKD_REQUIRE_IMAGE=1`, which turns that into a failure. The image is built once per run
//! (a full static release build the first time; cargo reuses it afterwards).
//!
//! Environment:
//! - `TICKD_SKIP_IMAGE=1`: skip.
//! - `TICKD_REQUIRE_IMAGE=1`: fail instead of skipping when podman cannot run.
//! - `TICKD_OCI_RUNTIME`: the OCI runtime podman uses (default `runc`: on this host's
//!   cgroups v1, with explicit `nofile`/`nproc` ulimits, as below).

mod common;
#[path = "deploy/support.rs"]
mod support;

use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tickd::proto::timers_client::TimersClient;
use tonic_health::pb::health_check_response::ServingStatus;

use common::tooling::{install_lock, install_packages, must, repo, run, skip_polyglot, target_dir};
use common::{ack, check_health, next_expiration, register, spec, subscribe, timer_id, within};
use common::{pending_count, unix_channel};
use support::Sidecar;

const TAG: &str = "localhost/tickd:test";
/// The ulimits this host's cgroups v1 needs spelled out ("error setting rlimit type 7").
const ULIMITS: [&str; 4] = [
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1000:1000",
];

fn runtime_name() -> String {
    std::env::var("TICKD_OCI_RUNTIME").unwrap_or_else(|_| "runc".to_owned())
}

/// `podman --runtime RUNTIME ARGS...`.
fn podman(args: &[&str]) -> Command {
    let mut command = Command::new("podman");
    command.args(["--runtime", &runtime_name()]).args(args);
    command
}

/// Why podman cannot run here, if it cannot (after installing it when root and missing).
fn podman_unusable() -> Option<String> {
    let works = |program: &str| {
        let mut version = Command::new(program);
        version.arg("--version");
        run(version).is_ok()
    };
    if !works("podman") || !works(&runtime_name()) {
        let mut id = Command::new("id");
        id.arg("-u");
        let root =
            run(id).is_ok_and(|output| String::from_utf8_lossy(&output.stdout).trim() == "0");
        if !root {
            return Some(format!(
                "podman or {} is not installed (as root: apt-get install podman runc)",
                runtime_name()
            ));
        }
        if let Err(failure) = install_packages("podman", "the image test") {
            return Some(format!("podman could not be installed: {failure}"));
        }
    }
    run(podman(&["info"]))
        .err()
        .map(|failure| format!("podman cannot run here: {failure}"))
}

fn skip_image() -> bool {
    if std::env::var_os("TICKD_SKIP_IMAGE").is_some_and(|value| value == "1") {
        eprintln!("image: skipped: TICKD_SKIP_IMAGE=1");
        return true;
    }
    if skip_polyglot("image") {
        return true;
    }
    let Some(reason) = podman_unusable() else {
        return false;
    };
    if std::env::var_os("TICKD_REQUIRE_IMAGE").is_some_and(|value| value == "1") {
        panic!("image: {reason} (and TICKD_REQUIRE_IMAGE=1)");
    }
    eprintln!("image: skipped: {reason}");
    true
}

/// `deploy/build-image TAG` with podman, into this run's target dir: once per test run.
fn build_image() {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(build_image_now);
}

fn build_image_now() {
    let _lock = install_lock("image-build").unwrap_or_else(|failure| panic!("{failure}"));
    let mut build = Command::new(repo().join("deploy/build-image"));
    build
        .arg(TAG)
        .arg(format!("--runtime={}", runtime_name()))
        .env("TICKD_CONTAINER_ENGINE", "podman")
        .env("CARGO_TARGET_DIR", target_dir())
        .current_dir(repo());
    let started = Instant::now();
    must(build);
    println!("built {TAG} in {:?}", started.elapsed());
}

/// A container, removed (with its anonymous volumes) when dropped.
struct Container(String);

impl Container {
    fn inspect(&self, format: &str) -> String {
        let output = must(podman(&["inspect", "--format", format, &self.0]));
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    fn logs(&self) -> String {
        run(podman(&["logs", &self.0]))
            .map(|output| {
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                )
            })
            .unwrap_or_else(|failure| failure)
    }

    fn running(&self) -> bool {
        self.inspect("{{.State.Running}}") == "true"
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = run(podman(&["rm", "--force", "--volumes", &self.0]));
    }
}

/// The sidecar container's emptyDir mounts, each backed by a fresh host directory the
/// container's user can write: (host dir, mount path).
fn volumes(sidecar: &Sidecar, root: &Path) -> Vec<(PathBuf, PathBuf)> {
    sidecar
        .mounts()
        .into_iter()
        .filter(|(_, source)| source == "emptyDir")
        .enumerate()
        .map(|(index, (mount, _))| {
            let host = root.join(format!("volume-{index}"));
            std::fs::create_dir(&host).expect("volume dir");
            // The container runs as the manifest's uid (65532): let it write here.
            std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o777))
                .expect("chmod volume dir");
            (host, mount)
        })
        .collect()
}

/// `podman run` of the image as the kubelet would run the sidecar container.
fn start(sidecar: &Sidecar, volumes: &[(PathBuf, PathBuf)]) -> Container {
    let name = format!("tickd-image-test-{}", std::process::id());
    let _ = run(podman(&["rm", "--force", &name]));
    let mut command = podman(&["run", "--detach", "--name", &name]);
    command.args(ULIMITS);
    let user = sidecar.one(&["security", "runAsUser"]);
    let group = sidecar.one(&["security", "runAsGroup"]);
    if !user.is_empty() {
        let group = if group.is_empty() { &user } else { &group };
        command.arg(format!("--user={user}:{group}"));
    }
    if sidecar.one(&["security", "readOnlyRootFilesystem"]) == "true" {
        command.arg("--read-only");
    }
    // The kubelet puts the container's memory limit on its cgroup; tickd's default memory
    // budget follows it (checked once it serves).
    if let Some(limit) = sidecar.memory_limit() {
        command.arg(format!("--memory={limit}"));
    }
    if sidecar.one(&["security", "allowPrivilegeEscalation"]) == "false" {
        command.arg("--security-opt=no-new-privileges");
    }
    for capability in &sidecar
        .one(&["security", "capabilitiesDrop"])
        .split('\t')
        .collect::<Vec<_>>()
    {
        if !capability.is_empty() {
            command.arg(format!("--cap-drop={capability}"));
        }
    }
    let working_dir = sidecar.one(&["working_dir"]);
    if !working_dir.is_empty() {
        command.arg(format!("--workdir={working_dir}"));
    }
    for (variable, value) in sidecar.env() {
        command.arg(format!("--env={variable}={value}"));
    }
    for (host, mount) in volumes {
        command.arg(format!("--volume={}:{}", host.display(), mount.display()));
    }
    command.arg(TAG).args(sidecar.args());
    println!("{}", common::tooling::describe(&command));
    must(command);
    Container(name)
}

/// Where `path` (inside the container, under one of the volumes) is on the host.
fn on_host(path: &Path, volumes: &[(PathBuf, PathBuf)]) -> PathBuf {
    volumes
        .iter()
        .find_map(|(host, mount)| path.strip_prefix(mount).ok().map(|rest| host.join(rest)))
        .unwrap_or_else(|| panic!("{} is on no volume", path.display()))
}

async fn channel(addr: SocketAddr) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(5))
        .connect()
        .await
}

#[test]
fn the_image_runs_as_the_sidecar_serves_a_round_trip_and_drains_on_sigterm() {
    if skip_image() {
        return;
    }
    let sidecar = Sidecar::load();
    let config = sidecar.config();
    build_image();

    let root = tempfile::tempdir().expect("temp dir");
    let volumes = volumes(&sidecar, root.path());
    let container = start(&sidecar, &volumes);
    let ip: IpAddr = container
        .inspect("{{.NetworkSettings.IPAddress}}")
        .parse()
        .unwrap_or_else(|_| panic!("no container IP\n{}", container.logs()));
    let probes = SocketAddr::new(ip, sidecar.probe_port());
    let socket = config
        .unix_socket
        .as_deref()
        .map(|path| on_host(path, &volumes))
        .expect("the sidecar serves a Unix socket");

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        // The kubelet: probes on the Pod IP until SERVING.
        let started = Instant::now();
        let health = loop {
            assert!(
                container.running(),
                "the container exited at start\n{}",
                container.logs()
            );
            if let Ok(health) = channel(probes).await {
                if check_health(health.clone(), "").await.ok() == Some(ServingStatus::Serving) {
                    break health;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no SERVING on {probes} within 30s\n{}",
                container.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        println!("SERVING on {probes} after {:?}", started.elapsed());
        if let Some(limit) = sidecar.memory_limit() {
            let expected = format!(
                "{} (50% of {} the container's memory limit",
                tickd::budget::ByteCount(limit / 2),
                tickd::budget::ByteCount(limit)
            );
            assert!(
                container.logs().contains(&expected),
                "the default memory budget follows the container's limit: {expected}\n{}",
                container.logs()
            );
        }
        let ready = check_health(health, "tickd.v1.Timers").await;
        assert_eq!(ready.ok(), Some(ServingStatus::Serving), "readiness");
        // The API is bound to loopback inside the Pod: nothing answers on the Pod IP.
        let outside = SocketAddr::new(ip, config.listen.port());
        assert!(
            tokio::net::TcpStream::connect(outside).await.is_err(),
            "the API port {outside} accepts connections from outside the Pod"
        );

        // The app: a round trip over the Unix socket in the shared volume.
        let unix = unix_channel(socket.clone()).await.expect("the Unix socket");
        let mut client = TimersClient::new(unix);
        let mut stream = within(subscribe(&mut client, "image", 30_000, 16)).await;
        let timer = within(register(&mut client, spec("image", 50, b"from the host"))).await;
        let expiration = within(next_expiration(&mut stream)).await;
        assert_eq!(timer_id(&expiration), timer.id);
        assert_eq!(
            expiration.timer.as_ref().map(|t| t.payload.as_ref()),
            Some(&b"from the host"[..])
        );
        let acked = within(ack(&mut client, "image", vec![expiration.delivery_id])).await;
        assert_eq!(acked.acknowledged, 1, "{acked:?}");
        assert_eq!(within(pending_count(&mut client, "image")).await, 0);
    });

    // SIGTERM, as the kubelet sends once the app has exited: drained, exit 0, before the
    // grace period would end in SIGKILL.
    let terminated = Instant::now();
    must(podman(&["kill", "--signal", "TERM", &container.0]));
    let bound = sidecar.grace();
    while container.running() {
        assert!(
            terminated.elapsed() < bound,
            "still running {bound:?} after SIGTERM\n{}",
            container.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let code = container.inspect("{{.State.ExitCode}}");
    println!("exited {code} {:?} after SIGTERM", terminated.elapsed());
    let logs = container.logs();
    assert_eq!(code, "0", "exit code\n{logs}");
    assert!(!socket.exists(), "tickd left its socket behind");
    let data_dir = on_host(&config.data_dir, &volumes);
    assert!(
        std::fs::read_dir(&data_dir).is_ok_and(|mut entries| entries.next().is_some()),
        "nothing written to the data dir {}\n{logs}",
        data_dir.display()
    );
    if sidecar.flag("log-format").as_deref() == Some("json") {
        assert!(
            logs.lines().count() > 0 && logs.lines().all(|line| line.starts_with('{')),
            "expected JSON log lines\n{logs}"
        );
    }
}

/// The static glibc binary resolves host names without libnss_*.so: a name the container's
/// /etc/hosts maps (`--add-host`, as Kubernetes hostAliases do) reaches its address (the
/// connection is refused there), and an unknown name fails as a lookup.
#[test]
fn the_static_binary_resolves_the_store_host_through_etc_hosts() {
    if skip_image() {
        return;
    }
    build_image();
    let attempt = |host: &str| -> String {
        let mut command = podman(&["run", "--rm", "--timeout=60", "--read-only"]);
        command
            .args(ULIMITS)
            .args(["--add-host=tickd-db.test:127.0.0.1", "--env=NO_COLOR=1"])
            .arg(TAG)
            .arg(format!("--store=postgres://tickd@{host}:1/tickd"))
            .arg("--log-format=text");
        let output = command.output().expect("podman run");
        assert!(!output.status.success(), "tickd started without its store");
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    };
    let mapped = attempt("tickd-db.test");
    assert!(
        mapped.contains("Connection refused") && !mapped.contains("lookup"),
        "tickd-db.test (in /etc/hosts) did not resolve to 127.0.0.1:\n{mapped}"
    );
    let unknown = attempt("tickd-db.invalid");
    assert!(
        unknown.contains("lookup"),
        "an unknown host did not fail as a lookup:\n{unknown}"
    );
}
