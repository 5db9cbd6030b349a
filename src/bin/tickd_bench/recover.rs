//! `tickd-bench recover`: resident memory per pending timer, and how long a restart takes
//! to bring them all back, measured on a real `tickd` process.
//!
//! Starts `--tickd` on a fresh data directory, fills it with `--timers` one-hour timers
//! (`--payload-bytes` each, NewTimeouts batches from `--conc` callers), reads the process's
//! resident set and its peak, kills it with SIGKILL (a crash, not a clean stop), starts it
//! again on the same directory and times from the spawn until it answers with every timer
//! pending. Prints `recover timers=.. payload_bytes=.. fill_per_s=.. rss_mb=..
//! bytes_per_timer=.. peak_growth_per_payload=.. data_dir_mb=.. recover_s=..
//! recovered_rss_mb=..`, where `peak_growth_per_payload` is how far the resident set rose
//! above the fresh process at its peak, over the payload bytes registered.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tickd::proto::timers_client::TimersClient;
use tickd::proto::{NewTimeoutsRequest, PendingRequest, TimerSpec};
use tonic::transport::{Channel, Endpoint};

use crate::client::duration;

const NAMESPACE: &str = "bench-recover";

#[derive(Debug, clap::Args)]
pub(crate) struct RecoverArgs {
    /// The server binary to start.
    #[arg(long, default_value = "target/release/tickd")]
    tickd: PathBuf,
    /// Pending timers to fill the server with.
    #[arg(long, default_value_t = 1_000_000)]
    timers: u64,
    /// The server's --sync mode while filling.
    #[arg(long, default_value = "always")]
    sync: String,
    /// Timers per NewTimeouts call.
    #[arg(long, default_value_t = 1_000)]
    batch: u64,
    /// Payload of each timer, in bytes.
    #[arg(long, default_value_t = 16)]
    payload_bytes: usize,
    /// Concurrent callers while filling.
    #[arg(long, default_value_t = 16)]
    conc: usize,
    /// Where the data directory goes (a fresh one is made inside and removed afterwards).
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    scratch: PathBuf,
}

