//! [`Sinks`]: the running pushers, one per namespace with a sink, kept in step with where
//! the sinks come from: `--sink` (fixed while tickd runs) and the backend's
//! [`SinkStore`] (set through the API). Setting a sink starts its pusher, a new URL
//! replaces it, removing the sink stops it; a stopped pusher's unacknowledged deliveries
//! are delivered again by the backend (to a subscriber, or to the next sink).
//!
//! A change made through this process is written to the store before the pushers change,
//! so one refused or failed changes nothing. When the store is shared by other processes
//! (the replicated backend), the registry reads it again every [`FOLLOW_EVERY`] and makes
//! its pushers match, so a sink set through one replica pushes from every replica.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::client::SinkClient;
use super::pace::SinkRate;
use super::signing::Signing;
use super::spec::{masked, SinkSpec, SinkTarget};
use super::stored::StoredLine;
use crate::domain::{SinkStore, TimerError};

mod follow;
mod running;

pub(crate) use running::Common;
use running::Running;

/// How often a registry over a shared store reads it again.
pub(crate) const FOLLOW_EVERY: Duration = Duration::from_secs(1);

/// Where a namespace's sink comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// `--sink`.
    Flag,
    /// Set through the API, kept in the backend's store.
    Api,
}

/// A sink as it may be shown: its URL without credentials.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SinkView {
    pub(crate) namespace: String,
    pub(crate) url: String,
    pub(crate) origin: Origin,
    /// Paused (PauseSink): no push leaves until it is resumed.
    pub(crate) paused: bool,
    /// The rate set (`--sink-rate` or SetSink); None if unlimited.
    pub(crate) rate: Option<SinkRate>,
    /// Its pushes are signed (`--sink-secret-file`, or secrets given in SetSink).
    pub(crate) signed: bool,
}

/// What SetSink does with a sink's signing secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Secrets {
    /// Those given before stay (none: `--sink-secret-file`'s).
    Keep,
    /// Those given before are forgotten.
    Clear,
    /// These, checked, replace them.
    Given(Vec<String>),
}

/// How a running sink is doing. The counts are this process's pushes to the namespace's
/// sink since it started, as `tickd_sink_pushes` counts them.
#[derive(Debug, Clone)]
pub(crate) struct SinkState {
    pub(crate) sink: SinkView,
    /// 0 closed, 1 open, 2 half open.
    pub(crate) circuit: i64,
    /// The pace the sink's own slow-downs (429) hold it to now; None if not slowed.
    pub(crate) slowed: Option<f64>,
    pub(crate) in_flight: u64,
    pub(crate) delivered: u64,
    pub(crate) retry: u64,
    pub(crate) rejected: u64,
    pub(crate) unreachable: u64,
    pub(crate) slowed_pushes: u64,
    /// Expirations of the namespace waiting to be pushed (None: the backend could not
    /// count them).
    pub(crate) waiting: Option<u64>,
    pub(crate) last_error: Option<String>,
}

struct Registry {
    common: Common,
    store: Arc<dyn SinkStore>,
    /// The namespaces `--sink` gives a sink: the API cannot change those.
    flagged: BTreeSet<String>,
    /// The pushers running, by namespace. Held across a change's write to the store, so
    /// that changes (and the follower's rounds) apply one at a time, in order.
    running: tokio::sync::Mutex<BTreeMap<String, Running>>,
    /// Set once [`Sinks::stop`] began: no pusher starts after it.
    stopped: AtomicBool,
}

