//! The registry kept in step with its store: read at start, and again every
//! [`FOLLOW_EVERY`] when the store is shared, so that a sink set, paused, resumed or
//! removed through one replica is so on every replica, and a pause holds across restarts.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::watch;
use tracing::{info, warn};

use super::{Origin, Registry, Running, FOLLOW_EVERY};
use crate::domain::StoredSinks;
use crate::sink::signing::Signing;
use crate::sink::spec::SinkTarget;
use crate::sink::stored::StoredLine;

impl Registry {
    /// Reads the store and makes the pushers match it. The store is read under the lock
    /// that every change holds across its write: a snapshot read before a change that was
    /// answered can never be applied after it (and undo it).
    pub(super) async fn read_and_follow(&self) {
        let mut running = self.running.lock().await;
        let stopping = match self.store.load().await {
            Ok(stored) => self.follow(&mut running, stored),
            Err(error) => {
                warn!(%error, "reading the sinks set at run time failed; trying again");
                Vec::new()
            }
        };
        drop(running);
        for pusher in stopping {
            pusher.stop().await;
        }
    }

    /// Makes the pushers match `stored`: starts the sinks set through the API that are
    /// new, replaces those whose URL changed, sets their rates, pauses or resumes every
    /// sink (`--sink`'s too) as its entry says, and answers those no longer kept or replaced, to be
    /// stopped once the lock is let go.
    fn follow(&self, running: &mut BTreeMap<String, Running>, stored: StoredSinks) -> Vec<Running> {
        let mut stopping = Vec::new();
        if self.stopped.load(Ordering::Acquire) {
            return stopping;
        }
        let mut entries = BTreeMap::new();
        let mut unreadable = BTreeSet::new();
        for (namespace, line) in stored {
            match StoredLine::parse(&line) {
                Ok(entry) => {
                    entries.insert(namespace, entry);
                }
                Err(why) => {
                    warn!(%namespace, why, "a sink kept in the store does not parse: left alone");
                    unreadable.insert(namespace);
                }
            }
        }
        // A sink whose entry this tickd cannot read (a newer one wrote it) is not gone:
        // its pusher goes on as it was.
        let gone: Vec<String> = running
            .iter()
            .filter(|(namespace, running)| {
                running.origin == Origin::Api
                    && !unreadable.contains(namespace.as_str())
                    && entries
                        .get(namespace.as_str())
                        .is_none_or(|entry| entry.url.is_none())
            })
            .map(|(namespace, _)| namespace.clone())
            .collect();
        for namespace in gone {
            if let Some(stopped) = running.remove(&namespace) {
                info!(%namespace, "a sink was removed: its pusher stops");
                self.common.forget(&namespace);
                stopping.push(stopped);
            }
        }
        // A `--sink` sink with no entry has no pause kept: it pushes.
        for namespace in self.flagged.difference(&unreadable) {
            // (One whose entry this tickd cannot read keeps the pause it has.)
            let paused = entries.get(namespace).is_some_and(|entry| entry.paused);
            if let Some(flagged) = running.get(namespace) {
                flagged.pusher.mark_paused(paused);
            }
        }
        for (namespace, entry) in entries {
            let Some(url) = entry.url.clone() else {
                continue;
            };
            if self.flagged.contains(&namespace) {
                // `--sink` wins; the kept sink comes back if the flag is dropped.
                continue;
            }
            if let Some(current) = running.get(&namespace) {
                if current.stored_url.as_deref() == Some(url.as_str())
                    && current.stored_secrets == entry.secrets
                {
                    current.pusher.mark_paused(entry.paused);
                    if current.pusher.pace.rate() != entry.rate {
                        current.pusher.pace.set_rate(entry.rate);
                    }
                    continue;
                }
            }
            if !entry.secrets.is_empty() {
                if let Err(why) = Signing::given(&entry.secrets) {
                    warn!(%namespace, why, "a sink kept in the store has secrets it cannot sign with: not started");
                    continue;
                }
            }
            let target = match SinkTarget::parse(&url) {
                Ok(target) => target,
                Err(why) => {
                    warn!(%namespace, why, "a sink kept in the store does not parse: not started");
                    continue;
                }
            };
            let shown_as = target.to_string();
            let client = match self.common.client(target) {
                Ok(client) => client,
                Err(why) => {
                    warn!(%namespace, why, "a sink kept in the store cannot be made: not started");
                    continue;
                }
            };
            let started = self
                .common
                .start(namespace.clone(), client, shown_as, entry);
            stopping.extend(running.insert(namespace, started));
        }
        stopping
    }

    /// Reads the shared store every [`FOLLOW_EVERY`] until stopped.
    pub(super) async fn keep_following(self: Arc<Self>, mut stopping: watch::Receiver<bool>) {
        let mut every = tokio::time::interval(FOLLOW_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stopping.wait_for(|stop| *stop) => return,
                _ = every.tick() => {}
            }
            self.read_and_follow().await;
        }
    }
}
