//! Wires the pieces together and serves them: [`run`] is the whole daemon, given its
//! listeners and a future that resolves when it should stop.

use std::future::Future;
use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tower::limit::GlobalConcurrencyLimitLayer;
use tracing::{info, warn};

use crate::api::auth::{Authenticator, Tokens};
use crate::api::backend::{Deliveries, Timers};
use crate::api::convert::Limits;
use crate::api::TimersService;
use crate::cluster::{ClusterConfig, Replica};
use crate::config::Config;
use crate::delivery::DeliveryHandle;
use crate::metrics::{Metrics, RpcMetricsLayer};
use crate::proto;
use crate::proto::timers_server::TimersServer;
use crate::store::{Store, StoreHandle, SyncMode};
use crate::worker::clock::{Clock, SystemClock};
use crate::worker::journal::Journal;
use crate::worker::table::{Expiration, TimerTable};
use crate::worker::Worker;

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
    let (stopping, stop_signal) = watch::channel(false);
    let limits = Limits {
        max_payload_bytes: config.max_payload_bytes,
        max_batch: config.max_batch,
        ..Limits::default()
    };
    let timers = TimersServer::new(TimersService::new(
        backend.timers(),
        backend.deliveries(),
        limits,
        stop_signal.clone(),
    ))
    .max_decoding_message_size(max_message_bytes(config));
    let timers = InterceptedService::new(timers, Authenticator::new(tokens));
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<TimersServer<TimersService>>()
        .await;
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
    // Past the limit, calls are refused at once with RESOURCE_EXHAUSTED instead of queueing.
    let overload = tower::ServiceBuilder::new()
        .layer(RpcMetricsLayer::new(metrics.clone()))
        .load_shed()
        .layer(GlobalConcurrencyLimitLayer::new(
            config.max_concurrent_calls,
        ));
    let router = |tls: Option<ServerTlsConfig>| -> Result<_, ServerError> {
        let mut builder = Server::builder();
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
        // Without TCP_NODELAY small answers wait for Nagle's algorithm (tens of ms).
        TcpIncoming::from(listeners.grpc).with_nodelay(Some(true)),
        stopped(stop_signal.clone()),
    );
    // The Unix socket is local and guarded by its file mode: no TLS there.
    let unix_router = router(None)?;
    let unix = async {
        match listeners.unix {
            Some(unix_listener) => {
                unix_router
                    .serve_with_incoming_shutdown(
                        UnixListenerStream::new(unix_listener),
                        stopped(stop_signal.clone()),
                    )
                    .await
            }
            None => Ok(()),
        }
    };
    let health_only = Server::builder().add_service(health.clone());
    let probes = async {
        match listeners.health {
            Some(health_listener) => {
                health_only
                    .serve_with_incoming_shutdown(
                        TcpIncoming::from(health_listener).with_nodelay(Some(true)),
                        stopped(stop_signal.clone()),
                    )
                    .await
            }
            None => Ok(()),
        }
    };
    let serving = async { tokio::try_join!(tcp, unix, probes).map(|_| ()) };
    tokio::pin!(serving);

    tokio::select! {
        result = &mut serving => result?,
        () = shutdown => {
            info!("shutdown requested: draining");
            health_reporter.set_not_serving::<TimersServer<TimersService>>().await;
            let _ = stopping.send(true);
            backend.shutdown();
        }
    }
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
    let pending_timers = backend.stop().await;
    let _ = stop_metrics.send(true);
    info!(pending_timers, "tickd stopped");
    Ok(Stopped {
        pending_timers,
        drain_timed_out,
    })
}

/// The parts that hold timers: a local worker, log and delivery task, or a replica of a
/// shared database.
enum Backend {
    Local {
        worker: Worker<TimerTable>,
        delivery: DeliveryHandle,
        store: Option<(Store, StoreHandle)>,
    },
    Replicated(Box<Replica>),
}

