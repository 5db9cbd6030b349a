//! The real `tickd` binary started with exactly the sidecar container's args and env (ports
//! and mount paths moved to free ones): the kubelet's probes see SERVING on the health port,
//! the app reaches the API over loopback and the Unix socket, SIGTERM drains and exits 0.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::CommandFactory;
use tickd::budget::ByteCount;
use tickd::config::Config;
use tickd::proto::timers_client::TimersClient;
use tickd::proto::PendingRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::common::cgroup::MemoryCgroup;
use crate::common::tooling::{describe, must, skip_polyglot};
use crate::common::{answers_calls, unix_channel};
use crate::support::Sidecar;

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
    /// Where the kubelet's probes go (--health-listen).
    health_listen: SocketAddr,
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
    let address = |long: &str| -> SocketAddr {
        let variable = format!("TICKD_{}", long.replace('-', "_").to_uppercase());
        args.iter()
            .find_map(|a| a.strip_prefix(&format!("--{long}=")))
            .map(str::to_owned)
            .or_else(|| env.get(&variable).cloned())
            .unwrap_or_else(|| panic!("the sidecar sets --{long}"))
            .parse()
            .expect("listen address")
    };
    let listen = address("listen");
    let health_listen = address("health-listen");
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
        health_listen,
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
    // In a memory cgroup of the container's limit, as the kubelet runs it: the default
    // memory budget must follow it with no flag.
    let memory_limit = sidecar.memory_limit();
    let group = memory_limit.and_then(|limit| {
        MemoryCgroup::create("tickd-sidecar", limit)
            .map_err(|reason| println!("not in a memory cgroup ({reason})"))
            .ok()
    });
    if let Some(group) = &group {
        command = group.wrap(&command);
        command
            .env_clear()
            .envs(&run.env)
            .current_dir(&run.working_dir)
            .stdout(File::create(root.join("tickd.stdout")).expect("stdout file"))
            .stderr(File::create(root.join("tickd.stderr")).expect("stderr file"));
    }
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
            // Where the kubelet's probes go: --health-listen.
            if let Ok(channel) = tcp_channel(run.health_listen).await {
                if health(channel.clone(), "").await == Ok(serving) {
                    break channel;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "tickd did not answer SERVING on {} within 10s\n{}",
                run.health_listen,
                logs(root)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    println!("SERVING after {:?}", started.elapsed());
    if let (Some(limit), Some(_)) = (memory_limit, &group) {
        let expected = format!(
            // The start-up line's max_memory, whichever the log format.
            "{} (50% of {} the container's memory limit",
            ByteCount(limit / 2),
            ByteCount(limit)
        );
        assert!(
            logs(root).contains(&expected),
            "the budget follows the manifest's memory limit: {expected}\n{}",
            logs(root)
        );
    }
    runtime.block_on(async {
        // What the startup/readiness probes ask for.
        let status = health(channel.clone(), "tickd.v1.Timers").await;
        assert_eq!(
            status,
            Ok(serving),
            "tickd.v1.Timers health\n{}",
            logs(root)
        );
        // The probe port serves health alone: the API is not reachable through it.
        let refused = TimersClient::new(channel.clone())
            .pending(PendingRequest::default())
            .await
            .map_err(|status| status.code());
        assert_eq!(
            refused.as_ref().err(),
            Some(&tonic::Code::Unimplemented),
            "the timer API on the health port {}",
            run.health_listen
        );
        // The app's ways in: --listen (loopback) and the Unix socket.
        let api = tcp_channel(run.listen).await.expect("--listen");
        let answer = answers_calls(TimersClient::new(api), "deploy").await;
        assert_eq!(answer, Ok(()), "the API on --listen {}", run.listen);
        if let Some(socket) = &socket {
            let unix = unix_channel(socket.clone()).await.expect("unix socket");
            let status = health(unix.clone(), "tickd.v1.Timers").await;
            assert_eq!(status, Ok(serving), "health over {}", socket.display());
            let answer = answers_calls(TimersClient::new(unix), "deploy").await;
            assert_eq!(answer, Ok(()), "the API over {}", socket.display());
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
