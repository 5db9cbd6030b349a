//! Wires the pieces together and serves them: [`run`] is the whole daemon, given its
//! listeners and a future that resolves when it should stop.
//!
//! What reaches the API has passed [`connections`] (a bounded accept loop with handshake
//! and idle timeouts) and [`calls`] (per-connection accounting and the request size
//! limit), over HTTP/2 set up by [`http2_server`], and TLS by [`tls`] when configured.
//! [`reload`] replaces the certificate and the tokens while tickd runs.

mod calls;
mod connections;
mod drain;
mod health;
mod reload;
mod tls;
mod transport;

use std::future::Future;

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tonic::codec::CompressionEncoding;
use tonic::service::interceptor::InterceptedService;
use tonic_health::pb::health_server::HealthServer;
use tonic_reflection::pb::v1::server_reflection_server::{
    ServerReflection, ServerReflectionServer,
};
use tonic_reflection::pb::v1alpha::server_reflection_server::{
    ServerReflection as ServerReflectionV1Alpha,
    ServerReflectionServer as ServerReflectionServerV1Alpha,
};
use tower::limit::GlobalConcurrencyLimitLayer;
use tracing::{error, info, warn};

use crate::api::auth::{Authenticator, Tokens};
use crate::api::{SinksService, TimersService};
use crate::budget::memory::BudgetSource;
use crate::budget::{ByteCount, MemoryBudget};
use crate::config::Config;
use crate::convert::Limits;
use crate::domain::Backend;
use crate::metrics::{Metrics, RpcMetricsLayer};
use crate::proto;
use crate::proto::sinks_server::SinksServer;
use crate::proto::timers_server::TimersServer;
use crate::sink::CheckedSinks;
use calls::CallLayer;
use connections::{Acceptor, ConnectionLimits};
use drain::stopped;
use health::{set_health, watch_health};
use reload::{Reloadable, Reloader, TokenFile};
use tls::{tls_incoming, ReloadableTls};
pub use transport::raise_open_file_limit;
use transport::{connection_budget, http2_server};

