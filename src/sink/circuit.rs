//! A sink's circuit and back-off. The circuit judges the sink, not one expiration: it
//! opens when pushes of [`DISTINCT_FAILURES_TO_OPEN`] different timers' expirations failed
//! (a repeating timer's firings are one timer: one bad payload that fires often is still
//! one expiration's problem, not the sink's) (no
//! connection, no answer in time, or an answer asking again) with no answer of the sink's
//! among them, and then pushes wait instead of hammering a sink that is down. When it has
//! been open long enough one push goes as a probe, and its outcome closes the circuit or
//! keeps it open (longer, when the probe had not failed before).
//!
//! The probe is an expiration that has not failed, when one is waiting: the one due
//! soonest. Probing with an expiration that failed before tells little about the sink (it
//! may be that expiration the sink rejects, a handler raising on its payload), and probing
//! with the same failing ones again and again is how bad data becomes an outage. For the
//! same reason, a circuit opened by the failures of expirations that had all failed before
//! lets an expiration that has not failed probe at once: the sink may be fine.
//!
//! An expiration that failed before never waits for an open circuit in the pusher's
//! window ([`Circuit::admit_failed_now`]): it is given back to the backend, its attempt
//! unspent, until the circuit may let it go. Otherwise expirations that keep failing, as
//! many as the window, would hold every place while the circuit their failures opened
//! stays open, and no expiration that has not failed could reach the circuit to probe it.
//!
//! Waits carry jitter, so that a sink coming back is not met by every retry at once.

use std::collections::BTreeSet;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::domain::Delivered;

mod failed_timers;

use failed_timers::FailedTimers;

/// Distinct timers whose expirations' pushes failed, with no answer among them, that
/// open a closed circuit.
pub(crate) const DISTINCT_FAILURES_TO_OPEN: usize = 5;
/// How long the circuit first stays open; each failed probe of an expiration that had not
/// failed before doubles it, up to the most.
const FIRST_OPEN: Duration = Duration::from_millis(500);
const LONGEST_OPEN: Duration = Duration::from_secs(30);
/// The back-off of an expiration's retries: doubling from the first, up to the most.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const LONGEST_BACKOFF: Duration = Duration::from_secs(60);

/// Whether a push may go now, and as what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// The circuit is closed: push.
    Push,
    /// The circuit was open long enough: this push is the one probe.
    Probe,
}

/// What the circuit is told of an expiration it admits or judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Judged {
    /// Its timer, the same across its firings and their attempts: what the circuit counts
    /// failures of.
    timer: u64,
    /// Its deadline then its delivery: the order in which probes are chosen.
    due: (u64, u64),
    /// Whether a push of it failed before (an earlier attempt, or this one unreachable).
    failed_before: bool,
}

impl Judged {
    /// `failed_here`: a push of this delivery already failed in this pusher.
    fn of(delivered: &Delivered, failed_here: bool) -> Self {
        let expiration = &delivered.expiration;
        let mut hasher = rustc_hash::FxHasher::default();
        expiration.id.0.hash(&mut hasher);
        Self {
            timer: hasher.finish(),
            due: (expiration.deadline_unix, delivered.delivery_id),
            failed_before: failed_here || delivered.attempt > 1,
        }
    }

    /// Whether a push of it failed before: then it waits for an open circuit elsewhere
    /// ([`Circuit::admit_failed_now`]).
    pub(crate) fn failed_before(&self) -> bool {
        self.failed_before
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Closed {
        /// The distinct timers failed since the sink last answered (at most
        /// [`DISTINCT_FAILURES_TO_OPEN`]), and whether one had not failed before.
        failing: Vec<u64>,
        a_fresh_one_failed: bool,
    },
    Open {
        until: Instant,
        opened_for: Duration,
        /// Opened by (or kept open by the probe of) an expiration that had not failed
        /// before: only then do fresh expirations wait out the window too.
        by_a_fresh_one: bool,
    },
    /// One probe is out; everyone else waits for its outcome.
    HalfOpen {
        opened_for: Duration,
        by_a_fresh_one: bool,
    },
}

impl State {
    fn closed() -> Self {
        State::Closed {
            failing: Vec::new(),
            a_fresh_one_failed: false,
        }
    }

    fn open(opened_for: Duration, by_a_fresh_one: bool, now: Instant) -> Self {
        State::Open {
            until: now + with_jitter(opened_for, opened_for.as_nanos() as u64),
            opened_for,
            by_a_fresh_one,
        }
    }
}

struct Inner {
    state: State,
    failed_timers: FailedTimers,
    /// The timer of the last probe that failed, since the sink last answered.
    last_failed_probe: Option<u64>,
    /// The expirations that have not failed waiting to be admitted, by [`Judged::due`]:
    /// the first is the next probe.
    fresh_waiting: BTreeSet<(u64, u64)>,
}

pub(crate) struct Circuit {
    inner: Mutex<Inner>,
    changed: Notify,
}

impl Default for Circuit {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner {
                state: State::closed(),
                failed_timers: FailedTimers::default(),
                last_failed_probe: None,
                fresh_waiting: BTreeSet::new(),
            }),
            changed: Notify::new(),
        }
    }
}

