//! Between the wire and the domain, for the API's RPC families and the push sinks alike:
//! the request limits ([`Limits`]), the checks of fields many requests carry (a namespace,
//! a key, a duration, a timer reference), and the answers many responses carry (a timer,
//! an expiration, a delivery id, a timestamp). Every check names the field it refused, so
//! a client can fix its call; the checks of fields only one family reads live in that
//! family's file (`src/api/`). A push carries an expiration as Subscribe delivers it, so
//! the sinks write it here too.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prost_types::{Duration as ProtoDuration, Timestamp};

use crate::domain::{Calendar, Expiration, Target, TimerError, TimerRef, TimerView, TraceContext};
use crate::proto;

/// Bounds on what one request may ask for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_payload_bytes: usize,
    pub(crate) max_batch: usize,
    pub(crate) max_namespace_len: usize,
    pub(crate) max_key_len: usize,
    /// Deadlines further out than this are refused as absurd.
    pub(crate) max_horizon: Duration,
    pub(crate) max_page_size: usize,
    /// The shortest `repeat` accepted: one wheel tick.
    pub(crate) min_repeat: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_payload_bytes: 64 * 1024,
            max_batch: 10_000,
            max_namespace_len: 128,
            max_key_len: 256,
            max_horizon: Duration::from_secs(100 * 365 * 24 * 3600),
            max_page_size: 1_000,
            min_repeat: Duration::from_millis(1),
        }
    }
}

const DEFAULT_NAMESPACE: &str = "default";

impl Limits {
    pub(crate) fn namespace(&self, namespace: &str) -> Result<String, TimerError> {
        if namespace.is_empty() {
            return Ok(DEFAULT_NAMESPACE.to_owned());
        }
        self.name("namespace", namespace, self.max_namespace_len)
    }

    fn name(&self, field: &'static str, value: &str, limit: usize) -> Result<String, TimerError> {
        if value.len() > limit {
            return Err(TimerError::invalid(
                field,
                format!("{} bytes is over the limit of {limit}", value.len()),
            ));
        }
        if value.chars().any(char::is_control) {
            return Err(TimerError::invalid(
                field,
                "must not contain control characters",
            ));
        }
        Ok(value.to_owned())
    }

    pub(crate) fn key(&self, key: &str) -> Result<String, TimerError> {
        if key.is_empty() {
            return Err(TimerError::invalid("key", "must not be empty"));
        }
        self.name("key", key, self.max_key_len)
    }

    /// A positive duration no longer than the horizon.
    pub(crate) fn duration(
        &self,
        field: &'static str,
        duration: &ProtoDuration,
    ) -> Result<Duration, TimerError> {
        let duration = checked_duration(field, duration)?;
        if duration > self.max_horizon {
            return Err(TimerError::invalid(
                field,
                format!("{duration:?} is beyond the {:?} horizon", self.max_horizon),
            ));
        }
        Ok(duration)
    }

    /// A duration within the horizon and not zero: a `repeat` or a `ttl`.
    pub(crate) fn interval(
        &self,
        field: &'static str,
        duration: &ProtoDuration,
    ) -> Result<Duration, TimerError> {
        let duration = self.duration(field, duration)?;
        if duration.is_zero() {
            return Err(TimerError::invalid(field, "must be greater than zero"));
        }
        Ok(duration)
    }

    pub(crate) fn timer_ref(
        &self,
        reference: Option<proto::TimerRef>,
    ) -> Result<TimerRef, TimerError> {
        let reference = reference.ok_or_else(|| TimerError::invalid("timer", "is required"))?;
        let namespace = self.namespace(&reference.namespace)?;
        let target = match reference.target {
            Some(proto::timer_ref::Target::Id(id)) => Target::Id(id.parse()?),
            Some(proto::timer_ref::Target::Key(key)) => Target::Key(self.key(&key)?),
            None => return Err(TimerError::invalid("timer", "give an id or a key")),
        };
        Ok(TimerRef { namespace, target })
    }
}

