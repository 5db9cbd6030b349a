//! The service's timer state, owned by the worker thread: every pending timer in the
//! wheel, plus the indexes the API needs (id, key, namespace counts).
//!
//! All of it lives on one thread, so each command is applied whole or not at all: a
//! failing item changes nothing, and no lock is ever taken.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use tokio::sync::oneshot;

use super::clock::Now;
use super::TimerState;
use crate::wheel::{Handle, Wheel};

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

/// Why a command (or one item of a batch) was refused. The API maps each variant to a
/// gRPC status code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimerError {
    #[error("{field}: {reason}")]
    InvalidArgument { field: &'static str, reason: String },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    ResourceExhausted(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    Unavailable(String),
}

impl TimerError {
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidArgument {
            field,
            reason: reason.into(),
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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Id(TimerId),
    Key(String),
}

/// A validated reference to one timer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerRef {
    pub namespace: String,
    pub target: Target,
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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub timer: TimerView,
    /// False when the key already existed and the existing timer is returned.
    pub created: bool,
}

/// Where a page of the pending listing starts: after this (namespace, id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageToken {
    namespace: u32,
    id: u64,
}

impl fmt::Display for PageToken {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{:x}.{:x}", self.namespace, self.id)
    }
}

impl FromStr for PageToken {
    type Err = TimerError;
    fn from_str(text: &str) -> Result<Self, TimerError> {
        let malformed = || TimerError::invalid("page_token", "not a token from a previous page");
        let (namespace, id) = text.split_once('.').ok_or_else(malformed)?;
        Ok(PageToken {
            namespace: u32::from_str_radix(namespace, 16).map_err(|_| malformed())?,
            id: u64::from_str_radix(id, 16).map_err(|_| malformed())?,
        })
    }
}

#[derive(Debug, Clone)]
pub struct PendingQuery {
    /// None: every namespace.
    pub namespace: Option<String>,
    pub page_size: usize,
    pub after: Option<PageToken>,
}

#[derive(Debug, Clone, Default)]
pub struct PendingPage {
    pub count: u64,
    pub timers: Vec<TimerView>,
    pub next_page_token: Option<PageToken>,
}

/// One firing of a timer, on its way to delivery.
#[derive(Debug, Clone)]
pub struct Expiration {
    pub id: TimerId,
    pub namespace: Arc<str>,
    pub key: Option<String>,
    pub payload: Bytes,
    pub deadline_unix: u64,
    pub fired_unix: u64,
    pub repeat: Option<Duration>,
    pub ttl: Option<Duration>,
    /// Counts this firing: 1 for the first.
    pub fired_count: u64,
    /// The deadline passed while the server was down.
    pub late: bool,
}

type Reply<T> = oneshot::Sender<T>;

/// What the API asks of the worker. Each carries the channel its answer goes back on.
#[derive(Debug)]
pub enum Command {
    Register {
        timers: Vec<NewTimer>,
        reply: Reply<Vec<Result<Registered, TimerError>>>,
    },
    Cancel {
        timer: TimerRef,
        reply: Reply<Result<bool, TimerError>>,
    },
    Get {
        timer: TimerRef,
        reply: Reply<Result<TimerView, TimerError>>,
    },
    Touch {
        timer: TimerRef,
        ttl: Option<Duration>,
        reply: Reply<Result<TimerView, TimerError>>,
    },
    Pending {
        query: PendingQuery,
        reply: Reply<PendingPage>,
    },
}

#[derive(Debug, Clone, Copy)]
pub struct TableConfig {
    pub tick: Duration,
    pub max_pending: usize,
}

/// What the wheel holds for each pending timer.
#[derive(Debug)]
struct TimerRecord {
    id: u64,
    namespace: u32,
    key: Option<Box<str>>,
    payload: Bytes,
    deadline_unix: u64,
    repeat: Option<Duration>,
    ttl: Option<Duration>,
    fired_count: u64,
}

