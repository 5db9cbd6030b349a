//! A sink's pace: how fast its pushes may leave, whatever the expirations waiting. Two
//! limits, the lower holding:
//!
//! - the rate the operator set (`rate=50/s`, with `--sink-rate` or `SetSink`): a token
//!   bucket that fills at the rate and holds at most its burst, so pushes leave at the
//!   rate on average and never more than the burst at once;
//! - the sink's own word. A push answered "too many requests" (HTTP 429, a 503 with
//!   `Retry-After`, gRPC RESOURCE_EXHAUSTED) holds every push of the sink until its
//!   `Retry-After` (a second if it gives none) and halves the pace: of the rate set, or
//!   of what was sent in the last second. Each second without another, the pace grows
//!   back by a quarter, until it is the rate set again (or, with none, what was sent
//!   before the first, when the limit is lifted). A storm of such answers is the sink's,
//!   not each expiration's: it slows the sink as a whole, once per hold, instead of every
//!   expiration retrying on its own schedule.
//!
//! Written here rather than taken from a rate-limiting crate: the limit changes with
//! every slow-down and every second of recovery, and such crates fix a limiter's quota
//! when it is made.

use std::fmt;
use std::str::FromStr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// The slowest a sink's own slow-downs take it: one push a second.
const SLOWEST: f64 = 1.0;
/// How long a slow-down without a `Retry-After` holds the sink's pushes.
const HOLD_WITHOUT_RETRY_AFTER: Duration = Duration::from_secs(1);
/// What each quiet second gives back of a slowed pace.
const RECOVERY_PER_SECOND: f64 = 1.25;
/// The fastest rate that can be set, and the largest burst.
const MOST_PER_SECOND: f64 = 1_000_000.0;
const MOST_BURST: u32 = 1_000_000;

/// A rate set for a sink: `50/s`, or `50/s,burst=10` (default: a tenth of a second's
/// pushes, at least one).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SinkRate {
    pub per_second: f64,
    pub burst: u32,
}

/// `--sink-rate NAMESPACE=RATE`: the rate of the sink `--sink` gives the namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct SinkRateFlag {
    pub namespace: String,
    pub rate: SinkRate,
}

impl FromStr for SinkRateFlag {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.split_once('=') {
            Some((namespace, rate)) if !namespace.is_empty() => Ok(SinkRateFlag {
                namespace: namespace.to_owned(),
                rate: rate.parse()?,
            }),
            _ => Err(format!(
                "{text:?}: give NAMESPACE=RATE, as in orders=50/s or orders=50/s,burst=10"
            )),
        }
    }
}

impl FromStr for SinkRate {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let refuse = |why: &str| format!("rate {text:?}: {why}; give it as 50/s or 50/s,burst=10");
        let (rate, burst) = match text.split_once(',') {
            Some((rate, burst)) => (rate, Some(burst)),
            None => (text, None),
        };
        let per_second: f64 = rate
            .strip_suffix("/s")
            .ok_or_else(|| refuse("a rate is pushes per second, N/s"))?
            .parse()
            .map_err(|_| refuse("N is not a number"))?;
        if !(per_second > 0.0 && per_second <= MOST_PER_SECOND) {
            return Err(refuse("N must be above 0 and at most 1000000"));
        }
        let burst = match burst {
            None => ((per_second / 10.0).ceil() as u32).max(1),
            Some(burst) => burst
                .strip_prefix("burst=")
                .and_then(|burst| burst.parse::<u32>().ok())
                .filter(|burst| (1..=MOST_BURST).contains(burst))
                .ok_or_else(|| refuse("the burst is burst=B, B from 1 to 1000000"))?,
        };
        Ok(SinkRate { per_second, burst })
    }
}

impl fmt::Display for SinkRate {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}/s,burst={}", self.per_second, self.burst)
    }
}

/// A sink's pace (see the module's docs). Shared by all of a pusher's pushes.
pub(crate) struct Pace {
    state: Mutex<PaceState>,
}

struct PaceState {
    set: Option<SinkRate>,
    /// The pace the sink's slow-downs left, in pushes per second; None if not slowed.
    slowed: Option<f64>,
    /// What a slowed pace recovers to when no rate is set: the sends of the second
    /// before the first slow-down.
    before_slowing: f64,
    /// No push leaves before this (a slow-down's hold).
    held_until: Instant,
    /// When the slowed pace last changed (it grows each quiet second after).
    slowed_at: Instant,
    tokens: f64,
    refilled_at: Instant,
    /// Pushes sent in the second that began at `counting_since`, and in the one before.
    sent_this_second: u32,
    sent_last_second: u32,
    counting_since: Instant,
}

impl Pace {
    pub(crate) fn new(set: Option<SinkRate>) -> Self {
        Self::new_at(set, Instant::now())
    }

