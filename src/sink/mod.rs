//! Push delivery: a namespace may have a sink, an HTTP endpoint tickd POSTs each of its
//! expirations to, or a NATS JetStream subject or Redis stream it adds each to, instead
//! of (or beside) clients holding a Subscribe stream open.
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
//! resolved address of each one; [`body`] writes what a push carries; [`http`] makes the
//! POST and [`outcome`] reads the answer; [`nats`] publishes to JetStream and [`redis`]
//! adds to a stream, each over one connection per sink that [`kept`] keeps; [`circuit`]
//! paces retries and pauses a sink that keeps failing.

pub(crate) mod allow;
mod body;
mod circuit;
mod client;
pub(crate) mod connect;
mod http;
mod kept;
mod nats;
mod outcome;
mod pusher;
mod redis;
mod spec;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::domain::Expirations;
use crate::metrics::Metrics;
use allow::SinkAllow;
pub use spec::SinkSpec;

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
}

impl CheckedSinks {
    /// Refuses a configuration with a namespace given two sinks, a malformed
    /// `--sink-allow`, or a sink whose host resolves only to addresses it does not allow
    /// (that sink would never be connected to). A host that does not resolve yet is
    /// only warned about: a service's name may appear after tickd starts.
    pub(crate) async fn check(config: &SinkConfig) -> Result<Self, SinkError> {
        let allow = Arc::new(SinkAllow::parse(&config.allow).map_err(SinkError::Configuration)?);
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
        Ok(Self {
            config: config.clone(),
            allow,
        })
    }

    /// Starts one pusher per sink over `expirations`.
    pub(crate) fn start(self, expirations: Arc<dyn Expirations>, metrics: &Arc<Metrics>) -> Sinks {
        let (stop, stopping) = watch::channel(false);
        let pushers = self
            .config
            .sinks
            .into_iter()
            .map(|spec| {
                metrics.sinks.announce(&spec.namespace);
                let pusher = Arc::new(pusher::Pusher {
                    shown_as: spec.target.to_string(),
                    sink: client::SinkClient::new(
                        spec.target,
                        self.allow.clone(),
                        self.config.timeout,
                    ),
                    namespace: spec.namespace,
                    expirations: expirations.clone(),
                    circuit: circuit::Circuit::default(),
                    timeout: self.config.timeout,
                    max_in_flight: self.config.max_in_flight,
                    metrics: metrics.clone(),
                });
                tokio::spawn(pusher.run(stopping.clone()))
            })
            .collect();
        Sinks { stop, pushers }
    }
}

/// The running pushers.
pub(crate) struct Sinks {
    stop: watch::Sender<bool>,
    pushers: Vec<JoinHandle<()>>,
}

impl Sinks {
    /// Stops pulling deliveries, lets pushes in flight finish for a moment, and ends.
    /// What is left unacknowledged is delivered again after a restart.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(true);
        for pusher in self.pushers {
            let _ = pusher.await;
        }
    }
}