struct Namespace {
    name: Arc<str>,
    pending: u64,
    keys: FxHashMap<Box<str>, u64>,
}

pub struct TimerTable {
    wheel: Wheel<TimerRecord>,
    /// Ordered so that the pending listing can be paged by (namespace, id).
    handles: BTreeMap<(u32, u64), Handle>,
    namespaces: Vec<Namespace>,
    namespace_ids: FxHashMap<Arc<str>, u32>,
    next_id: u64,
}

impl TimerTable {
    pub fn new(config: TableConfig) -> Self {
        let tick = u64::try_from(config.tick.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        Self {
            wheel: Wheel::new(tick, config.max_pending),
            handles: BTreeMap::new(),
            namespaces: Vec::new(),
            namespace_ids: FxHashMap::default(),
            next_id: 1,
        }
    }

    pub fn len(&self) -> usize {
        self.wheel.len()
    }

    pub fn is_empty(&self) -> bool {
        self.wheel.is_empty()
    }

    /// Every pending timer, by deadline: what [`super::Worker::stop`] leaves behind.
    pub fn into_pending(mut self, now: Now) -> Vec<TimerView> {
        let drained = self.wheel.drain();
        drained
            .into_iter()
            .map(|expired| self.view(&expired.value, expired.deadline, now))
            .collect()
    }

    fn register(&mut self, timer: NewTimer, now: Now) -> Result<Registered, TimerError> {
        let namespace = self.intern(&timer.namespace);
        if let Some(key) = &timer.key {
            if let Some(&id) = self.namespaces[namespace as usize].keys.get(key.as_str()) {
                let handle = self.handles[&(namespace, id)];
                return Ok(Registered {
                    timer: self.view_of(handle, now),
                    created: false,
                });
            }
        }
        let (deadline_monotonic, deadline_unix) = match timer.due {
            Due::After(delay) => {
                let delay = duration_nanos(delay);
                (
                    now.monotonic.saturating_add(delay),
                    now.unix.saturating_add(delay),
                )
            }
            Due::AtUnix(unix) => (now.monotonic_at(unix), unix),
        };
        let record = TimerRecord {
            id: self.next_id,
            namespace,
            key: timer.key.map(String::into_boxed_str),
            payload: timer.payload,
            deadline_unix,
            repeat: timer.repeat,
            ttl: timer.ttl,
            fired_count: 0,
        };
        let handle = self
            .wheel
            .insert(deadline_monotonic, record)
            .map_err(|full| {
                TimerError::ResourceExhausted(format!(
                    "max pending timers reached (--max-pending {})",
                    full.limit
                ))
            })?;
        self.next_id += 1;
        self.index(handle);
        Ok(Registered {
            timer: self.view_of(handle, now),
            created: true,
        })
    }

    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.namespace_ids.get(name) {
            return id;
        }
        let id = self.namespaces.len() as u32;
        let name: Arc<str> = Arc::from(name);
        self.namespace_ids.insert(name.clone(), id);
        self.namespaces.push(Namespace {
            name,
            pending: 0,
            keys: FxHashMap::default(),
        });
        id
    }

    fn index(&mut self, handle: Handle) {
        let (_, record) = self.wheel.get(handle).expect("just inserted");
        let (namespace, id) = (record.namespace, record.id);
        let key = record.key.clone();
        self.handles.insert((namespace, id), handle);
        let entry = &mut self.namespaces[namespace as usize];
        entry.pending += 1;
        if let Some(key) = key {
            entry.keys.insert(key, id);
        }
    }

    fn unindex(&mut self, record: &TimerRecord) {
        self.handles.remove(&(record.namespace, record.id));
        let entry = &mut self.namespaces[record.namespace as usize];
        entry.pending -= 1;
        if let Some(key) = &record.key {
            entry.keys.remove(key);
        }
    }

