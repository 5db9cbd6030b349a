//! Wires the pieces together and serves them: [`run`] is the whole daemon, given its
//! listeners and a future that resolves when it should stop.
//!
//! What reaches the API has passed [`connections`] (a bounded accept loop with handshake
//! and idle timeouts) and [`calls`] (per-connection accounting and the request size
//! limit), over HTTP/2 set up by [`http2_server`].

mod backend;
mod calls;
mod connections;
mod health;
mod transport;

use std::future::Future;

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::ServerTlsConfig;
use tonic_health::pb::health_server::HealthServer;
use tonic_reflection::pb::v1::server_reflection_server::{
    ServerReflection, ServerReflectionServer,
};
use tower::limit::GlobalConcurrencyLimitLayer;
use tracing::{error, info, warn};

use crate::api::auth::{Authenticator, Tokens};
use crate::api::convert::Limits;
use crate::api::TimersService;
use crate::config::Config;
use crate::metrics::{Metrics, RpcMetricsLayer};
use crate::proto;
use crate::proto::timers_server::TimersServer;
use backend::Backend;
use calls::CallLayer;
use connections::{Acceptor, ConnectionLimits};
use health::{set_health, watch_health};
pub use transport::raise_open_file_limit;
use transport::{connection_budget, http2_server, tls_config};

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

/// Serves tickd on its listeners until `shutdown` resolves, or until the backend fails
/// for good; then drains: reports NOT_SERVING, ends subscription and heartbeat streams,
/// waits at most `config.drain_timeout` for calls in progress, and stops the backend.
pub async fn run(
    config: &Config,
    mut listeners: Listeners,
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
    // The one place that chooses the backend.
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
    let (health_reporter, health) = tonic_health::server::health_reporter();
    set_health(&health_reporter, &metrics, true).await;
    let (stop_metrics, metrics_stopped) = watch::channel(false);
    if let Some(metrics_listener) = listeners.metrics.take() {
        tokio::spawn(crate::metrics::serve(
            metrics_listener,
            metrics.clone(),
            stopped(metrics_stopped),
        ));
    }
    let services = Services {
        timers: timers_service(config, &backend, tokens, stop_signal.clone()),
        health,
        reflection: reflection_service()?,
    };
    let serving = serve(config, listeners, tls, services, &metrics, stop_signal);
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

type TimersApi = InterceptedService<TimersServer<TimersService>, Authenticator>;

/// The gRPC services every listener offers (the health listener: health alone).
struct Services<Health, Reflection> {
    timers: TimersApi,
    health: HealthServer<Health>,
    reflection: ServerReflectionServer<Reflection>,
}

/// The timer API over the backend's [`crate::domain::Timers`] and
/// [`crate::domain::Expirations`], behind the token check.
fn timers_service(
    config: &Config,
    backend: &Backend,
    tokens: Option<Tokens>,
    stop_signal: watch::Receiver<bool>,
) -> TimersApi {
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
        stop_signal,
    ))
    // `CallLayer` refuses larger messages first, naming the flag; this is a backstop.
    .max_decoding_message_size(config.max_request_bytes);
    InterceptedService::new(timers, Authenticator::new(tokens))
}

fn reflection_service() -> Result<ServerReflectionServer<impl ServerReflection>, ServerError> {
    Ok(tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?)
}

/// Serves every listener until the drain begins and their calls have ended.
async fn serve(
    config: &Config,
    listeners: Listeners,
    tls: Option<ServerTlsConfig>,
    services: Services<impl tonic_health::pb::health_server::Health, impl ServerReflection>,
    metrics: &Arc<Metrics>,
    stop_signal: watch::Receiver<bool>,
) -> Result<(), ServerError> {
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
    let acceptor = Acceptor {
        limits: ConnectionLimits {
            max_connections: connection_budget(config),
            max_handshaking: config.max_handshaking,
            handshake_timeout: config.handshake_timeout,
            idle_timeout: config.idle_timeout,
        },
        open: Arc::new(AtomicUsize::new(0)),
        metrics: metrics.clone(),
    };
    let router = |tls: Option<ServerTlsConfig>| -> Result<_, ServerError> {
        let mut builder = http2_server(config);
        if let Some(tls) = tls {
            builder = builder.tls_config(tls)?;
        }
        Ok(builder
            .layer(overload.clone())
            .add_service(services.health.clone())
            .add_service(services.reflection.clone())
            .add_service(services.timers.clone()))
    };
    let tcp = router(tls)?.serve_with_incoming_shutdown(
        acceptor.incoming(listeners.grpc),
        stopped(stop_signal.clone()),
    );
    // The Unix socket is local and guarded by its file mode: no TLS there.
    let unix_router = router(None)?;
    let unix = async {
        let Some(unix_listener) = listeners.unix else {
            return Ok(());
        };
        unix_router
            .serve_with_incoming_shutdown(
                acceptor.incoming(unix_listener),
                stopped(stop_signal.clone()),
            )
            .await
    };
    let health_only = http2_server(config)
        .layer(call_layer)
        .add_service(services.health.clone());
    let probes = async {
        let Some(health_listener) = listeners.health else {
            return Ok(());
        };
        health_only
            .serve_with_incoming_shutdown(
                acceptor.incoming(health_listener),
                stopped(stop_signal.clone()),
            )
            .await
    };
    tokio::try_join!(tcp, unix, probes)?;
    Ok(())
}

fn display_addr(addr: std::io::Result<std::net::SocketAddr>) -> String {
    addr.map_or_else(
        |error| format!("unknown ({error})"),
        |addr| addr.to_string(),
    )
}

/// Resolves once the drain begins.
pub(super) async fn stopped(mut stop_signal: watch::Receiver<bool>) {
    let _ = stop_signal.wait_for(|stopping| *stopping).await;
}