/// Compressions accepted on requests, and used for answers when the client asks for one
/// (`grpc-accept-encoding`); an answer to a client that asks for none is not compressed.
const COMPRESSIONS: [CompressionEncoding; 2] =
    [CompressionEncoding::Gzip, CompressionEncoding::Zstd];

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
    #[error("building the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("serving gRPC: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("loading TLS material: {0}")]
    Tls(String),
    #[error(transparent)]
    Tokens(#[from] crate::api::auth::TokenFileError),
    #[error(transparent)]
    Sink(#[from] crate::sink::SinkError),
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
    let authenticator = Authenticator::new(tokens);
    let tls = ReloadableTls::load(config).map_err(ServerError::Tls)?;
    let reloader = reloader(config, &authenticator, tls.clone());
    let metrics = Metrics::new();
    // Read once: the budget's default and recovery's ceiling both follow it.
    let memory_limit = config.memory_limit();
    let memory = config.memory_budget(&metrics, &memory_limit);
    let sinks = CheckedSinks::check(&config.sinks()).await?;
    let backend = crate::backend::start(config, &metrics, &memory, &memory_limit).await?;
    let sinks = sinks
        .start(backend.expirations(), backend.sinks(), &metrics)
        .await;
    // Said once the timers are recovered (or the replica has joined): a refused start
    // never claims to serve.
    info!(
        listen = %display_addr(listeners.grpc.local_addr()),
        unix_socket = ?config.unix_socket,
        metrics = %listeners.metrics.as_ref().map_or("none".into(), |metrics| display_addr(metrics.local_addr())),
        tick = ?config.tick,
        max_memory = %budget_line(&memory),
        memory_used = %ByteCount(memory.used()),
        max_disk = %config.max_disk,
        "tickd serving"
    );
    let (stopping, stop_signal) = watch::channel(false);
    tokio::spawn(reloader.run(stop_signal.clone()));
    let (health_reporter, health) = tonic_health::server::health_reporter();
    let health = COMPRESSIONS.iter().fold(health, |health, &encoding| {
        health.accept_compressed(encoding).send_compressed(encoding)
    });
    set_health(&health_reporter, &metrics, true).await;
    let (stop_metrics, metrics_stopped) = watch::channel(false);
    if let Some(metrics_listener) = listeners.metrics.take() {
        tokio::spawn(crate::metrics::serve(
            metrics_listener,
            metrics.clone(),
            stopped(metrics_stopped),
        ));
    }
    let authenticator_for_sinks = authenticator.clone();
    let services = Services {
        timers: timers_service(
            config,
            backend.as_ref(),
            authenticator,
            stop_signal.clone(),
            (&memory, &metrics),
        ),
        sinks: sinks_service(config, sinks.clone(), authenticator_for_sinks),
        health,
        reflection: reflection_builder().build_v1()?,
        reflection_v1alpha: reflection_builder().build_v1alpha()?,
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
        reason = watch_health(backend.as_ref(), &health_reporter, &metrics) => {
            error!(reason, "tickd cannot do its job: stopping for its supervisor to restart it");
            Some(reason)
        }
    };
    set_health(&health_reporter, &metrics, false).await;
    let _ = stopping.send(true);
    // Before the backend ends its streams: a pusher stops pulling, and lets the pushes it
    // has out finish (and be acknowledged) for a moment.
    sinks.stop().await;
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
type SinksApi = InterceptedService<SinksServer<SinksService>, Authenticator>;

/// The gRPC services every listener offers (the health listener: health alone).
/// Reflection is served in both versions: grpcurl up to 1.8 and grpcio's reflection client
/// speak `v1alpha` only.
struct Services<Health, Reflection, ReflectionV1Alpha> {
    timers: TimersApi,
    sinks: SinksApi,
    health: HealthServer<Health>,
    reflection: ServerReflectionServer<Reflection>,
    reflection_v1alpha: ServerReflectionServerV1Alpha<ReflectionV1Alpha>,
}

/// Reloads the TLS material and the token file, if given, on SIGHUP and when they change.
fn reloader(
    config: &Config,
    authenticator: &Authenticator,
    tls: Option<Arc<ReloadableTls>>,
) -> Reloader {
    let mut reloadables: Vec<Arc<dyn Reloadable>> = Vec::new();
    if let Some(tls) = tls {
        reloadables.push(tls);
    }
    if let Some(path) = &config.auth_token_file {
        reloadables.push(Arc::new(TokenFile {
            path: path.clone(),
            authenticator: authenticator.clone(),
        }));
    }
    Reloader::new(reloadables, config.reload_interval)
}

/// The timer API over the backend's [`crate::domain::Timers`] and
/// [`crate::domain::Expirations`], behind the token check.
fn timers_service(
    config: &Config,
    backend: &dyn Backend,
    authenticator: Authenticator,
    stop_signal: watch::Receiver<bool>,
    (memory, metrics): (&Arc<MemoryBudget>, &Arc<Metrics>),
) -> TimersApi {
    let limits = Limits {
        max_payload_bytes: config.max_payload_bytes,
        max_batch: config.max_batch,
        min_repeat: config.tick,
        ..Limits::default()
    };
    let (timers, expirations) = (backend.timers(), backend.expirations());
    let timers = TimersServer::new(TimersService::new(
        timers,
        expirations,
        limits,
        config.stream_limits(),
        stop_signal,
        memory.clone(),
        metrics.clone(),
    ))
    // `CallLayer` refuses larger messages first, naming the flag; this is a backstop. It
    // also bounds what a compressed message may inflate to.
    .max_decoding_message_size(config.max_request_bytes);
    let timers = COMPRESSIONS.iter().fold(timers, |timers, &encoding| {
        timers.accept_compressed(encoding).send_compressed(encoding)
    });
    InterceptedService::new(timers, authenticator)
}

/// The sink API over the running sinks, behind the same token check as the timer API.
fn sinks_service(
    config: &Config,
    sinks: crate::sink::Sinks,
    authenticator: Authenticator,
) -> SinksApi {
    let limits = Limits {
        max_payload_bytes: config.max_payload_bytes,
        max_batch: config.max_batch,
        min_repeat: config.tick,
        ..Limits::default()
    };
    let service = SinksServer::new(SinksService::new(sinks, limits));
    let service = COMPRESSIONS.iter().fold(service, |service, &encoding| {
        service
            .accept_compressed(encoding)
            .send_compressed(encoding)
    });
    InterceptedService::new(service, authenticator)
}

/// The memory budget for the start-up line: its size and where it came from.
fn budget_line(memory: &MemoryBudget) -> String {
    match memory.source() {
        BudgetSource::Off => "none".to_owned(),
        BudgetSource::Flag => ByteCount(memory.limit()).to_string(),
        BudgetSource::Derived { what } => format!("{} ({what})", ByteCount(memory.limit())),
    }
}

fn reflection_builder() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
}

/// Serves every listener until the drain begins and their calls have ended.
async fn serve(
    config: &Config,
    listeners: Listeners,
    tls: Option<Arc<ReloadableTls>>,
    services: Services<
        impl tonic_health::pb::health_server::Health,
        impl ServerReflection,
        impl ServerReflectionV1Alpha,
    >,
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
    let router = || {
        http2_server(config)
            .layer(overload.clone())
            .add_service(services.health.clone())
            .add_service(services.reflection.clone())
            .add_service(services.reflection_v1alpha.clone())
            .add_service(services.timers.clone())
            .add_service(services.sinks.clone())
    };
    let tcp_incoming = acceptor.incoming(listeners.grpc);
    let tcp = async {
        match tls {
            Some(tls) => {
                let tls_incoming =
                    tls_incoming(tcp_incoming, tls, config.handshake_timeout, metrics.clone());
                router()
                    .serve_with_incoming_shutdown(tls_incoming, stopped(stop_signal.clone()))
                    .await
            }
            None => {
                router()
                    .serve_with_incoming_shutdown(tcp_incoming, stopped(stop_signal.clone()))
                    .await
            }
        }
    };
    // The Unix socket is local and guarded by its file mode: no TLS there.
    let unix_router = router();
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