/// A `tickd` child process, killed when dropped.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(args: &RecoverArgs, data_dir: &Path) -> Result<Server, String> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(|error| format!("finding a free port: {error}"))?
            .port();
        let child = Command::new(&args.tickd)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--metrics-listen", "127.0.0.1:0"])
            .args(["--sync", &args.sync])
            .args(["--max-pending", &args.timers.max(10_000_000).to_string()])
            .arg("--data-dir")
            .arg(data_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|error| format!("starting {}: {error}", args.tickd.display()))?;
        Ok(Server {
            child,
            addr: format!("http://127.0.0.1:{port}"),
        })
    }

    /// A size from the process's /proc status: `VmRSS` (resident now) or `VmHWM` (its peak).
    fn status_bytes(&self, field: &str) -> Result<u64, String> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .map_err(|error| format!("reading the server's /proc status: {error}"))?;
        status
            .lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|value| {
                value
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .map(|kilobytes| kilobytes * 1024)
            .ok_or_else(|| format!("no {field} in the server's /proc status"))
    }

    fn crash(mut self) -> Result<(), String> {
        self.child
            .kill()
            .and_then(|()| self.child.wait().map(drop))
            .map_err(|error| format!("killing the server: {error}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn run(args: RecoverArgs) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("building the client runtime");
    let data_dir = args
        .scratch
        .join(format!("tickd-bench-recover-{}", std::process::id()));
    let result = runtime.block_on(measure(&args, &data_dir));
    let _ = std::fs::remove_dir_all(&data_dir);
    match result {
        Ok(line) => println!("{line}"),
        Err(message) => {
            eprintln!("tickd-bench: {message}");
            std::process::exit(1);
        }
    }
}

async fn measure(args: &RecoverArgs, data_dir: &Path) -> Result<String, String> {
    std::fs::create_dir_all(data_dir)
        .map_err(|error| format!("creating {}: {error}", data_dir.display()))?;
    let server = Server::start(args, data_dir)?;
    let channel = connect(&server.addr).await?;
    let fresh = server.status_bytes("VmRSS")?;
    let filling = Instant::now();
    fill(channel, args).await?;
    let fill_secs = filling.elapsed().as_secs_f64();
    let rss = server.status_bytes("VmRSS")?;
    let peak = server.status_bytes("VmHWM")?;
    server.crash()?;
    let data_dir_bytes = directory_bytes(data_dir);

    let restarting = Instant::now();
    let server = Server::start(args, data_dir)?;
    let channel = connect(&server.addr).await?;
    wait_for_pending(channel, args.timers).await?;
    let recover_secs = restarting.elapsed().as_secs_f64();
    let recovered_rss = server.status_bytes("VmRSS")?;
    drop(server);

    let mb = |bytes: u64| bytes as f64 / 1e6;
    let payload_total = (args.timers * args.payload_bytes as u64).max(1);
    Ok(format!(
        "recover timers={} payload_bytes={} fill_per_s={:.0} rss_mb={:.0} bytes_per_timer={:.1} peak_growth_per_payload={:.2} data_dir_mb={:.0} recover_s={:.2} recovered_rss_mb={:.0}",
        args.timers,
        args.payload_bytes,
        args.timers as f64 / fill_secs,
        mb(rss),
        rss as f64 / args.timers as f64,
        peak.saturating_sub(fresh) as f64 / payload_total as f64,
        mb(data_dir_bytes),
        recover_secs,
        mb(recovered_rss),
    ))
}

/// Connects once the server accepts connections (it binds before it recovers).
async fn connect(addr: &str) -> Result<Channel, String> {
    let endpoint = Endpoint::from_shared(addr.to_string())
        .map_err(|error| format!("{addr}: {error}"))?
        .tcp_nodelay(true)
        .initial_connection_window_size(8 << 20);
    let started = Instant::now();
    loop {
        match endpoint.connect().await {
            Ok(channel) => return Ok(channel),
            Err(error) if started.elapsed() > Duration::from_secs(60) => {
                return Err(format!("connecting to {addr}: {error}"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// Registers exactly `args.timers` timers; any refused item fails the run.
async fn fill(channel: Channel, args: &RecoverArgs) -> Result<(), String> {
    let spec = TimerSpec {
        namespace: NAMESPACE.into(),
        delay: Some(duration(Duration::from_secs(3600))),
        payload: Bytes::from(vec![0x5a; args.payload_bytes]),
        ..TimerSpec::default()
    };
    let remaining = Arc::new(AtomicU64::new(args.timers));
    let callers = (0..args.conc.max(1)).map(|_| {
        let (mut client, spec, remaining) = (
            TimersClient::new(channel.clone()),
            spec.clone(),
            remaining.clone(),
        );
        let batch = args.batch.max(1);
        tokio::spawn(async move {
            loop {
                let claimed = remaining
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                        (left > 0).then(|| left - left.min(batch))
                    })
                    .map_or(0, |left| left.min(batch));
                if claimed == 0 {
                    return Ok(());
                }
                let timers = vec![spec.clone(); claimed as usize];
                let response = client
                    .new_timeouts(NewTimeoutsRequest { timers })
                    .await
                    .map_err(|status| format!("NewTimeouts: {status}"))?
                    .into_inner();
                let failed = response.results.iter().find(|result| {
                    !matches!(
                        result.result,
                        Some(tickd::proto::new_timeout_result::Result::Registered(_))
                    )
                });
                if let Some(failed) = failed {
                    return Err(format!("a timer was refused: {failed:?}"));
                }
            }
        })
    });
    for caller in callers.collect::<Vec<_>>() {
        caller
            .await
            .map_err(|error| format!("caller task: {error}"))??;
    }
    Ok(())
}

/// Waits until the restarted server answers that every timer is pending.
async fn wait_for_pending(channel: Channel, timers: u64) -> Result<(), String> {
    let mut client = TimersClient::new(channel);
    let request = PendingRequest {
        namespace: NAMESPACE.into(),
        ..PendingRequest::default()
    };
    let count = client
        .pending(request)
        .await
        .map_err(|status| format!("Pending after the restart: {status}"))?
        .into_inner()
        .count;
    if count == timers {
        Ok(())
    } else {
        Err(format!("{count} of {timers} timers came back"))
    }
}

fn directory_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok()?.metadata().ok())
        .map(|metadata| metadata.len())
        .sum()
}
