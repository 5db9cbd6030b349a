//! A sink's circuit and back-off: after a run of failures the circuit opens and pushes
//! wait instead of hammering a sink that is down; when it has been open long enough one
//! push goes as a probe, and its outcome closes the circuit or keeps it open longer.
//! Waits carry jitter, so that a sink coming back is not met by every retry at once.

use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Failures in a row (from any push) that open a closed circuit.
pub(crate) const FAILURES_TO_OPEN: u32 = 5;
/// How long the circuit first stays open; each failed probe doubles it, up to the most.
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed {
        failures_in_a_row: u32,
    },
    Open {
        until: Instant,
        opened_for: Duration,
    },
    /// One probe is out; everyone else waits for its outcome.
    HalfOpen {
        opened_for: Duration,
    },
}

pub(crate) struct Circuit {
    state: Mutex<State>,
    changed: Notify,
}

impl Default for Circuit {
    fn default() -> Self {
        Self {
            state: Mutex::new(State::Closed {
                failures_in_a_row: 0,
            }),
            changed: Notify::new(),
        }
    }
}

impl Circuit {
    /// Waits until a push may go: at once while closed; while open, until it has been
    /// open long enough and this caller is the probe, or until another's probe closed it.
    pub(crate) async fn admit(&self) -> Admission {
        loop {
            // Registered before the state is read, so that a change in between is seen.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let open_until = {
                let mut state = self.lock();
                match *state {
                    State::Closed { .. } => return Admission::Push,
                    State::Open { until, opened_for } if Instant::now() >= until => {
                        *state = State::HalfOpen { opened_for };
                        return Admission::Probe;
                    }
                    State::Open { until, .. } => Some(until),
                    State::HalfOpen { .. } => None,
                }
            };
            match open_until {
                Some(until) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(until) => {}
                        () = &mut changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }

    /// The sink answered (whatever it said): the circuit closes.
    pub(crate) fn sink_answered(&self) {
        let mut state = self.lock();
        if *state
            != (State::Closed {
                failures_in_a_row: 0,
            })
        {
            *state = State::Closed {
                failures_in_a_row: 0,
            };
            self.changed.notify_waiters();
        }
    }

    /// The sink failed a push (`probe`: the one probe): a run long enough, or a failed
    /// probe, opens the circuit.
    pub(crate) fn sink_failed(&self, admission: Admission) {
        let mut state = self.lock();
        let reopen = |opened_for: Duration| State::Open {
            until: Instant::now() + with_jitter(opened_for, opened_for.as_nanos() as u64),
            opened_for,
        };
        *state = match (*state, admission) {
            (State::HalfOpen { opened_for }, Admission::Probe) => {
                reopen((opened_for * 2).min(LONGEST_OPEN))
            }
            (State::Closed { failures_in_a_row }, _)
                if failures_in_a_row + 1 >= FAILURES_TO_OPEN =>
            {
                reopen(FIRST_OPEN)
            }
            (State::Closed { failures_in_a_row }, _) => State::Closed {
                failures_in_a_row: failures_in_a_row + 1,
            },
            // A push admitted before the circuit opened, failing late: already open.
            (open, _) => open,
        };
        self.changed.notify_waiters();
    }

    /// The probe admitted never went (its delivery was no longer this pusher's): another
    /// push may be the probe at once.
    pub(crate) fn probe_abandoned(&self) {
        let mut state = self.lock();
        if let State::HalfOpen { opened_for } = *state {
            *state = State::Open {
                until: Instant::now(),
                opened_for,
            };
            self.changed.notify_waiters();
        }
    }

    /// 0 closed, 1 open, 2 half open (`tickd_sink_circuit`).
    pub(crate) fn gauge_value(&self) -> i64 {
        match *self.lock() {
            State::Closed { .. } => 0,
            State::Open { .. } => 1,
            State::HalfOpen { .. } => 2,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is one value, written whole: a panic elsewhere cannot leave it torn.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
    // A keyed hash of the seed: random across processes, no generator to keep.
    let random = std::collections::hash_map::RandomState::new().hash_one(seed);
    let half = wait / 2;
    let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
    half + Duration::from_nanos(if nanos == 0 { 0 } else { random % nanos })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_within_its_jitter_and_stops_at_its_longest() {
        for attempt in 1..=20 {
            let full = FIRST_BACKOFF
                .saturating_mul(1 << (attempt - 1).min(16))
                .min(LONGEST_BACKOFF);
            for seed in 0..50 {
                let wait = backoff(attempt, seed);
                assert!(wait <= full && wait >= full / 2, "{attempt}: {wait:?}");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_of_failures_opens_the_circuit_and_one_probe_decides() {
        let circuit = Circuit::default();
        for _ in 0..FAILURES_TO_OPEN - 1 {
            assert_eq!(circuit.admit().await, Admission::Push);
            circuit.sink_failed(Admission::Push);
        }
        assert_eq!(
            circuit.gauge_value(),
            0,
            "closed until the run is long enough"
        );
        circuit.sink_failed(Admission::Push);
        assert_eq!(circuit.gauge_value(), 1);
        let opened = Instant::now();
        // The first to be admitted is the probe, once the circuit has been open a while.
        assert_eq!(circuit.admit().await, Admission::Probe);
        assert!(opened.elapsed() >= FIRST_OPEN / 2);
        assert_eq!(circuit.gauge_value(), 2);
        // A failed probe opens it for longer.
        circuit.sink_failed(Admission::Probe);
        assert_eq!(circuit.gauge_value(), 1);
        let reopened = Instant::now();
        assert_eq!(circuit.admit().await, Admission::Probe);
        assert!(reopened.elapsed() >= FIRST_OPEN);
        circuit.sink_answered();
        assert_eq!(circuit.gauge_value(), 0);
        assert_eq!(circuit.admit().await, Admission::Push);
    }

    #[tokio::test(start_paused = true)]
    async fn pushes_waiting_behind_a_probe_go_once_it_succeeds() {
        let circuit = std::sync::Arc::new(Circuit::default());
        for _ in 0..FAILURES_TO_OPEN {
            circuit.sink_failed(Admission::Push);
        }
        assert_eq!(circuit.admit().await, Admission::Probe);
        let waiting = tokio::spawn({
            let circuit = circuit.clone();
            async move { circuit.admit().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "one probe at a time");
        circuit.sink_answered();
        assert_eq!(waiting.await.unwrap(), Admission::Push);
    }

    #[tokio::test(start_paused = true)]
    async fn an_abandoned_probe_lets_another_push_probe() {
        let circuit = std::sync::Arc::new(Circuit::default());
        for _ in 0..FAILURES_TO_OPEN {
            circuit.sink_failed(Admission::Push);
        }
        assert_eq!(circuit.admit().await, Admission::Probe);
        let waiting = tokio::spawn({
            let circuit = circuit.clone();
            async move { circuit.admit().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "one probe at a time");
        circuit.probe_abandoned();
        assert_eq!(waiting.await.unwrap(), Admission::Probe);
    }
}