/// The sinks running in this process, and the way to change them (see the module's docs).
/// Clones share them.
#[derive(Clone)]
pub(crate) struct Sinks {
    registry: Arc<Registry>,
    /// Ends the follower (see [`Sinks::stop`]).
    stop_following: watch::Sender<bool>,
    follower: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl Sinks {
    /// Starts a pusher for each sink of `--sink` (with its client, made when the flag
    /// was checked), and for each kept in `store`; follows the store if it is shared.
    pub(crate) async fn start(
        common: Common,
        flagged_sinks: Vec<(SinkSpec, SinkClient, Option<SinkRate>)>,
        store: Arc<dyn SinkStore>,
    ) -> Sinks {
        let mut running = BTreeMap::new();
        let mut flagged = BTreeSet::new();
        for (SinkSpec { namespace, target }, client, rate) in flagged_sinks {
            flagged.insert(namespace.clone());
            let shown = target.to_string();
            // Paused until the store is read: it may say the sink was paused.
            let settings = StoredLine {
                url: None,
                paused: true,
                rate,
                secrets: Vec::new(),
            };
            let pusher = common.start(namespace.clone(), client, shown, settings);
            running.insert(namespace, pusher);
        }
        let registry = Arc::new(Registry {
            common,
            store,
            flagged,
            running: tokio::sync::Mutex::new(running),
            stopped: AtomicBool::new(false),
        });
        // The follower reads them again if this fails; with a local store it cannot.
        registry.read_and_follow().await;
        let (stop_following, stopping) = watch::channel(false);
        let follower = registry
            .store
            .shared()
            .then(|| tokio::spawn(registry.clone().keep_following(stopping)));
        Sinks {
            registry,
            stop_following,
            follower: Arc::new(Mutex::new(follower)),
        }
    }

    /// Sets `namespace`'s sink to `url` at `rate` (a new one, or a new URL or rate for
    /// it), with `secrets`: refused, and nothing kept, for a URL that does not parse or
    /// that `--sink-allow` refuses, for a namespace `--sink` gives a sink, and past the
    /// most sinks. A new rate alone applies to the running pusher at once. What the call
    /// does not set (the pause, secrets kept) is read from the store, not from this
    /// process's copy, so a change another replica made a moment ago stays. True if it
    /// changed.
    pub(crate) async fn set(
        &self,
        namespace: String,
        url: String,
        rate: Option<SinkRate>,
        secrets: Secrets,
    ) -> Result<(SinkView, bool), TimerError> {
        let registry = &self.registry;
        let target = SinkTarget::parse(&url).map_err(|why| TimerError::invalid("url", why))?;
        if let Secrets::Given(secrets) = &secrets {
            Signing::given(secrets).map_err(|why| TimerError::invalid("secrets", why))?;
        }
        registry.refuse_flagged(&namespace)?;
        match registry
            .common
            .allow
            .allowed_addresses(target.host(), target.port())
            .await
        {
            Ok(_) => {}
            Err(refused) if !refused.is_retryable() => {
                return Err(TimerError::FailedPrecondition(format!("url: {refused}")))
            }
            // A name that does not resolve yet may later, as for `--sink`; every
            // connection is checked anyway.
            Err(error) => warn!(%namespace, %error, "a sink's host does not resolve yet"),
        }
        let shown_as = target.to_string();
        let client = registry
            .common
            .client(target)
            .map_err(|why| TimerError::invalid("url", why))?;
        let mut running = registry.running.lock().await;
        if registry.stopped.load(Ordering::Acquire) {
            return Err(TimerError::stopped());
        }
        // A paused sink given a new URL stays paused; one whose entry this tickd cannot
        // read is refused (setting it here would drop its pause and secrets).
        let kept = match registry.stored_entry(&namespace).await? {
            Some(Err(why)) => return Err(unreadable(&namespace, &why)),
            kept => kept.and_then(Result::ok),
        };
        let line = StoredLine {
            url: Some(url.clone()),
            paused: kept.as_ref().is_some_and(|kept| kept.paused),
            rate,
            secrets: match secrets {
                Secrets::Given(secrets) => secrets,
                Secrets::Clear => Vec::new(),
                Secrets::Keep => kept.map(|kept| kept.secrets).unwrap_or_default(),
            },
        };
        // Written even when unchanged here: another replica may have removed it since.
        registry
            .store
            .put(namespace.clone(), line.line().unwrap_or_default())
            .await?;
        if let Some(current) = running.get(&namespace) {
            // New secrets make a new pusher, as a new URL does; a new rate alone does not.
            if current.stored_url.as_deref() == Some(url.as_str())
                && current.stored_secrets == line.secrets
            {
                let changed = current.pusher.pace.rate() != rate;
                current.pusher.pace.set_rate(rate);
                current.pusher.mark_paused(line.paused);
                return Ok((current.view(), changed));
            }
        }
        let started = registry
            .common
            .start(namespace.clone(), client, shown_as, line);
        let view = started.view();
        let replaced = running.insert(namespace, started);
        // Stopped outside the lock (its pushes in flight may take seconds to finish), so
        // that other changes, the follower and SinkStatus do not wait for it.
        drop(running);
        if let Some(replaced) = replaced {
            replaced.stop().await;
        }
        Ok((view, true))
    }

    /// `namespace`'s sink: from `--sink`, or as the store keeps it. NOT_FOUND if none.
    pub(crate) async fn get(&self, namespace: &str) -> Result<SinkView, TimerError> {
        let registry = &self.registry;
        if registry.flagged.contains(namespace) {
            if let Some(running) = registry.running.lock().await.get(namespace) {
                return Ok(running.view());
            }
        }
        let stored = registry.store.load().await?;
        stored
            .get(namespace)
            .and_then(|line| registry.kept_view(namespace, line))
            .ok_or_else(|| no_sink(namespace))
    }

    /// Every sink whose namespace `shown` lets through, by namespace: `--sink`'s as they
    /// run here, the rest as the store keeps them (set through any replica).
    pub(crate) async fn list(
        &self,
        shown: impl Fn(&str) -> bool,
    ) -> Result<Vec<SinkView>, TimerError> {
        let registry = &self.registry;
        let stored = registry.store.load().await?;
        let mut views: BTreeMap<String, SinkView> = stored
            .iter()
            .filter(|(namespace, _)| shown(namespace) && !registry.flagged.contains(*namespace))
            .filter_map(|(namespace, line)| {
                let view = registry.kept_view(namespace, line)?;
                Some((namespace.clone(), view))
            })
            .collect();
        let running = registry.running.lock().await;
        for namespace in registry.flagged.iter().filter(|namespace| shown(namespace)) {
            if let Some(flagged) = running.get(namespace) {
                views.insert(namespace.clone(), flagged.view());
            }
        }
        Ok(views.into_values().collect())
    }

    /// Pauses (or resumes) `namespace`'s sink, one of `--sink` too: kept in the store
    /// first, so that it holds across restarts (and on every replica), then applied to
    /// the pusher; a pause is answered once no push of it is under way here. Only the
    /// entry's pause changes: its URL, rate and secrets are as the store has them (another
    /// replica may have changed them a moment ago), and a `--sink` namespace that also
    /// has a sink kept from the API keeps it (the pause is the namespace's). NOT_FOUND if
    /// the namespace has no sink running here. True if it changed.
    pub(crate) async fn set_paused(
        &self,
        namespace: &str,
        paused: bool,
    ) -> Result<(SinkView, bool), TimerError> {
        let registry = &self.registry;
        let running = registry.running.lock().await;
        if registry.stopped.load(Ordering::Acquire) {
            return Err(TimerError::stopped());
        }
        let current = running.get(namespace).ok_or_else(|| no_sink(namespace))?;
        let mut entry = match registry.stored_entry(namespace).await? {
            Some(Ok(entry)) => entry,
            Some(Err(why)) => return Err(unreadable(namespace, &why)),
            None if current.origin == Origin::Flag => StoredLine {
                url: None,
                paused,
                rate: None,
                secrets: Vec::new(),
            },
            // Removed through another replica a moment ago.
            None => return Err(no_sink(namespace)),
        };
        entry.paused = paused;
        match entry.line() {
            Some(line) => registry.store.put(namespace.to_owned(), line).await?,
            None => {
                registry.store.remove(namespace.to_owned()).await?;
            }
        }
        // Marked under the lock, so that a change after this one (a resume, a new URL)
        // is applied after it, never undone by it.
        let changed = current.pusher.mark_paused(paused);
        let pusher = current.pusher.clone();
        let view = current.view();
        // Waited for outside the lock: the pushes under way may take a while to end.
        drop(running);
        if paused {
            pusher.until_not_pulling().await;
        }
        info!(%namespace, paused, "a sink's pause changed");
        Ok((view, changed))
    }

    /// Removes `namespace`'s sink set through the API and stops its pusher. NOT_FOUND if
    /// it has none; refused for a namespace `--sink` gives a sink.
    pub(crate) async fn remove(&self, namespace: &str) -> Result<(), TimerError> {
        let registry = &self.registry;
        registry.refuse_flagged(namespace)?;
        let mut running = registry.running.lock().await;
        if registry.stopped.load(Ordering::Acquire) {
            return Err(TimerError::stopped());
        }
        let removed = registry.store.remove(namespace.to_owned()).await?;
        let stopped = running.remove(namespace);
        if stopped.is_some() {
            registry.common.forget(namespace);
        }
        drop(running);
        if let Some(stopped) = stopped {
            stopped.stop().await;
        }
        if removed {
            Ok(())
        } else {
            Err(no_sink(namespace))
        }
    }

    /// The sinks running here that `shown` lets through, by namespace.
    pub(crate) async fn status(&self, shown: impl Fn(&str) -> bool) -> Vec<SinkState> {
        let mut states: Vec<SinkState> = {
            let running = self.registry.running.lock().await;
            running
                .iter()
                .filter(|(namespace, _)| shown(namespace))
                .map(|(_, running)| self.registry.common.state(running))
                .collect()
        };
        let namespaces = states.iter().map(|state| state.sink.namespace.clone());
        let waiting = self
            .registry
            .common
            .expirations
            .waiting(namespaces.collect());
        // Counted outside the lock: a replica's count is a statement. A backend that
        // cannot count leaves it unknown rather than failing the status.
        match waiting.await {
            Ok(counts) => {
                for (state, waiting) in states.iter_mut().zip(counts) {
                    state.waiting = Some(waiting);
                }
            }
            Err(error) => warn!(%error, "counting the expirations waiting for sinks failed"),
        }
        states
    }

    /// Stops the follower and every pusher. What is left unacknowledged is delivered
    /// again (after a restart, or by another replica).
    pub(crate) async fn stop(self) {
        self.registry.stopped.store(true, Ordering::Release);
        let _ = self.stop_following.send(true);
        let follower = self
            .follower
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(follower) = follower {
            let _ = follower.await;
        }
        let running = std::mem::take(&mut *self.registry.running.lock().await);
        // Every pusher stops pulling at once; then each lets its pushes finish.
        for pusher in running.values() {
            let _ = pusher.stop.send(true);
        }
        for (_, pusher) in running {
            pusher.stop().await;
        }
    }
}

impl Registry {
    /// A sink set through the API as its store entry `line` shows it; None for an entry
    /// with no URL (a `--sink` sink's pause) or one this tickd cannot read.
    fn kept_view(&self, namespace: &str, line: &str) -> Option<SinkView> {
        let line = StoredLine::parse(line).ok()?;
        let url = line.url.as_deref()?;
        Some(SinkView {
            namespace: namespace.to_owned(),
            url: masked(url),
            origin: Origin::Api,
            paused: line.paused,
            rate: line.rate,
            signed: !line.secrets.is_empty()
                || self.common.security.signing_for(namespace).is_some(),
        })
    }

    /// `namespace`'s entry as the store has it now: None if it has none, an error (naming
    /// no secret) if this tickd cannot read it.
    async fn stored_entry(
        &self,
        namespace: &str,
    ) -> Result<Option<Result<StoredLine, String>>, TimerError> {
        let stored = self.store.load().await?;
        Ok(stored.get(namespace).map(|line| StoredLine::parse(line)))
    }

    fn refuse_flagged(&self, namespace: &str) -> Result<(), TimerError> {
        if self.flagged.contains(namespace) {
            return Err(TimerError::FailedPrecondition(format!(
                "namespace {namespace:?}: its sink is given by --sink, which only a restart \
                 of tickd changes"
            )));
        }
        Ok(())
    }
}

/// A change refused because the namespace's entry was written by a tickd that knows
/// settings this one does not: changing it here would drop them.
fn unreadable(namespace: &str, why: &str) -> TimerError {
    TimerError::FailedPrecondition(format!(
        "namespace {namespace:?}: its sink is kept with settings this tickd cannot read \
         ({why}); change it through the tickd that set it"
    ))
}

fn no_sink(namespace: &str) -> TimerError {
    TimerError::NotFound(format!("namespace {namespace:?} has no sink"))
}
