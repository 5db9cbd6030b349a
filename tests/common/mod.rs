//! A real tickd server on 127.0.0.1:0 (and optionally a Unix socket) for integration tests.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};

use tickd::config::Config;
use tickd::proto;
use tickd::proto::timers_client::TimersClient;
use tickd::server::Stopped;

pub mod metrics;
pub mod raw_codec;
pub mod tooling;

pub use proto::*;

pub struct TestServer {
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    /// Plaintext grpc.health.v1 only (`--health-listen`).
    pub health_addr: SocketAddr,
    pub unix_socket: Option<PathBuf>,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<Stopped>,
    _dir: tempfile::TempDir,
}

/// The embedded defaults, changed by `adjust`.
pub fn config(adjust: impl FnOnce(&mut Config)) -> Config {
    let mut config = Config::defaults();
    adjust(&mut config);
    config
}

impl TestServer {
    pub async fn start() -> Self {
        Self::start_with(Config::defaults()).await
    }

    pub async fn start_with(config: Config) -> Self {
        Self::start_inner(config, false).await
    }

    pub async fn start_with_unix_socket(config: Config) -> Self {
        Self::start_inner(config, true).await
    }

    async fn start_inner(mut config: Config, with_unix: bool) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        if config.data_dir == Config::defaults().data_dir {
            config.data_dir = dir.path().join("data");
        }
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let unix_socket = with_unix.then(|| dir.path().join("tickd.sock"));
        let unix_listener = unix_socket
            .as_ref()
            .map(|path| UnixListener::bind(path).expect("bind unix socket"));
        let metrics_listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind metrics");
        let metrics_addr = metrics_listener.local_addr().expect("metrics addr");
        let health_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind health");
        let health_addr = health_listener.local_addr().expect("health addr");
        let listeners = tickd::server::Listeners {
            grpc: listener,
            unix: unix_listener,
            metrics: Some(metrics_listener),
            health: Some(health_listener),
        };
        let (shutdown, stop) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            tickd::server::run(&config, listeners, async {
                let _ = stop.await;
            })
            .await
            .expect("server run")
        });
        Self {
            addr,
            metrics_addr,
            health_addr,
            unix_socket,
            shutdown: Some(shutdown),
            task,
            _dir: dir,
        }
    }

    pub async fn channel(&self) -> Channel {
        Endpoint::from_shared(format!("http://{}", self.addr))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect")
    }

    pub async fn client(&self) -> TimersClient<Channel> {
        TimersClient::new(self.channel().await)
    }

    /// Triggers shutdown and waits for the server to finish draining.
    pub async fn stop(mut self) -> Stopped {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        (&mut self.task).await.expect("server task")
    }
}

pub fn millis(ms: u64) -> prost_types::Duration {
    let duration = Duration::from_millis(ms);
    prost_types::Duration {
        seconds: duration.as_secs() as i64,
        nanos: duration.subsec_nanos() as i32,
    }
}

pub fn spec(namespace: &str, delay_ms: u64, payload: &[u8]) -> TimerSpec {
    TimerSpec {
        namespace: namespace.into(),
        delay: Some(millis(delay_ms)),
        payload: payload.to_vec().into(),
        ..Default::default()
    }
}

pub fn by_id(namespace: &str, id: &str) -> Option<TimerRef> {
    Some(TimerRef {
        namespace: namespace.into(),
        target: Some(timer_ref::Target::Id(id.into())),
    })
}

pub fn by_key(namespace: &str, key: &str) -> Option<TimerRef> {
    Some(TimerRef {
        namespace: namespace.into(),
        target: Some(timer_ref::Target::Key(key.into())),
    })
}

pub async fn register(client: &mut TimersClient<Channel>, spec: TimerSpec) -> Timer {
    client
        .new_timeout(NewTimeoutRequest { timer: Some(spec) })
        .await
        .expect("register")
        .into_inner()
        .timer
        .expect("timer")
}

/// Opens a sharing subscription with the given ack timeout and window.
pub async fn subscribe(
    client: &mut TimersClient<Channel>,
    namespace: &str,
    ack_timeout_ms: u64,
    max_unacked: u32,
) -> tonic::Streaming<SubscribeResponse> {
    client
        .subscribe(SubscribeRequest {
            namespace: namespace.into(),
            ack_timeout: (ack_timeout_ms > 0).then(|| millis(ack_timeout_ms)),
            max_unacked,
            ..Default::default()
        })
        .await
        .expect("subscribe")
        .into_inner()
}

pub async fn next_expiration(stream: &mut tonic::Streaming<SubscribeResponse>) -> Expiration {
    stream
        .message()
        .await
        .expect("stream error")
        .expect("stream ended")
        .expiration
        .expect("expiration")
}

pub async fn ack(
    client: &mut TimersClient<Channel>,
    namespace: &str,
    ids: Vec<String>,
) -> AckResponse {
    client
        .ack(AckRequest {
            namespace: namespace.into(),
            delivery_ids: ids,
        })
        .await
        .expect("ack")
        .into_inner()
}

pub async fn pending_count(client: &mut TimersClient<Channel>, namespace: &str) -> u64 {
    client
        .pending(PendingRequest {
            namespace: namespace.into(),
            ..Default::default()
        })
        .await
        .expect("pending")
        .into_inner()
        .count
}

pub fn unix_nanos(timestamp: &prost_types::Timestamp) -> i128 {
    i128::from(timestamp.seconds) * 1_000_000_000 + i128::from(timestamp.nanos)
}

pub fn now_unix_nanos() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

/// Registers every spec in one NewTimeouts call (one worker command, hence one clock
/// reading: timers with the same delay share a deadline and fire in the same batch).
pub async fn register_all(
    client: &mut TimersClient<Channel>,
    specs: Vec<TimerSpec>,
) -> Vec<String> {
    let count = specs.len();
    let results = client
        .new_timeouts(NewTimeoutsRequest { timers: specs })
        .await
        .expect("new_timeouts")
        .into_inner()
        .results;
    assert_eq!(results.len(), count);
    results
        .into_iter()
        .map(|result| match result.result {
            Some(new_timeout_result::Result::Registered(registered)) => {
                registered.timer.expect("timer").id
            }
            other => panic!("registration failed: {other:?}"),
        })
        .collect()
}

pub fn specs(namespace: &str, count: usize, delay_ms: u64) -> Vec<TimerSpec> {
    (0..count)
        .map(|index| spec(namespace, delay_ms, format!("payload-{index}").as_bytes()))
        .collect()
}

pub async fn pending_with_dead(
    client: &mut TimersClient<Channel>,
    namespace: &str,
) -> PendingResponse {
    client
        .pending(PendingRequest {
            namespace: namespace.into(),
            include_dead: true,
            ..Default::default()
        })
        .await
        .expect("pending")
        .into_inner()
}

/// The health of `service` ("" for the whole server), or None if tickd does not answer.
pub async fn health(
    addr: SocketAddr,
    service: &str,
) -> Option<tonic_health::pb::health_check_response::ServingStatus> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .ok()?;
    let request = tonic_health::pb::HealthCheckRequest {
        service: service.into(),
    };
    let answer = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(request)
        .await
        .ok()?;
    Some(answer.into_inner().status())
}
