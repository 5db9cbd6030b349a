//! The namespaces alive in one tickd process, whichever part holds them: the worker's
//! table (pending timers) or the delivery task (waiting, in-flight or dead expirations,
//! subscribers, observers). `--max-namespaces` bounds this set and `tickd_namespaces` shows
//! its size.
//!
//! Each part takes a hold on a namespace when it starts keeping state for it; a namespace
//! is live while any hold remains. Only the birth and the end of a namespace touch the set
//! (under its mutex): timers and expirations of a namespace already held never do, so the
//! per-timer paths take no lock.
//!
//! Holds are let go by the delivery task alone. The worker hands its own over, in order,
//! behind the expirations it fired ([`crate::domain::Handoff::Forgotten`]): a
//! namespace therefore cannot drop out of the set while its last expirations are still on
//! their way to delivery (letting another namespace take its place and the set grow past
//! the cap when they arrive), and data keeps flowing one way, worker to delivery.

use std::sync::{Arc, Mutex, MutexGuard};

use prometheus_client::metrics::gauge::Gauge;
use rustc_hash::FxHashMap;

pub(crate) struct LiveNamespaces {
    /// Holds per namespace: one per part keeping state for it (the worker's can count
    /// twice for a moment, when it forgot and re-created the namespace before the delivery
    /// task saw the first handover).
    holds: Mutex<FxHashMap<Arc<str>, u32>>,
    gauge: Gauge,
}

/// A registration would make one namespace more than `--max-namespaces` allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooMany {
    pub(crate) live: usize,
}

impl LiveNamespaces {
    pub(crate) fn new(gauge: Gauge) -> Self {
        Self {
            holds: Mutex::default(),
            gauge,
        }
    }

    /// A hold for a registration: refused if the namespace is not live yet and `max` are
    /// (0: no limit).
    pub(crate) fn try_hold(&self, name: &Arc<str>, max: usize) -> Result<(), TooMany> {
        let mut holds = self.lock();
        if let Some(count) = holds.get_mut(name) {
            *count += 1;
            return Ok(());
        }
        if max > 0 && holds.len() >= max {
            return Err(TooMany { live: holds.len() });
        }
        holds.insert(name.clone(), 1);
        self.gauge.set(holds.len() as i64);
        Ok(())
    }

    /// A hold that is never refused: what was accepted before (recovery, expirations that
    /// fired) must be kept, and a subscription is bounded by the streams a server accepts.
    pub(crate) fn hold(&self, name: &Arc<str>) {
        let mut holds = self.lock();
        *holds.entry(name.clone()).or_insert(0) += 1;
        self.gauge.set(holds.len() as i64);
    }

    pub(crate) fn release(&self, name: &str) {
        let mut holds = self.lock();
        if let Some(count) = holds.get_mut(name) {
            *count -= 1;
            if *count == 0 {
                holds.remove(name);
                self.gauge.set(holds.len() as i64);
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, FxHashMap<Arc<str>, u32>> {
        // The map is consistent after every statement, so a panic elsewhere leaves it usable.
        self.holds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_live_while_any_hold_remains_and_only_new_ones_are_refused() {
        let live = LiveNamespaces::new(Gauge::default());
        let (a, b, c): (Arc<str>, Arc<str>, Arc<str>) = ("a".into(), "b".into(), "c".into());
        live.try_hold(&a, 2).unwrap();
        live.hold(&b);
        assert_eq!(live.try_hold(&c, 2), Err(TooMany { live: 2 }));
        // Already live: a second hold is not a new namespace.
        live.try_hold(&b, 2).unwrap();
        live.release(&b);
        assert_eq!(live.try_hold(&c, 2), Err(TooMany { live: 2 }));
        live.release(&b);
        assert_eq!(live.len(), 1);
        live.try_hold(&c, 2).unwrap();
        assert_eq!(live.gauge.get(), 2);
        // Forced holds pass the cap; no cap at 0.
        live.hold(&b);
        assert_eq!(live.len(), 3);
        live.try_hold(&"d".into(), 0).unwrap();
        assert_eq!(live.gauge.get(), 4);
        // Releasing what is not held changes nothing.
        live.release("unknown");
        assert_eq!(live.len(), 4);
    }
}
