//! Wires the pieces together and serves them: [`run`] is the whole daemon, given its
//! listeners and a future that resolves when it should stop.
//!
//! What reaches the API has passed [`connections`] (a bounded accept loop with handshake
//! and idle timeouts) and [`calls`] (per-connection accounting and the request size
//! limit), over HTTP/2 set up by [`http2_server`].

mod backend;
mod calls;
mod connections;

use std::future::Future;

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Server;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tower::limit::GlobalConcurrencyLimitLayer;

use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;
use tracing::{error, info, warn};

use crate::api::auth::{Authenticator, Tokens};
use crate::api::convert::Limits;
use crate::api::TimersService;
use crate::config::Config;
use crate::metrics::{Metrics, RpcMetricsLayer};
use crate::proto;
use crate::proto::timers_server::TimersServer;
use backend::{Backend, Health};
use calls::CallLayer;
use connections::ConnectionLimits;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("opening the data directory: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("starting the timer worker thread: {0}")]
    Worker(#[source] std::io::Error),
    #[error("building the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("serving gRPC: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("loading TLS material {path}: {source}")]
    Tls {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Tokens(#[from] crate::api::auth::TokenFileError),
    #[error("starting the replicated store: {0}")]
    Cluster(#[from] crate::cluster::ClusterError),
    #[error("stopped because {0}")]
    Failed(&'static str),
}

/// Where tickd listens; bound by the caller, so that tests can use port 0.
pub struct Listeners {
    pub grpc: TcpListener,
    /// An extra gRPC listener for sidecars sharing a volume.
    pub unix: Option<UnixListener>,
    /// Prometheus `/metrics`.
    pub metrics: Option<TcpListener>,
    /// Plaintext health checks only (probes), when the main listener uses TLS.
    pub health: Option<TcpListener>,
}

/// What [`run`] leaves behind once stopped.
#[derive(Debug)]
pub struct Stopped {
    /// Timers still pending at shutdown (with no data directory, these are lost).
    pub pending_timers: usize,
    /// True if open calls had to be cut off at the drain timeout.
    pub drain_timed_out: bool,
}

/// Serves tickd on its listeners until `shutdown` resolves,
/// then drains: reports NOT_SERVING, ends subscription and heartbeat streams, and waits
/// at most `config.drain_timeout` for calls in progress.
pub async fn run(
    config: &Config,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> Result<Stopped, ServerError> {
    // Configuration that can fail is read before any thread starts.
    let tokens = config
        .auth_token_file
        .as_deref()
        .map(Tokens::load)
        .transpose()?;
    let tls = tls_config(config)?;
    let metrics = Metrics::new();
    let backend = match &config.store {
        Some(url) => Backend::replicated(config, url, &metrics).await?,
        None => Backend::local(config, &metrics)?,
    };
    // Said once the timers are recovered (or the replica has joined): a refused start
    // never claims to serve.
    info!(
        listen = %display_addr(listeners.grpc.local_addr()),
        unix_socket = ?config.unix_socket,
        metrics = %listeners.metrics.as_ref().map_or("none".into(), |metrics| display_addr(metrics.local_addr())),
        tick = ?config.tick,
        "tickd serving"
    );
    let (stopping, stop_signal) = watch::channel(false);
    let limits = Limits {
        max_payload_bytes: config.max_payload_bytes,
        max_batch: config.max_batch,
        min_repeat: config.tick,
        ..Limits::default()
    };
    let (timers, expirations) = backend.api();
    let timers = TimersServer::new(TimersService::new(
        timers,
        expirations,
        limits,
        config.stream_limits(),
        stop_signal.clone(),
    ))
    // `CallLayer` refuses larger messages first, naming the flag; this is a backstop.
    .max_decoding_message_size(config.max_request_bytes);
    let timers = InterceptedService::new(timers, Authenticator::new(tokens));
    let (health_reporter, health) = tonic_health::server::health_reporter();
    set_health(&health_reporter, &metrics, true).await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;

    let (stop_metrics, metrics_stopped) = watch::channel(false);
    if let Some(metrics_listener) = listeners.metrics {
        tokio::spawn(crate::metrics::serve(
            metrics_listener,
            metrics.clone(),
            stopped(metrics_stopped),
        ));
    }
    let call_layer = CallLayer::new(
        config.max_request_bytes,
        config.max_watch_streams,
        stop_signal.clone(),
    );
    // Past the limit, calls are refused at once with RESOURCE_EXHAUSTED instead of queueing.
    let overload = tower::ServiceBuilder::new()
        .layer(call_layer.clone())
        .layer(RpcMetricsLayer::new(metrics.clone()))
        .load_shed()
        .layer(GlobalConcurrencyLimitLayer::new(
            config.max_concurrent_calls,
        ));
    let connection_limits = ConnectionLimits {
        max_connections: connection_budget(config),
        max_handshaking: config.max_handshaking,
        handshake_timeout: config.handshake_timeout,
        idle_timeout: config.idle_timeout,
    };
    // One budget for the connections of every listener.
    let open_connections = Arc::new(AtomicUsize::new(0));
    let router = |tls: Option<ServerTlsConfig>| -> Result<_, ServerError> {
        let mut builder = http2_server(config);
        if let Some(tls) = tls {
            builder = builder.tls_config(tls)?;
        }
        Ok(builder
            .layer(overload.clone())
            .add_service(health.clone())
            .add_service(reflection.clone())
            .add_service(timers.clone()))
    };
    let tcp = router(tls)?.serve_with_incoming_shutdown(
        connections::incoming(
            listeners.grpc,
            connection_limits,
            open_connections.clone(),
            metrics.clone(),
        ),
        stopped(stop_signal.clone()),
    );
    // The Unix socket is local and guarded by its file mode: no TLS there.
    let unix_router = router(None)?;
    let unix = async {
        match listeners.unix {
            Some(unix_listener) => {
                unix_router
                    .serve_with_incoming_shutdown(
                        connections::incoming(
                            unix_listener,
                            connection_limits,
                            open_connections.clone(),
                            metrics.clone(),
                        ),
                        stopped(stop_signal.clone()),
                    )
                    .await
            }
            None => Ok(()),
        }
    };
    let health_only = http2_server(config)
        .layer(call_layer)
        .add_service(health.clone());
    let probes = async {
        match listeners.health {
            Some(health_listener) => {
                health_only
                    .serve_with_incoming_shutdown(
                        connections::incoming(
                            health_listener,
                            connection_limits,
                            open_connections.clone(),
                            metrics.clone(),
                        ),
                        stopped(stop_signal.clone()),
                    )
                    .await
            }
            None => Ok(()),
        }
    };
    let serving = async { tokio::try_join!(tcp, unix, probes).map(|_| ()) };
    tokio::pin!(serving);

    let failure = tokio::select! {
        result = &mut serving => {
            result?;
            None
        }
        () = shutdown => {
            info!("shutdown requested: draining");
            None
        }
        reason = watch_health(&backend, &health_reporter, &metrics) => {
            error!(reason, "tickd cannot do its job: stopping for its supervisor to restart it");
            Some(reason)
        }
    };
    set_health(&health_reporter, &metrics, false).await;
    let _ = stopping.send(true);
    backend.shutdown();
    let drain_timed_out = match tokio::time::timeout(config.drain_timeout, &mut serving).await {
        Ok(result) => {
            result?;
            false
        }
        Err(_) => {
            warn!(drain_timeout = ?config.drain_timeout, "drain timed out: closing open calls");
            true
        }
    };
    let stopped = backend.stop().await;
    let _ = stop_metrics.send(true);
    if let Some(reason) = failure {
        return Err(ServerError::Failed(reason));
    }
    let pending_timers = stopped.map_err(ServerError::Failed)?;
    info!(pending_timers, "tickd stopped");
    Ok(Stopped {
        pending_timers,
        drain_timed_out,
    })
}

fn display_addr(addr: std::io::Result<std::net::SocketAddr>) -> String {
    addr.map_or_else(
        |error| format!("unknown ({error})"),
        |addr| addr.to_string(),
    )
}

/// How often the health watch looks at the backend: a failure shows within this.
const HEALTH_INTERVAL: Duration = Duration::from_millis(100);

/// Keeps health in step with the backend. While a replica cannot reach its database,
/// `tickd.v1.Timers` (what readiness probes ask) is NOT_SERVING, and SERVING again once it
/// can; the server as a whole ("", what liveness probes ask) stays SERVING, since
/// restarting tickd would not bring the database back. Returns when the backend has failed
/// for good; the caller then reports NOT_SERVING everywhere.
async fn watch_health(
    backend: &Backend,
    reporter: &HealthReporter,
    metrics: &Metrics,
) -> &'static str {
    let mut ticks = tokio::time::interval(HEALTH_INTERVAL);
    let mut ready = true;
    loop {
        ticks.tick().await;
        match backend.health() {
            Health::Failed(reason) => return reason,
            Health::Unreachable(unreachable) if ready => {
                warn!(?unreachable, "store unreachable: not ready");
                set_ready(reporter, metrics, false).await;
                ready = false;
            }
            Health::Serving if !ready => {
                info!("store reachable again: ready");
                set_ready(reporter, metrics, true).await;
                ready = true;
            }
            _ => {}
        }
    }
}

/// SERVING or NOT_SERVING for `tickd.v1.Timers`, and `tickd_serving`.
async fn set_ready(reporter: &HealthReporter, metrics: &Metrics, ready: bool) {
    reporter
        .set_service_status(
            <TimersServer<TimersService> as tonic::server::NamedService>::NAME,
            serving_status(ready),
        )
        .await;
    metrics.serving.set(i64::from(ready));
}

/// SERVING or NOT_SERVING for every service name: the server ("") and `tickd.v1.Timers`.
async fn set_health(reporter: &HealthReporter, metrics: &Metrics, serving: bool) {
    reporter
        .set_service_status("", serving_status(serving))
        .await;
    set_ready(reporter, metrics, serving).await;
}

fn serving_status(serving: bool) -> ServingStatus {
    match serving {
        true => ServingStatus::Serving,
        false => ServingStatus::NotServing,
    }
}

/// Resolves once the drain begins.
pub(super) async fn stopped(mut stop_signal: watch::Receiver<bool>) {
    let _ = stop_signal.wait_for(|stopping| *stopping).await;
}

/// TLS for the TCP listener, mutual when a client CA is given.
fn tls_config(config: &Config) -> Result<Option<ServerTlsConfig>, ServerError> {
    let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) else {
        return Ok(None);
    };
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|source| ServerError::Tls {
            path: path.display().to_string(),
            source,
        })
    };
    let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(read(cert)?, read(key)?));
    if let Some(client_ca) = &config.tls_client_ca {
        tls = tls.client_ca_root(Certificate::from_pem(read(client_ca)?));
    }
    Ok(Some(tls))
}

/// HTTP/2 as every listener serves it.
///
/// Flow-control windows are set with the h2 crate's guard against floods of small DATA
/// frames in mind: h2 ends a connection (GOAWAY ENHANCE_YOUR_CALM) once the small frames it
/// holds unread cost more than half the connection window, counting 256 bytes less the
/// payload for each. A KeepAlive heartbeat is a frame of about 30 bytes, so a stream window
/// of 256 KiB holds at most ~9,000 of them, ~2 MiB of that budget, and a connection window
/// of 16 MiB (a budget of 8 MiB) leaves room for several paused KeepAlive streams on one
/// connection. tickd reads heartbeats as they come (see `api::KEEPALIVE_IN_FLIGHT`), so a
/// client sending faster than tickd answers meets flow control and waits, instead of losing
/// its connection.
fn http2_server(config: &Config) -> Server {
    Server::builder()
        .initial_stream_window_size(256 * 1024)
        .initial_connection_window_size(16 * 1024 * 1024)
        .max_concurrent_streams(config.max_streams_per_connection)
        .http2_keepalive_interval(Some(config.http2_keepalive_interval))
        .http2_keepalive_timeout(Some(config.http2_keepalive_timeout))
        // hyper's guard against rapid reset (CVE-2023-44487), which tonic turns off by default.
        .http2_max_local_error_reset_streams(Some(1_024))
        .http2_max_pending_accept_reset_streams(Some(100))
}

/// Descriptors kept for everything but connections: the log's segments, snapshots and
/// directory, listeners, the database's connections, the runtime.
const RESERVED_DESCRIPTORS: u64 = 256;

/// `--max-connections`, lowered if need be so that connections alone can never take the
/// descriptors the log needs: running out there would stop tickd (see fail-stop).
fn connection_budget(config: &Config) -> usize {
    let Ok((soft_limit, _)) = rlimit::getrlimit(rlimit::Resource::NOFILE) else {
        return config.max_connections;
    };
    let available = soft_limit.saturating_sub(RESERVED_DESCRIPTORS);
    let budget = usize::try_from(available).unwrap_or(usize::MAX);
    if budget < config.max_connections {
        warn!(
            max_connections = config.max_connections,
            open_file_limit = soft_limit,
            budget,
            "--max-connections lowered to what the open file limit leaves"
        );
    }
    config.max_connections.min(budget).max(1)
}

/// Raises the soft limit on open files to the hard limit, so that `--max-connections` is
/// what bounds connections, not a soft default of 1,024.
pub fn raise_open_file_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => {
            info!(
                open_file_limit = limit,
                "raised the open file limit to the hard limit"
            );
        }
        Err(error) => warn!(%error, "could not raise the open file limit"),
    }
}