    /// Finds a pending timer's handle. `Ok(None)` means the id was issued once but the
    /// timer is no longer pending (fired or cancelled).
    fn lookup(&self, timer: &TimerRef) -> Result<Option<Handle>, TimerError> {
        let namespace = self.namespace_ids.get(timer.namespace.as_str()).copied();
        let found = namespace.and_then(|namespace| {
            let id = match &timer.target {
                Target::Id(id) => id.0,
                Target::Key(key) => *self.namespaces[namespace as usize].keys.get(key.as_str())?,
            };
            self.handles.get(&(namespace, id)).copied()
        });
        match (&timer.target, found) {
            (_, Some(handle)) => Ok(Some(handle)),
            (Target::Id(id), None) if id.0 < self.next_id && id.0 > 0 => Ok(None),
            (Target::Id(id), None) => Err(TimerError::NotFound(format!(
                "timer {id} not found in namespace {:?}",
                timer.namespace
            ))),
            (Target::Key(key), None) => Err(TimerError::NotFound(format!(
                "no pending timer with key {key:?} in namespace {:?}",
                timer.namespace
            ))),
        }
    }

    /// Like [`Self::lookup`], but a timer that is no longer pending is NOT_FOUND too.
    fn lookup_pending(&self, timer: &TimerRef) -> Result<Handle, TimerError> {
        self.lookup(timer)?.ok_or_else(|| {
            TimerError::NotFound(format!(
                "timer {:?} in namespace {:?} is no longer pending (fired or cancelled)",
                timer.target, timer.namespace
            ))
        })
    }

    fn cancel(&mut self, timer: &TimerRef) -> Result<bool, TimerError> {
        let Some(handle) = self.lookup(timer)? else {
            return Ok(false);
        };
        let record = self.wheel.cancel(handle).expect("indexed handles are live");
        self.unindex(&record);
        Ok(true)
    }

    fn touch(
        &mut self,
        timer: &TimerRef,
        ttl: Option<Duration>,
        now: Now,
    ) -> Result<TimerView, TimerError> {
        let handle = self.lookup_pending(timer)?;
        let (_, record) = self
            .wheel
            .get_mut(handle)
            .expect("indexed handles are live");
        let ttl = ttl.or(record.ttl).ok_or_else(|| {
            TimerError::FailedPrecondition(
                "ttl: the timer has no ttl (not a lease); give one in the request".into(),
            )
        })?;
        let ttl = duration_nanos(ttl);
        record.deadline_unix = now.unix.saturating_add(ttl);
        self.wheel
            .reschedule(handle, now.monotonic.saturating_add(ttl));
        Ok(self.view_of(handle, now))
    }

    fn pending(&self, query: PendingQuery, now: Now) -> PendingPage {
        let namespace = match &query.namespace {
            None => None,
            Some(name) => match self.namespace_ids.get(name.as_str()) {
                Some(&id) => Some(id),
                None => return PendingPage::default(),
            },
        };
        let count = namespace.map_or(self.wheel.len() as u64, |id| {
            self.namespaces[id as usize].pending
        });
        let start = query.after.map_or(Bound::Unbounded, |token| {
            Bound::Excluded((token.namespace, token.id))
        });
        let end = namespace.map_or(Bound::Unbounded, |id| Bound::Included((id, u64::MAX)));
        let start = match (start, namespace) {
            (Bound::Unbounded, Some(id)) => Bound::Included((id, 0)),
            (start, _) => start,
        };
        let mut timers: Vec<TimerView> = self
            .handles
            .range((start, end))
            .take(query.page_size + 1)
            .map(|(_, &handle)| self.view_of(handle, now))
            .collect();
        let next_page_token = if timers.len() > query.page_size {
            timers.truncate(query.page_size);
            timers.last().map(|last| PageToken {
                namespace: self.namespace_ids[&last.namespace],
                id: last.id.0,
            })
        } else {
            None
        };
        PendingPage {
            count,
            timers,
            next_page_token,
        }
    }

