//! Push delivery: a namespace may have a sink, an HTTP endpoint tickd POSTs each of its
//! expirations to, a gRPC server it calls `tickd.v1.Sink/Deliver` on, or a NATS JetStream
//! subject or Redis stream it adds each to, instead of (or beside) clients holding a
//! Subscribe stream open.
//!
//! A sink is tickd's own subscriber of its namespace ([`pusher`]), over the backend's
//! [`Expirations`] like the API's streams: it has their guarantees (at least once,
//! attempts and the dead list, Redrive, delivery ids and attempts across restarts,
//! buffering within the namespace's limits) on either backend, with no second delivery
//! path to keep in step. Stream subscribers of the same namespace share its expirations
//! with the sink, each expiration going to one of them, as subscribers share.
//!
//! Where an expiration goes: [`spec`] reads `--sink NAMESPACE=URL`; [`allow`] and
//! [`connect`] keep every connection to addresses `--sink-allow` allows, checked on the
//! resolved address of each one; [`tls`] adds TLS and the bearer token; [`body`] writes
//! what a push carries; [`http`] makes the POST and [`grpc`] the call, [`outcome`] reads
//! their answers; [`nats`] publishes to JetStream and [`redis`] adds to a stream, each over
//! one connection per sink that [`kept`] keeps; [`circuit`] paces retries and pauses a sink
//! that keeps failing.
//!
//! Which sinks run: those of `--sink`, fixed while tickd runs, and those set through the
//! API (`tickd.v1.Sinks`), which the backend keeps durably; [`registry`] starts, replaces
//! and stops their pushers as they change, and reports how each is doing.

pub(crate) mod allow;
mod body;
mod broker_url;
pub(crate) mod circuit;
mod client;
pub(crate) mod connect;
mod grpc;
mod http;
mod kept;
mod nats;
pub(crate) mod outcome;
pub(crate) mod pace;
pub(crate) mod pusher;
mod redis;
mod registry;
mod signing;
mod spec;
mod stored;
mod tls;
mod watched_file;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tracing::warn;

use crate::domain::{Expirations, SinkStore};
use crate::metrics::Metrics;
use allow::SinkAllow;
pub use pace::{SinkRate, SinkRateFlag};
pub(crate) use registry::{Origin, Secrets, SinkState, SinkView, Sinks};
pub use signing::SecretFileFlag;
pub use spec::{SinkSpec, SinkSpecs};

/// The sinks of the configuration, with what every sink shares.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    pub sinks: Vec<SinkSpec>,
    /// `--sink-allow`: empty allows loopback only.
    pub allow: Vec<String>,
    /// How long a push waits for the sink's answer.
    pub timeout: Duration,
    /// Pushes to one sink awaiting an answer (or held while it is unreachable), at most.
    pub max_in_flight: usize,
    /// `--sink-ca`: trusted beside the system's roots by https:// and grpcs:// sinks.
    pub ca_file: Option<PathBuf>,
    /// `--sink-client-cert` and `--sink-client-key`: presented to sinks asking for one.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    /// `--sink-token-file`: sent as `Authorization: Bearer <token>` to every sink.
    pub token_file: Option<PathBuf>,
    /// `--sink-secret-file NAMESPACE=PATH`: the secrets a namespace's pushes are signed
    /// with (see `signing`).
    pub secret_files: Vec<(String, PathBuf)>,
    /// `--sink-rate NAMESPACE=RATE`: the rate of a `--sink` sink (see `pace`).
    pub rates: Vec<SinkRateFlag>,
}

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("{0}")]
    Configuration(String),
}

/// Sinks checked against `--sink-allow`, ready to start once the backend is.
pub(crate) struct CheckedSinks {
    config: SinkConfig,
    allow: Arc<SinkAllow>,
    security: Arc<tls::SinkSecurity>,
    /// The clients of `config.sinks`, in their order.
    clients: Vec<client::SinkClient>,
}

impl CheckedSinks {
    /// Refuses a configuration with a namespace given two sinks, a malformed
    /// `--sink-allow`, or a sink whose host resolves only to addresses it does not allow
    /// (that sink would never be connected to). A host that does not resolve yet is
    /// only warned about: a service's name may appear after tickd starts. The TLS files and
    /// the token file are read here, and refused naming their flag if they are unusable.
    pub(crate) async fn check(config: &SinkConfig) -> Result<Self, SinkError> {
        let allow = Arc::new(SinkAllow::parse(&config.allow).map_err(SinkError::Configuration)?);
        let security = Arc::new(tls::SinkSecurity::load(config)?);
        for (index, sink) in config.sinks.iter().enumerate() {
            if config.sinks[..index]
                .iter()
                .any(|earlier| earlier.namespace == sink.namespace)
            {
                return Err(SinkError::Configuration(format!(
                    "--sink: namespace {:?} is given two sinks",
                    sink.namespace
                )));
            }
            let (host, port) = (sink.target.host(), sink.target.port());
            match allow.allowed_addresses(host, port).await {
                Ok(_) => {}
                Err(refused) if !refused.is_retryable() => {
                    return Err(SinkError::Configuration(format!(
                        "--sink for namespace {:?}: {refused}",
                        sink.namespace
                    )))
                }
                Err(error) => {
                    warn!(namespace = %sink.namespace, %error, "a sink's host does not resolve yet");
                }
            }
        }
        for (index, rate) in config.rates.iter().enumerate() {
            let namespace = &rate.namespace;
            if !config.sinks.iter().any(|sink| &sink.namespace == namespace) {
                return Err(SinkError::Configuration(format!(
                    "--sink-rate names namespace {namespace:?}, which --sink gives no sink \
                     (a sink set through the API takes its rate in SetSink)"
                )));
            }
            if config.rates[..index]
                .iter()
                .any(|earlier| &earlier.namespace == namespace)
            {
                return Err(SinkError::Configuration(format!(
                    "--sink-rate: namespace {namespace:?} is given two rates"
                )));
            }
        }
        let clients = config
            .sinks
            .iter()
            .map(|sink| {
                client::SinkClient::new(
                    sink.target.clone(),
                    allow.clone(),
                    config.timeout,
                    security.clone(),
                )
                .map_err(|error| {
                    SinkError::Configuration(format!(
                        "--sink for namespace {:?}: {error}",
                        sink.namespace
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            config: config.clone(),
            allow,
            security,
            clients,
        })
    }

    /// Starts one pusher per sink of `--sink` and per sink kept in `store` (set through
    /// the API), over `expirations`.
    pub(crate) async fn start(
        self,
        expirations: Arc<dyn Expirations>,
        store: Arc<dyn SinkStore>,
        metrics: &Arc<Metrics>,
    ) -> Sinks {
        let common = registry::Common {
            allow: self.allow,
            security: self.security,
            timeout: self.config.timeout,
            max_in_flight: self.config.max_in_flight,
            expirations,
            metrics: metrics.clone(),
        };
        let rates = self.config.rates;
        let flagged = self
            .config
            .sinks
            .into_iter()
            .zip(self.clients)
            .map(|(sink, client)| {
                let rate = rates
                    .iter()
                    .find(|rate| rate.namespace == sink.namespace)
                    .map(|rate| rate.rate);
                (sink, client, rate)
            })
            .collect();
        Sinks::start(common, flagged, store).await
    }
}
