//! A running pusher and what every pusher is made with: how one is started for a sink
//! (its client, signing, pace and pause), shown (its view, credentials masked), counted
//! (its state, from the sink metrics) and stopped.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Origin, SinkState, SinkView};
use crate::domain::Expirations;
use crate::metrics::sinks::{OutcomeLabels, SinkLabels, OUTCOMES};
use crate::metrics::Metrics;
use crate::sink::allow::SinkAllow;
use crate::sink::circuit::Circuit;
use crate::sink::client::SinkClient;
use crate::sink::pace::Pace;
use crate::sink::pusher::Pusher;
use crate::sink::signing::Signing;
use crate::sink::spec::{masked, SinkTarget};
use crate::sink::stored::StoredLine;
use crate::sink::tls::SinkSecurity;

/// What every pusher is made with.
pub(crate) struct Common {
    pub(crate) allow: Arc<SinkAllow>,
    pub(crate) security: Arc<SinkSecurity>,
    pub(crate) timeout: Duration,
    pub(crate) max_in_flight: usize,
    pub(crate) expirations: Arc<dyn Expirations>,
    pub(crate) metrics: Arc<Metrics>,
}

/// One running pusher.
pub(super) struct Running {
    pub(super) origin: Origin,
    /// The URL as kept in the store (credentials and all), for a sink set through the
    /// API: a URL read again unchanged leaves its pusher alone.
    pub(super) stored_url: Option<String>,
    /// The signing secrets SetSink gave with it (never shown).
    pub(super) stored_secrets: Vec<String>,
    /// The URL as it may be shown: its credentials as `***@`.
    pub(super) shown: String,
    pub(super) pusher: Arc<Pusher>,
    pub(super) stop: watch::Sender<bool>,
    pub(super) task: JoinHandle<()>,
}

impl Running {
    pub(super) fn view(&self) -> SinkView {
        SinkView {
            namespace: self.pusher.namespace.clone(),
            url: self.shown.clone(),
            origin: self.origin,
            paused: self.pusher.is_paused(),
            rate: self.pusher.pace.rate(),
            signed: self.pusher.signing.is_some(),
        }
    }

    /// Stops pulling deliveries and lets the pushes in flight finish for a moment.
    pub(super) async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

impl Common {
    /// A client for `target` (refused for TLS settings it cannot use).
    pub(super) fn client(&self, target: SinkTarget) -> Result<SinkClient, String> {
        SinkClient::new(
            target,
            self.allow.clone(),
            self.timeout,
            self.security.clone(),
        )
    }

    /// Starts a pusher for `namespace` over `client`, shown in logs as `shown_as` (its
    /// target, no credentials), with `settings`: a sink set through the API has its URL
    /// there, one of `--sink` none.
    pub(super) fn start(
        &self,
        namespace: String,
        client: SinkClient,
        shown_as: String,
        settings: StoredLine,
    ) -> Running {
        let StoredLine {
            url: stored_url,
            paused,
            rate,
            secrets: stored_secrets,
        } = settings;
        let origin = if stored_url.is_some() {
            Origin::Api
        } else {
            Origin::Flag
        };
        let series = self.metrics.sinks.announce(&namespace);
        // A URL given whole (through the API) is shown as given, its credentials
        // masked; `--sink`'s as its target shows it.
        let shown = stored_url
            .as_deref()
            .map_or_else(|| shown_as.clone(), masked);
        let (stop, stopping) = watch::channel(false);
        // Secrets given in SetSink (checked before they were kept) win over the file's.
        let signing = if stored_secrets.is_empty() {
            self.security.signing_for(&namespace)
        } else {
            Signing::given(&stored_secrets).ok().map(Arc::new)
        };
        let pusher = Arc::new(Pusher {
            shown_as,
            sink: client,
            namespace,
            expirations: self.expirations.clone(),
            circuit: Circuit::default(),
            timeout: self.timeout,
            max_in_flight: self.max_in_flight,
            series,
            room: tokio::sync::Semaphore::new(self.max_in_flight),
            signing,
            paused: watch::Sender::new(paused),
            pace: Pace::new(rate),
            pulling: watch::Sender::new(false),
            last_error: Mutex::default(),
        });
        let task = tokio::spawn(pusher.clone().run(stopping));
        Running {
            origin,
            stored_url,
            stored_secrets,
            shown,
            pusher,
            stop,
            task,
        }
    }

    /// Drops a removed sink's series from `/metrics`: a removed sink must not look stuck
    /// (an open circuit, pushes in flight) for ever.
    pub(super) fn forget(&self, namespace: &str) {
        let sinks = &self.metrics.sinks;
        for outcome in OUTCOMES {
            sinks.pushes.remove(&OutcomeLabels {
                namespace: namespace.to_owned(),
                outcome,
            });
        }
        let labels = SinkLabels {
            namespace: namespace.to_owned(),
        };
        sinks.push_seconds.remove(&labels);
        sinks.in_flight.remove(&labels);
        sinks.circuit.remove(&labels);
    }

    pub(super) fn state(&self, running: &Running) -> SinkState {
        let sinks = &self.metrics.sinks;
        let namespace = &running.pusher.namespace;
        let count = |outcome: &'static str| {
            sinks
                .pushes
                .get_or_create(&OutcomeLabels {
                    namespace: namespace.clone(),
                    outcome,
                })
                .get()
        };
        let in_flight = sinks
            .in_flight
            .get_or_create(&SinkLabels {
                namespace: namespace.clone(),
            })
            .get();
        SinkState {
            sink: running.view(),
            circuit: running.pusher.circuit.gauge_value(),
            slowed: running.pusher.pace.slowed(),
            in_flight: u64::try_from(in_flight).unwrap_or(0),
            delivered: count("delivered"),
            retry: count("retry"),
            rejected: count("rejected"),
            unreachable: count("unreachable"),
            slowed_pushes: count("slowed"),
            waiting: None,
            last_error: running
                .pusher
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }
}