/// Keeps a fresh expiration among the circuit's waiting ones while its `admit` runs (a
/// cancelled wait leaves too, so that no one waits for a probe that is gone).
struct FreshWaiting<'circuit> {
    circuit: &'circuit Circuit,
    due: (u64, u64),
}

impl Drop for FreshWaiting<'_> {
    fn drop(&mut self) {
        self.circuit.stop_waiting(self.due);
    }
}

impl Circuit {
    /// Waits until a push may go: at once while closed; while open, until this caller is
    /// the probe, or until another's probe closed it.
    pub(crate) async fn admit(&self, judged: Judged) -> Admission {
        if matches!(self.lock().state, State::Closed { .. }) {
            return Admission::Push;
        }
        let _waiting = self
            .start_waiting(judged)
            .map(|due| FreshWaiting { circuit: self, due });
        loop {
            // Registered before the state is read, so that a change in between is seen.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.try_admit(judged, Instant::now()) {
                Ok(admission) => return admission,
                Err(Some(until)) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(until) => {}
                        () = &mut changed => {}
                    }
                }
                Err(None) => changed.await,
            }
        }
    }

    /// A push of `judged` starts waiting for the circuit: a fresh one joins the waiting
    /// ones a probe is chosen from, until [`Circuit::stop_waiting`] with the key returned.
    pub(crate) fn start_waiting(&self, judged: Judged) -> Option<(u64, u64)> {
        (!judged.failed_before).then(|| {
            self.lock().fresh_waiting.insert(judged.due);
            judged.due
        })
    }

    /// A fresh push no longer waits (admitted, or gone): no one waits for it to probe.
    pub(crate) fn stop_waiting(&self, due: (u64, u64)) {
        self.lock().fresh_waiting.remove(&due);
        self.changed.notify_waiters();
    }

    /// One look, at `now`, at whether a push of `judged` may go: its admission, or when
    /// to look again (None: once the circuit changes). The rule [`Circuit::admit`] waits
    /// on, and the simulation steps.
    pub(crate) fn try_admit(
        &self,
        judged: Judged,
        now: Instant,
    ) -> Result<Admission, Option<Instant>> {
        let mut inner = self.lock();
        let first_fresh = inner.fresh_waiting.first().copied();
        match inner.state {
            State::Closed { .. } => Ok(Admission::Push),
            State::HalfOpen { .. } => Err(None),
            State::Open {
                until,
                opened_for,
                by_a_fresh_one,
            } => {
                let my_turn = if judged.failed_before {
                    // A fresh one probes in preference, whenever one waits.
                    first_fresh.is_none() && now >= until
                } else {
                    first_fresh == Some(judged.due) && (!by_a_fresh_one || now >= until)
                };
                if my_turn {
                    inner.state = State::HalfOpen {
                        opened_for,
                        by_a_fresh_one,
                    };
                    return Ok(Admission::Probe);
                }
                let someone_else_probes = first_fresh.is_some_and(|first| first != judged.due);
                Err((!someone_else_probes).then_some(until))
            }
        }
    }

    /// One look, at `now`, for a push of an expiration that failed before: admitted now
    /// (the circuit is closed, or this push is the probe), or how long it should wait
    /// elsewhere before it looks again. Such a push never waits in the pusher's window
    /// for the circuit: its place is for an expiration that has not failed, which the
    /// circuit would rather probe with (see the module's summary).
    pub(crate) fn admit_failed_now(
        &self,
        judged: Judged,
        now: Instant,
    ) -> Result<Admission, Duration> {
        debug_assert!(
            judged.failed_before,
            "only a push that failed before waits elsewhere"
        );
        self.try_admit(judged, now).map_err(|until| match until {
            // Jittered, so that those given back together do not all look again at once.
            Some(until) => with_jitter(
                until.saturating_duration_since(now).max(FIRST_OPEN),
                judged.due.1,
            ),
            // A probe is out (its answer comes within a push's timeout), or a fresh
            // expiration waits to probe: the circuit's first window.
            None => with_jitter(FIRST_OPEN, judged.due.1),
        })
    }

    /// How the circuit judges a push of `delivered`: `failed_here` if a push of this
    /// delivery already failed in this pusher. An expiration of a timer whose last push
    /// failed counts as one that failed before (see `failed_timers`).
    pub(crate) fn judge(&self, delivered: &Delivered, failed_here: bool) -> Judged {
        let mut judged = Judged::of(delivered, failed_here);
        judged.failed_before |= self.lock().failed_timers.contains(judged.timer);
        judged
    }

    /// The sink answered a push of `judged` (whatever it said): the circuit closes.
    pub(crate) fn sink_answered(&self, judged: Judged) {
        let mut inner = self.lock();
        inner.failed_timers.answered(judged.timer);
        inner.last_failed_probe = None;
        if inner.state != State::closed() {
            inner.state = State::closed();
            self.changed.notify_waiters();
        }
    }

    /// The sink failed a push of `judged` admitted as `admission`: failures of enough
    /// distinct timers, or a failed probe, open the circuit.
    pub(crate) fn sink_failed(&self, admission: Admission, judged: Judged) {
        self.sink_failed_at(admission, judged, Instant::now());
    }

    /// [`Circuit::sink_failed`] at `now`.
    pub(crate) fn sink_failed_at(&self, admission: Admission, judged: Judged, now: Instant) {
        let mut inner = self.lock();
        inner.failed_timers.failed(judged.timer);
        let fresh = !judged.failed_before;
        let probe_of_the_same_timer = inner.last_failed_probe == Some(judged.timer);
        if admission == Admission::Probe {
            inner.last_failed_probe = Some(judged.timer);
        }
        let next = match (&mut inner.state, admission) {
            // A fresh probe failing is the sink's failure: open for longer. One that had
            // failed before may be that expiration's own: open for as long again; and two
            // in a row of one timer say it is that timer's (its payload, say): the circuit
            // closes, counting failures afresh from that one.
            (
                State::HalfOpen {
                    opened_for,
                    by_a_fresh_one,
                },
                Admission::Probe,
            ) => Some(if fresh {
                State::open((*opened_for * 2).min(LONGEST_OPEN), true, now)
            } else if probe_of_the_same_timer {
                State::Closed {
                    failing: vec![judged.timer],
                    a_fresh_one_failed: false,
                }
            } else {
                State::open(*opened_for, *by_a_fresh_one, now)
            }),
            (
                State::Closed {
                    failing,
                    a_fresh_one_failed,
                },
                _,
            ) => {
                if !failing.contains(&judged.timer) {
                    failing.push(judged.timer);
                }
                *a_fresh_one_failed |= fresh;
                debug_assert!(failing.len() <= DISTINCT_FAILURES_TO_OPEN);
                (failing.len() >= DISTINCT_FAILURES_TO_OPEN)
                    .then(|| State::open(FIRST_OPEN, *a_fresh_one_failed, now))
            }
            // A push admitted before the circuit opened, failing late: already open.
            _ => None,
        };
        if let Some(next) = next {
            inner.state = next;
            self.changed.notify_waiters();
        }
    }

    /// The probe admitted never went (its delivery was no longer this pusher's): another
    /// push may be the probe at once.
    pub(crate) fn probe_abandoned(&self) {
        self.probe_abandoned_at(Instant::now());
    }

    /// [`Circuit::probe_abandoned`] at `now`.
    pub(crate) fn probe_abandoned_at(&self, now: Instant) {
        let mut inner = self.lock();
        if let State::HalfOpen {
            opened_for,
            by_a_fresh_one,
        } = inner.state
        {
            inner.state = State::Open {
                until: now,
                opened_for,
                by_a_fresh_one,
            };
            self.changed.notify_waiters();
        }
    }

    /// The circuit's state and the fresh expirations waiting, for the simulation's
    /// failure messages.
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn describe(&self) -> String {
        let inner = self.lock();
        format!("{:?} fresh waiting {:?}", inner.state, inner.fresh_waiting)
    }

    /// 0 closed, 1 open, 2 half open (`tickd_sink_circuit`).
    pub(crate) fn gauge_value(&self) -> i64 {
        match self.lock().state {
            State::Closed { .. } => 0,
            State::Open { .. } => 1,
            State::HalfOpen { .. } => 2,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Each change is made whole under the lock: a panic elsewhere cannot leave it torn.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How long a delivery waits before its `attempt + 1`: doubling from 200 ms up to a
/// minute, with jitter. `seed` spreads deliveries failing together (their delivery id).
pub(crate) fn backoff(attempt: u32, seed: u64) -> Duration {
    let doublings = attempt.saturating_sub(1).min(16);
    let wait = FIRST_BACKOFF
        .saturating_mul(1 << doublings)
        .min(LONGEST_BACKOFF);
    with_jitter(wait, seed ^ u64::from(attempt))
}

/// `wait` shortened by up to half, at random ("equal jitter"): never longer than asked,
/// never shorter than half.
fn with_jitter(wait: Duration, seed: u64) -> Duration {
    // A keyed hash of the seed: random across processes, no generator to keep. In the
    // simulation's builds (and the tests') a fixed key, so that a seed's run replays.
    #[cfg(not(any(test, feature = "sim")))]
    let random = std::collections::hash_map::RandomState::new().hash_one(seed);
    #[cfg(any(test, feature = "sim"))]
    let random = rustc_hash::FxBuildHasher.hash_one(seed);
    let half = wait / 2;
    let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
    half + Duration::from_nanos(if nanos == 0 { 0 } else { random % nanos })
}

#[cfg(test)]
#[path = "circuit_tests.rs"]
mod tests;
