//! The timer table's namespaces: each namespace with pending timers has a slot (the number
//! its timers' records carry, to keep them small), its key index and its
//! `tickd_timers_pending` series.
//!
//! A namespace whose last pending timer left is forgotten once it has stayed so for
//! [`FORGET_AFTER`]: its slot is reused, its series removed, and its hold on the live
//! namespaces handed to the delivery task (see [`crate::local::live_namespaces`]). Waiting first means
//! a namespace that empties and fills again, one timer at a time, is not forgotten and
//! re-created at every timer (each costs a write lock on the metric family a scrape also
//! takes).

use std::collections::VecDeque;
use std::ops::{Index, IndexMut};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use rustc_hash::FxHashMap;

use crate::clock::Clock;
use crate::domain::TimerError;
use crate::local::live_namespaces::LiveNamespaces;
use crate::metrics::Metrics;

/// How long a namespace stays empty before it is forgotten.
pub(crate) const FORGET_AFTER: Duration = Duration::from_secs(1);

/// Namespaces forgotten per sweep at most: removing a metric series takes the family's
/// write lock, so a mass forgetting is spread over several wake-ups instead of stalling
/// the firing of timers.
const FORGET_PER_SWEEP: usize = 4_096;

pub(crate) struct Namespace {
    pub(crate) name: Arc<str>,
    /// Unlike the slot, never reused: page tokens are bound to it, so a token from a
    /// forgotten namespace cannot list the one that reuses its slot.
    pub(crate) number: u64,
    pub(crate) pending: u64,
    pending_gauge: Gauge,
    pub(crate) keys: FxHashMap<Box<str>, u64>,
    /// Waiting in `emptied` to be looked at.
    queued: bool,
}

/// Whether creating a namespace may be refused by `--max-namespaces`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// A registration: refused beyond the limit.
    Checked,
    /// Recovery: what was accepted before comes back, even past a since-lowered limit.
    Restored,
}

pub(crate) struct Namespaces {
    slots: Vec<Option<Namespace>>,
    free: Vec<u32>,
    ids: FxHashMap<Arc<str>, u32>,
    next_number: u64,
    /// Namespaces that lost their last pending timer, with the monotonic time they did,
    /// oldest first.
    emptied: VecDeque<(u64, u32)>,
    /// `--max-namespaces` (0: no limit).
    max: usize,
    /// The namespaces live in the process: the table takes a hold on each it creates,
    /// delivery lets it go (see [`crate::local::live_namespaces`]).
    live: Arc<LiveNamespaces>,
    metrics: Arc<Metrics>,
}

impl Index<u32> for Namespaces {
    type Output = Namespace;
    fn index(&self, slot: u32) -> &Namespace {
        self.slots[slot as usize]
            .as_ref()
            .expect("records point at live namespaces")
    }
}

impl IndexMut<u32> for Namespaces {
    fn index_mut(&mut self, slot: u32) -> &mut Namespace {
        self.slots[slot as usize]
            .as_mut()
            .expect("records point at live namespaces")
    }
}