    /// [`Pace::new`] at `now` (the simulation's clock).
    pub(crate) fn new_at(set: Option<SinkRate>, now: Instant) -> Self {
        Pace {
            state: Mutex::new(PaceState {
                set,
                slowed: None,
                before_slowing: 0.0,
                held_until: now,
                slowed_at: now,
                tokens: set.map_or(0.0, |set| f64::from(set.burst)),
                refilled_at: now,
                sent_this_second: 0,
                sent_last_second: 0,
                counting_since: now,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, PaceState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets (or lifts) the rate; a slowed pace stays slowed, under the new rate.
    pub(crate) fn set_rate(&self, rate: Option<SinkRate>) {
        let mut state = self.state();
        state.refill(Instant::now());
        state.set = rate;
        state.tokens = state.tokens.min(state.capacity());
    }

    pub(crate) fn rate(&self) -> Option<SinkRate> {
        self.state().set
    }

    /// The pace a sink's slow-downs hold it to now (pushes per second); None if the sink
    /// has not slowed it.
    pub(crate) fn slowed(&self) -> Option<f64> {
        let mut state = self.state();
        state.recover(Instant::now());
        state.slowed
    }

    /// Waits until a push may leave, and counts it as leaving. Cancel-safe: a push is
    /// counted only as this returns.
    pub(crate) async fn ready(&self) {
        loop {
            let wait = self.take_at(Instant::now());
            match wait {
                None => return,
                Some(wait) => tokio::time::sleep(wait).await,
            }
        }
    }

    /// The sink asked to be sent less (429 and the like), after `retry_after` if it said.
    /// One look, at `now`, at whether a push may leave: None, counted as leaving; or how
    /// long to wait before looking again. The rule [`Pace::ready`] waits on.
    pub(crate) fn take_at(&self, now: Instant) -> Option<Duration> {
        self.state().take(now)
    }

    pub(crate) fn slow_down(&self, retry_after: Option<Duration>) {
        self.slow_down_at(retry_after, Instant::now());
    }

    /// [`Pace::slow_down`] at `now`.
    pub(crate) fn slow_down_at(&self, retry_after: Option<Duration>, now: Instant) {
        let mut state = self.state();
        state.count_seconds(now);
        let hold = retry_after.unwrap_or(HOLD_WITHOUT_RETRY_AFTER);
        // The answers of pushes sent before a hold began arrive during it: one hold, one
        // halving.
        let already_held = state.held_until > now;
        state.held_until = state.held_until.max(now + hold);
        if already_held {
            return;
        }
        state.recover(now);
        let sent = f64::from(state.sent_last_second.max(state.sent_this_second));
        let current = match (state.slowed, state.set) {
            (Some(slowed), _) => slowed,
            (None, Some(set)) => set.per_second,
            (None, None) => {
                state.before_slowing = sent.max(SLOWEST);
                sent
            }
        };
        state.slowed = Some((current / 2.0).max(SLOWEST));
        state.slowed_at = now;
        state.tokens = state.tokens.min(1.0);
    }
}

impl PaceState {
    /// The pushes per second allowed now; None if unlimited.
    fn limit(&self) -> Option<f64> {
        match (self.set.map(|set| set.per_second), self.slowed) {
            (Some(set), Some(slowed)) => Some(set.min(slowed)),
            (set, slowed) => set.or(slowed),
        }
    }

    fn capacity(&self) -> f64 {
        match (self.set, self.slowed) {
            (_, Some(_)) => 1.0,
            (Some(set), None) => f64::from(set.burst),
            (None, None) => 0.0,
        }
    }

    fn refill(&mut self, now: Instant) {
        if let Some(limit) = self.limit() {
            let elapsed = now
                .saturating_duration_since(self.refilled_at)
                .as_secs_f64();
            self.tokens = (self.tokens + elapsed * limit).min(self.capacity());
        }
        self.refilled_at = now;
    }

    /// Each quiet second since the last change gives back a quarter; lifted once it is
    /// what it was slowed from.
    fn recover(&mut self, now: Instant) {
        let Some(slowed) = self.slowed else { return };
        if now < self.held_until {
            return;
        }
        let quiet = now.saturating_duration_since(self.slowed_at.max(self.held_until));
        let seconds = quiet.as_secs();
        if seconds == 0 {
            return;
        }
        self.refill(now);
        let grown = slowed * RECOVERY_PER_SECOND.powi(i32::try_from(seconds).unwrap_or(i32::MAX));
        let back_to = self.set.map_or(self.before_slowing, |set| set.per_second);
        if grown >= back_to {
            self.slowed = None;
        } else {
            self.slowed = Some(grown);
            self.slowed_at = now;
        }
    }

    fn count_seconds(&mut self, now: Instant) {
        let since = now.saturating_duration_since(self.counting_since);
        if since >= Duration::from_secs(2) {
            self.sent_last_second = 0;
            self.sent_this_second = 0;
            self.counting_since = now;
        } else if since >= Duration::from_secs(1) {
            self.sent_last_second = self.sent_this_second;
            self.sent_this_second = 0;
            self.counting_since += Duration::from_secs(1);
        }
    }

    /// Takes a push's place: None if taken, or how long to wait before asking again.
    fn take(&mut self, now: Instant) -> Option<Duration> {
        if now < self.held_until {
            return Some(self.held_until - now);
        }
        self.recover(now);
        self.count_seconds(now);
        let Some(limit) = self.limit() else {
            self.sent_this_second += 1;
            return None;
        };
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            self.sent_this_second += 1;
            return None;
        }
        let missing = 1.0 - self.tokens;
        Some(Duration::from_secs_f64(missing / limit).max(Duration::from_millis(1)))
    }
}

#[cfg(test)]
#[path = "pace_tests.rs"]
mod tests;