    fn view_of(&self, handle: Handle, now: Now) -> TimerView {
        let (deadline, record) = self.wheel.get(handle).expect("indexed handles are live");
        self.view(record, deadline, now)
    }

    fn view(&self, record: &TimerRecord, deadline_monotonic: u64, now: Now) -> TimerView {
        TimerView {
            id: TimerId(record.id),
            namespace: self.namespaces[record.namespace as usize].name.clone(),
            key: record.key.as_deref().map(str::to_owned),
            deadline_unix: record.deadline_unix,
            payload: record.payload.clone(),
            repeat: record.repeat,
            ttl: record.ttl,
            remaining: Duration::from_nanos(deadline_monotonic.saturating_sub(now.monotonic)),
            fired_count: record.fired_count,
        }
    }

    /// Turns a fired record into its expiration, and re-arms it if it repeats.
    fn expire(&mut self, mut record: TimerRecord, deadline_monotonic: u64, now: Now) -> Expiration {
        record.fired_count += 1;
        let expiration = Expiration {
            id: TimerId(record.id),
            namespace: self.namespaces[record.namespace as usize].name.clone(),
            key: record.key.as_deref().map(str::to_owned),
            payload: record.payload.clone(),
            deadline_unix: record.deadline_unix,
            fired_unix: now.unix,
            repeat: record.repeat,
            ttl: record.ttl,
            fired_count: record.fired_count,
            late: false,
        };
        match record.repeat {
            Some(interval) => self.rearm(record, deadline_monotonic, interval, now),
            None => self.unindex(&record),
        }
        expiration
    }

    /// Re-arms a repeating timer one interval after its previous deadline, so it does not
    /// drift; intervals missed entirely (a long stall) are skipped, not fired in a burst.
    fn rearm(&mut self, mut record: TimerRecord, previous: u64, interval: Duration, now: Now) {
        let interval = duration_nanos(interval).max(1);
        let behind = now.monotonic.saturating_sub(previous);
        let steps = behind / interval + 1;
        let advance = steps.saturating_mul(interval);
        record.deadline_unix = record.deadline_unix.saturating_add(advance);
        let key = (record.namespace, record.id);
        // The slot just freed by firing makes room, so this insert cannot hit the limit.
        let handle = self
            .wheel
            .insert(previous.saturating_add(advance), record)
            .expect("re-arming reuses the fired timer's place");
        self.handles.insert(key, handle);
    }
}

fn duration_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl TimerState for TimerTable {
    type Command = Command;
    type Fired = Expiration;

    fn apply(&mut self, command: Command, now: Now) {
        // A dropped receiver means the client went away; there is nobody left to tell.
        match command {
            Command::Register { timers, reply } => {
                let results = timers
                    .into_iter()
                    .map(|timer| self.register(timer, now))
                    .collect();
                let _ = reply.send(results);
            }
            Command::Cancel { timer, reply } => {
                let _ = reply.send(self.cancel(&timer));
            }
            Command::Get { timer, reply } => {
                let result = self
                    .lookup_pending(&timer)
                    .map(|handle| self.view_of(handle, now));
                let _ = reply.send(result);
            }
            Command::Touch { timer, ttl, reply } => {
                let _ = reply.send(self.touch(&timer, ttl, now));
            }
            Command::Pending { query, reply } => {
                let _ = reply.send(self.pending(query, now));
            }
        }
    }

    fn fire_due(&mut self, now: Now, fired: &mut Vec<Expiration>) {
        let mut expired = Vec::new();
        self.wheel.advance(now.monotonic, &mut expired);
        fired.reserve(expired.len());
        for entry in expired {
            fired.push(self.expire(entry.value, entry.deadline, now));
        }
    }

    fn next_expiration(&self) -> Option<u64> {
        self.wheel.next_expiration()
    }
}
