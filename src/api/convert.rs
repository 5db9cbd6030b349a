//! Validation of requests into the worker's types, and of the worker's answers back into
//! protobuf. Every check names the field it refused, so a client can fix its call.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prost_types::{Duration as ProtoDuration, Timestamp};

use crate::cron::CalendarSchedule;
use crate::domain::{
    Calendar, Dead, Delivered, Due, Expiration, NewTimer, Target, TimerError, TimerRef, TimerView,
};
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

pub(crate) const DEFAULT_NAMESPACE: &str = "default";

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

    fn key(&self, key: &str) -> Result<String, TimerError> {
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

    fn interval(
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

    pub(crate) fn new_timer(&self, spec: proto::TimerSpec) -> Result<NewTimer, TimerError> {
        let namespace = self.namespace(&spec.namespace)?;
        let key = match spec.key.as_str() {
            "" => None,
            key => Some(self.key(key)?),
        };
        let payload = self.payload(&spec.payload)?;
        let repeat = spec
            .repeat
            .as_ref()
            .map(|repeat| self.interval("repeat", repeat))
            .transpose()?;
        if let Some(repeat) = repeat.filter(|repeat| *repeat < self.min_repeat) {
            // Shorter than a tick, it would fire on every tick for ever.
            return Err(TimerError::invalid(
                "repeat",
                format!(
                    "{repeat:?} is shorter than the wheel's tick of {:?} (--tick)",
                    self.min_repeat
                ),
            ));
        }
        let ttl = spec
            .ttl
            .as_ref()
            .map(|ttl| self.interval("ttl", ttl))
            .transpose()?;
        let calendar = calendar(&spec.cron, &spec.time_zone)?;
        if calendar.is_some() && repeat.is_some() {
            return Err(TimerError::invalid(
                "cron",
                "give either cron or repeat, not both",
            ));
        }
        if calendar.is_some() && ttl.is_some() {
            // A lease's deadline is its last heartbeat plus its ttl, not a calendar's.
            return Err(TimerError::invalid("ttl", "a cron timer cannot be a lease"));
        }
        if spec.replace && key.is_none() {
            return Err(TimerError::invalid(
                "replace",
                "needs a key: it replaces the pending timer under that key",
            ));
        }
        let due = match (&spec.delay, &spec.deadline, ttl) {
            (Some(_), Some(_), _) => {
                return Err(TimerError::invalid(
                    "deadline",
                    "give either delay or deadline, not both",
                ))
            }
            (Some(delay), None, _) => Due::After(self.duration("delay", delay)?),
            (None, Some(deadline), _) => Due::AtUnix(self.deadline("deadline", deadline)?),
            (None, None, Some(ttl)) => Due::After(ttl),
            // A cron timer's first firing is its first cron time from now.
            (None, None, None) if calendar.is_some() => Due::After(Duration::ZERO),
            (None, None, None) => {
                return Err(TimerError::invalid(
                    "delay",
                    "one of delay, deadline or ttl is required",
                ))
            }
        };
        Ok(NewTimer {
            namespace,
            key,
            due,
            payload,
            repeat,
            ttl,
            calendar,
            replace: spec.replace,
        })
    }

    /// Reschedule's new due time: exactly one of `delay` and `deadline`.
    pub(crate) fn new_due(
        &self,
        delay: Option<&ProtoDuration>,
        deadline: Option<&Timestamp>,
    ) -> Result<Due, TimerError> {
        match (delay, deadline) {
            (Some(_), Some(_)) => Err(TimerError::invalid(
                "deadline",
                "give either delay or deadline, not both",
            )),
            (Some(delay), None) => Ok(Due::After(self.duration("delay", delay)?)),
            (None, Some(deadline)) => Ok(Due::AtUnix(self.deadline("deadline", deadline)?)),
            (None, None) => Err(TimerError::invalid(
                "delay",
                "one of delay or deadline is required",
            )),
        }
    }

    /// A payload within `--max-payload-bytes`. Not copied: the decoded `Bytes` shares the
    /// request's buffer, which lives only as long as the call, since no backend keeps a
    /// `NewTimer`'s payload (the table copies it into its record, the one copy a pending
    /// timer keeps; a replica writes it to the database). Copying here too would be one
    /// more whole copy of every registration's payload at its peak.
    pub(crate) fn payload(&self, payload: &bytes::Bytes) -> Result<bytes::Bytes, TimerError> {
        if payload.len() > self.max_payload_bytes {
            return Err(TimerError::ResourceExhausted(format!(
                "payload: {} bytes is over the limit of {} (--max-payload-bytes)",
                payload.len(),
                self.max_payload_bytes
            )));
        }
        Ok(payload.clone())
    }

    /// A wall-clock deadline in nanoseconds since the epoch; past ones are allowed (they
    /// fire at once), ones beyond the horizon are not.
    fn deadline(&self, field: &'static str, timestamp: &Timestamp) -> Result<u64, TimerError> {
        if !(0..1_000_000_000).contains(&timestamp.nanos) {
            return Err(TimerError::invalid(field, "nanos must be within 0..1e9"));
        }
        let unix = i128::from(timestamp.seconds) * 1_000_000_000 + i128::from(timestamp.nanos);
        let horizon = unix_now() as i128 + self.max_horizon.as_nanos() as i128;
        if unix > horizon {
            return Err(TimerError::invalid(
                field,
                format!("more than {:?} in the future", self.max_horizon),
            ));
        }
        Ok(unix.max(0) as u64)
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

    pub(crate) fn optional_ttl(
        &self,
        ttl: Option<&ProtoDuration>,
    ) -> Result<Option<Duration>, TimerError> {
        ttl.map(|ttl| self.interval("ttl", ttl)).transpose()
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

pub(crate) fn proto_duration(duration: Duration) -> ProtoDuration {
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

/// A registration's answer: the timer without its payload, which the caller sent and
/// already has. Echoing it back would double the bytes of every registration and could
/// make the answer to a batch larger than the caller accepts (4 MiB for most clients).
pub(crate) fn registered_timer(view: TimerView) -> proto::Timer {
    proto::Timer {
        payload: Default::default(),
        ..timer(view)
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

pub(crate) fn expiration(delivered: &Delivered) -> proto::Expiration {
    let expiration = &delivered.expiration;
    proto::Expiration {
        delivery_id: delivery_id(delivered.delivery_id),
        timer: Some(fired_timer(expiration)),
        fired_at: Some(timestamp(expiration.fired_unix)),
        attempt: delivered.attempt,
        late: expiration.late,
        lease: expiration.ttl.is_some(),
    }
}

pub(crate) fn dead_expiration(dead: &Dead) -> proto::Expiration {
    proto::Expiration {
        // What Redrive takes to name this dead expiration.
        delivery_id: delivery_id(dead.id),
        timer: Some(fired_timer(&dead.expiration)),
        fired_at: Some(timestamp(dead.expiration.fired_unix)),
        attempt: dead.attempts,
        late: dead.expiration.late,
        lease: dead.expiration.ttl.is_some(),
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

pub(crate) fn parse_delivery_id(text: &str) -> Option<u64> {
    let well_formed = text.len() == 16 && text.bytes().all(|byte| byte.is_ascii_hexdigit());
    well_formed
        .then(|| u64::from_str_radix(text, 16).ok())
        .flatten()
}

pub(crate) fn item_error(error: &TimerError) -> proto::Error {
    let status = tonic::Status::from(error.clone());
    proto::Error {
        code: status.code() as i32,
        message: status.message().to_owned(),
    }
}

/// The calendar of a spec's `cron` and `time_zone`, if it has one.
fn calendar(cron: &str, time_zone: &str) -> Result<Option<Calendar>, TimerError> {
    if cron.is_empty() {
        if !time_zone.is_empty() {
            return Err(TimerError::invalid("time_zone", "is only read with cron"));
        }
        return Ok(None);
    }
    match CalendarSchedule::parse(cron, time_zone) {
        Ok(schedule) => Ok(Some(Calendar(Arc::new(schedule)))),
        Err(error) => {
            // The error's text starts with its field's name, which the status repeats.
            let text = error.to_string();
            let prefix = format!("{}: ", error.field());
            let reason = text.strip_prefix(&prefix).unwrap_or(&text);
            Err(TimerError::invalid(error.field(), reason))
        }
    }
}

fn cron_text(calendar: Option<&Calendar>) -> String {
    calendar.map_or_else(String::new, |calendar| calendar.expression().to_owned())
}

fn zone_text(calendar: Option<&Calendar>) -> String {
    calendar.map_or_else(String::new, |calendar| calendar.time_zone().to_owned())
}