fn checked_duration(field: &'static str, duration: &ProtoDuration) -> Result<Duration, TimerError> {
    let negative = duration.seconds < 0 || duration.nanos < 0;
    if negative {
        return Err(TimerError::invalid(field, "must not be negative"));
    }
    if duration.nanos >= 1_000_000_000 {
        return Err(TimerError::invalid(field, "nanos must be below 1e9"));
    }
    Ok(Duration::new(
        duration.seconds as u64,
        duration.nanos as u32,
    ))
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64)
}

pub(crate) fn timestamp(unix_nanos: u64) -> Timestamp {
    Timestamp {
        seconds: (unix_nanos / 1_000_000_000) as i64,
        nanos: (unix_nanos % 1_000_000_000) as i32,
    }
}

fn proto_duration(duration: Duration) -> ProtoDuration {
    ProtoDuration {
        seconds: duration.as_secs() as i64,
        nanos: duration.subsec_nanos() as i32,
    }
}

pub(crate) fn timer(view: TimerView) -> proto::Timer {
    proto::Timer {
        id: view.id.to_string(),
        namespace: view.namespace.to_string(),
        key: view.key.unwrap_or_default(),
        deadline: Some(timestamp(view.deadline_unix)),
        payload: view.payload,
        repeat: view.repeat.map(proto_duration),
        ttl: view.ttl.map(proto_duration),
        remaining: Some(proto_duration(view.remaining)),
        fired_count: view.fired_count,
        cron: cron_text(view.calendar.as_ref()),
        time_zone: zone_text(view.calendar.as_ref()),
    }
}

fn fired_timer(expiration: &Expiration) -> proto::Timer {
    proto::Timer {
        id: expiration.id.to_string(),
        namespace: expiration.namespace.to_string(),
        key: expiration.key.clone().unwrap_or_default(),
        deadline: Some(timestamp(expiration.deadline_unix)),
        payload: expiration.payload.clone(),
        repeat: expiration.repeat.map(proto_duration),
        ttl: expiration.ttl.map(proto_duration),
        remaining: Some(ProtoDuration::default()),
        fired_count: expiration.fired_count,
        cron: cron_text(expiration.calendar.as_ref()),
        time_zone: zone_text(expiration.calendar.as_ref()),
    }
}

/// An expiration as Subscribe delivers it and Pending lists a dead one: under the delivery
/// id that Ack (or, for a dead one, Redrive) takes, with its delivery attempts so far.
pub(crate) fn expiration(
    delivery: u64,
    expiration: &Expiration,
    attempt: u32,
) -> proto::Expiration {
    proto::Expiration {
        delivery_id: delivery_id(delivery),
        timer: Some(fired_timer(expiration)),
        fired_at: Some(timestamp(expiration.fired_unix)),
        attempt,
        late: expiration.late,
        lease: expiration.ttl.is_some(),
        trace_context: expiration.trace.as_deref().map(trace_context),
    }
}

/// Delivery ids are shown like timer ids: 16 hex digits.
pub(crate) fn delivery_id(raw: u64) -> String {
    format!("{raw:016x}")
}

/// Delivery ids as numbers, and the texts that are not delivery ids at all.
pub(crate) fn parse_delivery_ids(texts: Vec<String>) -> (Vec<u64>, Vec<String>) {
    let mut ids = Vec::with_capacity(texts.len());
    let mut malformed = Vec::new();
    for text in texts {
        match parse_delivery_id(&text) {
            Some(id) => ids.push(id),
            None => malformed.push(text),
        }
    }
    (ids, malformed)
}

fn parse_delivery_id(text: &str) -> Option<u64> {
    let well_formed = text.len() == 16 && text.bytes().all(|byte| byte.is_ascii_hexdigit());
    well_formed
        .then(|| u64::from_str_radix(text, 16).ok())
        .flatten()
}

fn cron_text(calendar: Option<&Calendar>) -> String {
    calendar.map_or_else(String::new, |calendar| calendar.expression().to_owned())
}

fn zone_text(calendar: Option<&Calendar>) -> String {
    calendar.map_or_else(String::new, |calendar| calendar.time_zone().to_owned())
}

/// A kept trace context as the API (and a push's body) shows it.
pub(crate) fn trace_context(context: &TraceContext) -> proto::TraceContext {
    proto::TraceContext {
        traceparent: context.traceparent().to_owned(),
        tracestate: context.tracestate().to_owned(),
        baggage: context.baggage().to_owned(),
    }
}
