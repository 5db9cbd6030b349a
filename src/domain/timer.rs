//! Timers as the API and every backend speak of them: what a client registers, how it
//! names one, and how one is shown back.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::error::TimerError;
use super::trace_context::TraceContext;
use crate::cron::CalendarSchedule;

/// The server-assigned id of a timer, shown to clients as 16 hex digits (a string, so no
/// language loses precision on it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerId(pub u64);

impl fmt::Display for TimerId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{:016x}", self.0)
    }
}

impl FromStr for TimerId {
    type Err = TimerError;
    fn from_str(text: &str) -> Result<Self, TimerError> {
        let well_formed = text.len() == 16 && text.bytes().all(|byte| byte.is_ascii_hexdigit());
        match u64::from_str_radix(text, 16) {
            Ok(raw) if well_formed => Ok(TimerId(raw)),
            _ => Err(TimerError::invalid("id", "must be 16 hexadecimal digits")),
        }
    }
}

/// When a new timer is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    After(Duration),
    /// Nanoseconds since the Unix epoch.
    AtUnix(u64),
}

/// A validated registration.
#[derive(Debug, Clone)]
pub struct NewTimer {
    pub namespace: String,
    pub key: Option<String>,
    pub due: Due,
    pub payload: Bytes,
    pub repeat: Option<Duration>,
    pub ttl: Option<Duration>,
    /// A cron schedule (exclusive with `repeat`): `due` is then the earliest first firing.
    pub calendar: Option<Calendar>,
    /// With a key: a pending timer under it is replaced whole instead of returned.
    pub replace: bool,
    /// The registering call's trace context, carried into every firing.
    pub trace: Option<Arc<TraceContext>>,
}

/// A cron expression in a time zone, shared (not copied) between a registration, the
/// table that keeps it and every view of it. Two are equal when they read the same.
#[derive(Debug, Clone)]
pub struct Calendar(pub Arc<CalendarSchedule>);

impl PartialEq for Calendar {
    fn eq(&self, other: &Self) -> bool {
        self.0.expression() == other.0.expression() && self.0.time_zone() == other.0.time_zone()
    }
}

impl Eq for Calendar {}

impl Calendar {
    /// A stored schedule read back (from a log, a row, a recovered expiration); `None` for
    /// no schedule (an empty expression). A schedule the compiled-in time zone database no
    /// longer knows is dropped, with a warning: the timer keeps its next deadline and
    /// fires once more, as a one-shot timer.
    pub fn stored(cron: &str, time_zone: &str) -> Option<Calendar> {
        if cron.is_empty() {
            return None;
        }
        match CalendarSchedule::parse(cron, time_zone) {
            Ok(schedule) => Some(Calendar(Arc::new(schedule))),
            Err(error) => {
                tracing::warn!(cron, time_zone, %error, "stored cron schedule no longer parses: it fires once more, then ends");
                None
            }
        }
    }

    /// A new cron timer's first firing: the first cron time at or after `earliest_unix`
    /// (its delay or deadline).
    pub fn first_firing(&self, earliest_unix: u64) -> Result<u64, TimerError> {
        self.next_at_or_after(earliest_unix).ok_or_else(|| {
            TimerError::invalid("cron", "has no firing after the given delay or deadline")
        })
    }

    /// The firing after the one due at `deadline_unix` that happens at `now_unix`: the
    /// first cron time after both, so that firings missed while no one could fire them
    /// collapse into the one happening now. `None`: the schedule has no more firings.
    pub fn next_firing(&self, deadline_unix: u64, now_unix: u64) -> Option<u64> {
        self.next_after(now_unix.max(deadline_unix))
    }
}

impl std::ops::Deref for Calendar {
    type Target = CalendarSchedule;
    fn deref(&self) -> &CalendarSchedule {
        &self.0
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Id(TimerId),
    Key(String),
}

/// As clients know it: the id as 16 hex digits, a key quoted.
impl fmt::Display for Target {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Id(id) => write!(formatter, "{id}"),
            Target::Key(key) => write!(formatter, "with key {key:?}"),
        }
    }
}

/// A validated reference to one timer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerRef {
    pub namespace: String,
    pub target: Target,
}

impl TimerRef {
    /// What a call that needs this timer pending (Reschedule) answers when it is not: it
    /// fired (a one-shot timer), was cancelled, or never existed. Named as its client
    /// knows it.
    pub fn no_longer_pending(&self) -> TimerError {
        TimerError::NotFound(format!(
            "timer {} in namespace {:?} is no longer pending (fired or cancelled)",
            self.target, self.namespace
        ))
    }
}

/// A pending timer as reported to clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerView {
    pub id: TimerId,
    pub namespace: Arc<str>,
    pub key: Option<String>,
    pub deadline_unix: u64,
    pub payload: Bytes,
    pub repeat: Option<Duration>,
    pub ttl: Option<Duration>,
    pub remaining: Duration,
    pub fired_count: u64,
    /// A cron timer's schedule; `deadline_unix` is its next firing.
    pub calendar: Option<Calendar>,
}

impl TimerView {
    /// About what this timer takes in a listing on the wire: its variable-length fields
    /// plus a generous allowance for the fixed ones.
    pub fn listed_bytes(&self) -> usize {
        let calendar = self.calendar.as_ref().map_or(0, |calendar| {
            calendar.expression().len() + calendar.time_zone().len()
        });
        self.payload.len()
            + self.namespace.len()
            + self.key.as_ref().map_or(0, String::len)
            + calendar
            + 96
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub timer: TimerView,
    /// False when the key already existed and the existing timer is returned (or, with
    /// `replace`, replaced).
    pub created: bool,
    /// True when a pending timer under the key was replaced.
    pub replaced: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timer_no_longer_pending_is_named_as_its_client_knows_it() {
        let by_id = TimerRef {
            namespace: "leases".into(),
            target: Target::Id(TimerId(202)),
        };
        assert_eq!(
            by_id.no_longer_pending().to_string(),
            "timer 00000000000000ca in namespace \"leases\" is no longer pending (fired or cancelled)"
        );
        let by_key = TimerRef {
            namespace: "leases".into(),
            target: Target::Key("worker-7".into()),
        };
        assert_eq!(
            by_key.no_longer_pending().to_string(),
            "timer with key \"worker-7\" in namespace \"leases\" is no longer pending (fired or cancelled)"
        );
    }
}