impl Backend {
    fn local(config: &Config, metrics: &Arc<Metrics>) -> Result<Self, ServerError> {
        // The worker must run on the clock the recovery converted deadlines with.
        let clock = SystemClock::new();
        let (table, store, recovered) =
            tokio::task::block_in_place(|| recover(config, clock, metrics))?;
        let store_handle = store.as_ref().map(|(_, handle)| handle.clone());
        let delivery =
            DeliveryHandle::spawn(config.delivery(), store_handle, recovered, metrics.clone());
        let worker = Worker::spawn(table, clock, config.worker(metrics), delivery.fired_sink())
            .map_err(ServerError::Worker)?;
        Ok(Backend::Local {
            worker,
            delivery,
            store,
        })
    }

    async fn replicated(
        config: &Config,
        url: &str,
        metrics: &Arc<Metrics>,
    ) -> Result<Self, ServerError> {
        let cluster_config = ClusterConfig::from_config(config, url)?;
        let replica = Replica::start(cluster_config, metrics.clone()).await?;
        Ok(Backend::Replicated(Box::new(replica)))
    }

    fn timers(&self) -> Timers {
        match self {
            Backend::Local { worker, .. } => Timers::Local(worker.handle()),
            Backend::Replicated(replica) => Timers::Replicated(replica.commands.clone()),
        }
    }

    fn deliveries(&self) -> Deliveries {
        match self {
            Backend::Local { delivery, .. } => Deliveries::Local(delivery.clone()),
            Backend::Replicated(replica) => Deliveries::Replicated(replica.deliveries.clone()),
        }
    }

    /// Ends the subscription streams (graceful shutdown).
    fn shutdown(&self) {
        match self {
            Backend::Local { delivery, .. } => delivery.shutdown(),
            Backend::Replicated(replica) => replica.end_subscriptions(),
        }
    }

    /// Stops everything; returns the timers still pending in this process's wheel.
    async fn stop(self) -> usize {
        match self {
            Backend::Local {
                worker,
                delivery,
                store,
            } => {
                let table = tokio::task::block_in_place(|| worker.stop());
                let pending_timers = table.len();
                drop(table);
                // Every handle on the store must go before it can finish its last commit.
                delivery.close().await;
                if let Some((store, handle)) = store {
                    drop(handle);
                    tokio::task::block_in_place(|| store.join());
                }
                pending_timers
            }
            Backend::Replicated(replica) => replica.stop().await,
        }
    }
}

/// Builds the timer table, replaying the data directory into it unless `--sync none`.
/// Returns the table (journaling), the store, and the expirations to deliver again.
#[allow(clippy::type_complexity)]
fn recover(
    config: &Config,
    clock: SystemClock,
    metrics: &Arc<Metrics>,
) -> Result<(TimerTable, Option<(Store, StoreHandle)>, Vec<Expiration>), ServerError> {
    let mut table = TimerTable::new(config.table(), metrics.clone());
    if config.sync == SyncMode::None {
        return Ok((table, None, Vec::new()));
    }
    let now = clock.now();
    let (store, handle, unsettled) =
        Store::open(&config.data_dir, config.sync, metrics.clone(), |record| {
            table.replay(record, now)
        })?;
    table.attach_journal(Journal::new(
        handle.clone(),
        config.snapshot_after_bytes,
        store.recovered_snapshot_bytes(),
    ));
    let recovered = unsettled
        .into_iter()
        .filter_map(Expiration::recovered)
        .collect();
    info!(
        data_dir = %config.data_dir.display(),
        pending_timers = table.len(),
        "recovered timers"
    );
    Ok((table, Some((store, handle)), recovered))
}

async fn stopped(mut stop_signal: watch::Receiver<bool>) {
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

/// A whole batch of maximal payloads must fit in one message, with room for the framing.
fn max_message_bytes(config: &Config) -> usize {
    let largest_batch = config
        .max_batch
        .saturating_mul(config.max_payload_bytes + 1_024);
    largest_batch.clamp(4 * 1024 * 1024, 256 * 1024 * 1024)
}