impl Namespaces {
    /// `clock`: the wall clock the numbers start at.
    pub(crate) fn new(max: usize, metrics: Arc<Metrics>, clock: &dyn Clock) -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            ids: FxHashMap::default(),
            // Numbers also differ from those of an earlier process (whose tokens a client
            // may still hold): they start at the wall-clock time in nanoseconds, further on
            // than any earlier process can have counted.
            next_number: clock.now().unix,
            emptied: VecDeque::new(),
            max,
            live: Arc::new(LiveNamespaces::new(metrics.namespaces.clone())),
            metrics,
        }
    }

    /// The live set, for delivery to share (it lets the table's holds go).
    pub(crate) fn live(&self) -> Arc<LiveNamespaces> {
        self.live.clone()
    }

    pub(crate) fn slot(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    /// The namespace's slot, created if needed. Creating one takes a hold on the live
    /// namespaces first, so a refused registration leaves nothing behind.
    pub(crate) fn intern(&mut self, name: &str, admission: Admission) -> Result<u32, TimerError> {
        if let Some(slot) = self.slot(name) {
            return Ok(slot);
        }
        let name: Arc<str> = Arc::from(name);
        let live = &self.live;
        match admission {
            Admission::Checked => live.try_hold(&name, self.max).map_err(|full| {
                TimerError::ResourceExhausted(format!(
                    "namespace {name:?} would be a new one, and {} namespaces are live already \
                     (--max-namespaces {})",
                    full.live, self.max
                ))
            })?,
            Admission::Restored => live.hold(&name),
        }
        let namespace = Namespace {
            pending_gauge: self.metrics.pending_gauge(&name),
            name: name.clone(),
            number: self.take_number(),
            pending: 0,
            keys: FxHashMap::default(),
            queued: false,
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(namespace);
                slot
            }
            None => {
                self.slots.push(Some(namespace));
                (self.slots.len() - 1) as u32
            }
        };
        self.ids.insert(name, slot);
        Ok(slot)
    }

    /// A number never given before, whose lower half is never `ALL_NAMESPACES`.
    fn take_number(&mut self) -> u64 {
        if self.next_number as u32 == crate::domain::ALL_NAMESPACES {
            self.next_number = self.next_number.wrapping_add(1);
        }
        let number = self.next_number;
        self.next_number = self.next_number.wrapping_add(1);
        number
    }

    /// One more pending timer in the namespace.
    pub(crate) fn add(&mut self, slot: u32, id: u64, key: Option<Box<str>>) {
        let namespace = &mut self[slot];
        namespace.pending += 1;
        namespace.pending_gauge.inc();
        if let Some(key) = key {
            namespace.keys.insert(key, id);
        }
    }

    /// One pending timer fewer; the namespace is queued to be forgotten if that was its
    /// last. `now` is monotonic.
    pub(crate) fn remove(&mut self, slot: u32, key: Option<&str>, now: u64) {
        let namespace = &mut self[slot];
        namespace.pending -= 1;
        namespace.pending_gauge.dec();
        if let Some(key) = key {
            namespace.keys.remove(key);
        }
        self.queue_if_empty(slot, now);
    }

    /// Queues the namespace to be forgotten if it holds no pending timer (also one just
    /// created for a timer that could not be placed after all).
    pub(crate) fn queue_if_empty(&mut self, slot: u32, now: u64) {
        let namespace = &mut self[slot];
        if namespace.pending == 0 && !namespace.queued {
            namespace.queued = true;
            self.emptied.push_back((now, slot));
        }
    }

    /// When [`Self::sweep`] next has work (monotonic), if ever.
    pub(crate) fn next_sweep(&self) -> Option<u64> {
        let forget_after = FORGET_AFTER.as_nanos() as u64;
        self.emptied
            .front()
            .map(|&(emptied_at, _)| emptied_at.saturating_add(forget_after))
    }

    /// Forgets the namespaces empty for [`FORGET_AFTER`] by `now`, handing each name to
    /// `forgotten` (whose hold on the live namespaces the receiver now has to let go).
    pub(crate) fn sweep(&mut self, now: u64, mut forgotten: impl FnMut(Arc<str>)) {
        let forget_after = FORGET_AFTER.as_nanos() as u64;
        let mut budget = FORGET_PER_SWEEP;
        while budget > 0 {
            match self.emptied.front() {
                Some(&(emptied_at, _)) if emptied_at.saturating_add(forget_after) <= now => {}
                _ => return,
            }
            let (_, slot) = self.emptied.pop_front().expect("looked at above");
            let namespace = &mut self[slot];
            namespace.queued = false;
            if namespace.pending > 0 {
                // Filled again meanwhile: it is queued anew when it next empties.
                continue;
            }
            budget -= 1;
            let namespace = self.slots[slot as usize]
                .take()
                .expect("queued slots are live");
            self.ids.remove(&namespace.name);
            self.free.push(slot);
            self.metrics.forget_pending_gauge(&namespace.name);
            forgotten(namespace.name);
        }
    }

    #[cfg(test)]
    /// Namespaces the table holds now.
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;

    const SECOND: u64 = 1_000_000_000;

    fn forgotten(namespaces: &mut Namespaces, now: u64) -> Vec<String> {
        let mut names = Vec::new();
        namespaces.sweep(now, |name| names.push(name.to_string()));
        names
    }

    #[test]
    fn an_empty_namespace_is_forgotten_after_a_while_and_its_number_never_comes_back() {
        let metrics = Metrics::new();
        let mut namespaces = Namespaces::new(2, metrics.clone(), &SystemClock::new());
        let a = namespaces.intern("a", Admission::Checked).unwrap();
        let b = namespaces.intern("b", Admission::Checked).unwrap();
        let error = namespaces.intern("c", Admission::Checked).unwrap_err();
        assert!(error.to_string().contains("--max-namespaces 2"), "{error}");
        assert_eq!(namespaces.len(), 2, "the refusal created nothing");
        let number_of_a = namespaces[a].number;
        namespaces.add(a, 1, Some("k".into()));
        namespaces.add(b, 2, None);
        namespaces.remove(a, Some("k"), SECOND);
        assert_eq!(namespaces.next_sweep(), Some(2 * SECOND));
        assert!(forgotten(&mut namespaces, 2 * SECOND - 1).is_empty());
        assert_eq!(forgotten(&mut namespaces, 2 * SECOND), ["a"]);
        assert_eq!(namespaces.slot("a"), None);
        assert!(!metrics.encode().contains("namespace=\"a\""));
        // The table's hold is the receiver's to let go; until then "a" is still live.
        assert!(namespaces.intern("c", Admission::Checked).is_err());
        namespaces.live.release("a");
        let c = namespaces.intern("c", Admission::Checked).unwrap();
        assert_eq!(c, a, "the slot is reused");
        assert_ne!(namespaces[c].number, number_of_a, "the number is not");
        assert_eq!(namespaces.next_sweep(), None);
    }

    #[test]
    fn a_namespace_filled_again_before_the_sweep_is_kept() {
        let mut namespaces = Namespaces::new(0, Metrics::new(), &SystemClock::new());
        let a = namespaces.intern("a", Admission::Checked).unwrap();
        namespaces.add(a, 1, None);
        namespaces.remove(a, None, 0);
        namespaces.add(a, 2, None);
        assert!(forgotten(&mut namespaces, 10 * SECOND).is_empty());
        assert_eq!(namespaces.next_sweep(), None);
        namespaces.remove(a, None, 20 * SECOND);
        assert_eq!(forgotten(&mut namespaces, 21 * SECOND), ["a"]);
    }

    #[test]
    fn restored_namespaces_pass_the_limit_and_numbers_skip_the_all_namespaces_scope() {
        let metrics = Metrics::new();
        let mut namespaces = Namespaces::new(1, metrics.clone(), &SystemClock::new());
        namespaces.intern("a", Admission::Restored).unwrap();
        namespaces.intern("b", Admission::Restored).unwrap();
        assert_eq!(namespaces.live.len(), 2);
        namespaces.next_number = u64::from(crate::domain::ALL_NAMESPACES);
        let c = namespaces.intern("c", Admission::Restored).unwrap();
        assert_eq!(namespaces[c].number, 1 << 32);
    }
}
