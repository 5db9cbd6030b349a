//! The service's timer state, owned by the worker thread: every pending timer in the
//! wheel, plus the indexes the API needs (id, key, namespace counts).
//!
//! All of it lives on one thread, so each command is applied whole or not at all: a
//! failing item changes nothing, and no lock is ever taken.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use tokio::sync::oneshot;
use tracing::warn;

use super::clock::Now;
use super::journal::Journal;
use super::namespaces::{Admission, Namespaces};
pub use super::page::{PageToken, ALL_NAMESPACES};
use super::TimerState;
use crate::metrics::Metrics;
use crate::store::frame::TimerFields;
use crate::store::records::{self as durable, record::Kind, Record};
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
    #[error("{0}")]
    PermissionDenied(String),
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

impl TimerView {
    /// About what this timer takes in a listing on the wire: its variable-length fields
    /// plus a generous allowance for the fixed ones.
    pub fn listed_bytes(&self) -> usize {
        self.payload.len() + self.namespace.len() + self.key.as_ref().map_or(0, String::len) + 96
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub timer: TimerView,
    /// False when the key already existed and the existing timer is returned.
    pub created: bool,
}

/// Storage positions one listing page (or one snapshot chunk) looks at, at most: about a
/// millisecond of the worker's time, so that listing a small namespace among millions of
/// timers never stalls firing. A page may hence come back short, even empty, with a token
/// to continue from.
const SCAN_POSITIONS: usize = 65_536;

#[derive(Debug, Clone)]
pub struct PendingQuery {
    /// None: every namespace.
    pub namespace: Option<String>,
    pub page_size: usize,
    /// A page ends once its timers hold this many bytes (one timer at least), so that the
    /// answer fits what clients accept.
    pub max_bytes: usize,
    pub after: Option<PageToken>,
}

#[derive(Debug, Clone, Default)]
pub struct PendingPage {
    pub count: u64,
    pub timers: Vec<TimerView>,
    pub next_page_token: Option<PageToken>,
}

/// What the worker hands the delivery task, in the order it happened.
#[derive(Debug)]
pub enum Handoff {
    Fired(Expiration),
    /// The table forgot this namespace, after every expiration it fired there: the hold
    /// it had on the live namespaces (see [`crate::namespaces`]) is the receiver's to let go.
    Forgotten(Arc<str>),
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

impl Expiration {
    /// An expiration fired before a restart and never settled, as the store kept it.
    pub fn recovered(fired: durable::Fired) -> Option<Self> {
        let timer = fired.timer?;
        Some(Self {
            id: TimerId(timer.id),
            namespace: Arc::from(timer.namespace.as_str()),
            key: (!timer.key.is_empty()).then_some(timer.key),
            payload: timer.payload,
            deadline_unix: timer.deadline_unix_nanos,
            fired_unix: fired.fired_unix_nanos,
            repeat: OptionalNanos(timer.repeat_nanos).get(),
            ttl: OptionalNanos(timer.ttl_nanos).get(),
            fired_count: timer.fired_count,
            late: false,
        })
    }
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
        reply: Reply<Result<PendingPage, TimerError>>,
    },
}

#[derive(Debug, Clone, Copy)]
pub struct TableConfig {
    pub tick: Duration,
    pub max_pending: usize,
    /// 0: no per-namespace quota.
    pub max_pending_per_namespace: u64,
    /// Live namespaces at most (see [`crate::namespaces`]); 0: no limit.
    pub max_namespaces: usize,
}

/// What the wheel holds for each pending timer. Every pending timer has one, so it is kept
/// to 72 bytes: with the wheel's own fields an entry is 96 bytes, and a timer whose key and
/// payload fit in 16 bytes needs no other allocation.
#[derive(Debug)]
struct TimerRecord {
    id: u64,
    deadline_unix: u64,
    repeat: OptionalNanos,
    ttl: OptionalNanos,
    fired_count: u64,
    /// The key's `key_len` bytes followed by the payload, inline up to 16 bytes.
    key_and_payload: SmallVec<[u8; 16]>,
    namespace: u32,
    /// At most `Limits::max_key_len` (256), checked before a timer gets here.
    key_len: u16,
    /// Recovered with its deadline already past: it fires at once, marked late.
    late: bool,
}

impl TimerRecord {
    /// Packs a key and payload into one buffer (see `key_and_payload`).
    fn pack(key: Option<&str>, payload: &[u8]) -> (SmallVec<[u8; 16]>, u16) {
        let key = key.unwrap_or_default();
        let key_len = u16::try_from(key.len()).expect("keys are validated to at most 256 bytes");
        let mut packed = SmallVec::with_capacity(key.len() + payload.len());
        packed.extend_from_slice(key.as_bytes());
        packed.extend_from_slice(payload);
        (packed, key_len)
    }

    fn key(&self) -> Option<&str> {
        let key = &self.key_and_payload[..usize::from(self.key_len)];
        // Only ever packed from a `str`, so the check cannot fail.
        std::str::from_utf8(key).ok().filter(|key| !key.is_empty())
    }

    fn payload(&self) -> &[u8] {
        &self.key_and_payload[usize::from(self.key_len)..]
    }
}

/// The next deadline of a repeating timer that just fired, as (wall clock, monotonic).
///
/// Counted on the wall clock, in which deadlines are stated: one interval after the previous
/// deadline; or, when firings were missed (a restart, a `deadline` already past, a stall),
/// the first point of the same grid after now, so that missed firings collapse into the one
/// that just happened instead of firing in a burst. The monotonic deadline is then the same
/// distance from now, so the timer fires when its stated deadline says.
fn next_repeat(record: &TimerRecord, previous: u64, interval: Duration, now: Now) -> (u64, u64) {
    let interval = duration_nanos(interval).max(1);
    let next_unix = record.deadline_unix.saturating_add(interval);
    let next_monotonic = previous.saturating_add(interval);
    if next_unix > now.unix && next_monotonic > now.monotonic {
        return (next_unix, next_monotonic);
    }
    let missed = now.unix.saturating_sub(record.deadline_unix) / interval + 1;
    let next_unix = record
        .deadline_unix
        .saturating_add(missed.saturating_mul(interval));
    (next_unix, now.monotonic_at(next_unix))
}

/// The log's view of a pending timer, borrowed from its record.
fn timer_fields<'a>(namespaces: &'a Namespaces, record: &'a TimerRecord) -> TimerFields<'a> {
    TimerFields {
        id: record.id,
        namespace: &namespaces[record.namespace].name,
        key: record.key().unwrap_or_default(),
        deadline_unix_nanos: record.deadline_unix,
        payload: record.payload(),
        repeat_nanos: record.repeat.0,
        ttl_nanos: record.ttl.0,
        fired_count: record.fired_count,
    }
}

/// Timer handles by id. A hash map costs about 28 bytes per timer against a B-tree's 45
/// (listings page through the wheel's storage, so no order is needed). It is split in
/// shards by the id's low bits because a hash map grows by rehashing all of it at once: at
/// millions of timers that stalls the worker for a good tenth of a second, a shard's
/// rehash for a sixty-fourth of that.
struct IdIndex {
    shards: Vec<IdMap>,
}

const ID_INDEX_SHARDS: u64 = 64;

/// Ids are spread over the table by FxHash's multiply-and-rotate. A hasher that kept a
/// shard's consecutive ids in neighbouring buckets made registration bursts cheaper, but
/// timers that fire in the order they were registered (the common same-delay case) then
/// leave a trail of tombstones behind a dense run of live ids: the shard rehashed in place
/// over and over (stalls of milliseconds) and lookups of fired ids probed long runs.
type IdMap = FxHashMap<u64, Handle>;

impl Default for IdIndex {
    fn default() -> Self {
        Self {
            shards: (0..ID_INDEX_SHARDS).map(|_| IdMap::default()).collect(),
        }
    }
}

impl IdIndex {
    fn shard(&self, id: u64) -> &IdMap {
        &self.shards[(id % ID_INDEX_SHARDS) as usize]
    }

    fn shard_mut(&mut self, id: u64) -> &mut IdMap {
        &mut self.shards[(id % ID_INDEX_SHARDS) as usize]
    }

    fn get(&self, id: u64) -> Option<Handle> {
        self.shard(id).get(&id).copied()
    }

    fn insert(&mut self, id: u64, handle: Handle) {
        self.shard_mut(id).insert(id, handle);
    }

    fn remove(&mut self, id: u64) {
        self.shard_mut(id).remove(&id);
    }
}

/// An optional duration in 8 bytes (`Option<Duration>` takes 16): 0 means none, which no
/// repeat interval or ttl can be (both are validated to be positive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OptionalNanos(u64);

impl OptionalNanos {
    fn get(self) -> Option<Duration> {
        (self.0 > 0).then(|| Duration::from_nanos(self.0))
    }
}

impl From<Option<Duration>> for OptionalNanos {
    fn from(duration: Option<Duration>) -> Self {
        Self(duration.map_or(0, duration_nanos))
    }
}

pub struct TimerTable {
    wheel: Wheel<TimerRecord>,
    /// Every pending timer by id (ids are unique across namespaces; lookups check the
    /// namespace too).
    handles: IdIndex,
    namespaces: Namespaces,
    next_id: u64,
    /// With a data directory: where records and deferred replies go.
    journal: Option<Journal>,
    max_pending_per_namespace: u64,
    metrics: Arc<Metrics>,
}

impl TimerTable {
    pub fn new(config: TableConfig, metrics: Arc<Metrics>) -> Self {
        let tick = u64::try_from(config.tick.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        Self {
            wheel: Wheel::new(tick, config.max_pending),
            handles: IdIndex::default(),
            namespaces: Namespaces::new(config.max_namespaces, metrics.clone()),
            next_id: 1,
            journal: None,
            max_pending_per_namespace: config.max_pending_per_namespace,
            metrics,
        }
    }

    /// From now on every mutation is journaled and replies wait until it is durable.
    pub fn attach_journal(&mut self, journal: Journal) {
        self.journal = Some(journal);
    }

    /// Answers a command: at once in memory mode, else once the batch is durable.
    fn respond<T: Send + 'static>(&mut self, reply: oneshot::Sender<T>, value: T) {
        // A dropped receiver means the client went away; there is nobody left to tell.
        match &mut self.journal {
            Some(journal) => journal.on_durable(Box::new(move || {
                let _ = reply.send(value);
            })),
            None => {
                let _ = reply.send(value);
            }
        }
    }

    /// Journals a record, built only when there is a journal.
    fn log(&mut self, record: impl FnOnce(&Self) -> Kind) {
        if self.journal.is_some() {
            let kind = record(self);
            if let Some(journal) = &mut self.journal {
                journal.record(kind);
            }
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
        let existing = self.namespaces.slot(&timer.namespace);
        if let (Some(namespace), Some(key)) = (existing, &timer.key) {
            if let Some(&id) = self.namespaces[namespace].keys.get(key.as_str()) {
                let handle = self.handles.get(id).expect("keys index pending timers");
                return Ok(Registered {
                    timer: self.view_of(handle, now),
                    created: false,
                });
            }
        }
        let quota = self.max_pending_per_namespace;
        let pending = existing.map_or(0, |namespace| self.namespaces[namespace].pending);
        if quota > 0 && pending >= quota {
            return Err(TimerError::ResourceExhausted(format!(
                "namespace {:?} holds its quota of pending timers (--max-pending-per-namespace {quota})",
                timer.namespace
            )));
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
        // Refused registrations must not leave a namespace (and its metric series) behind.
        if self.wheel.len() >= self.wheel.max_pending() {
            return Err(TimerError::ResourceExhausted(format!(
                "max pending timers reached (--max-pending {})",
                self.wheel.max_pending()
            )));
        }
        let namespace = self
            .namespaces
            .intern(&timer.namespace, Admission::Checked)?;
        let (key_and_payload, key_len) = TimerRecord::pack(timer.key.as_deref(), &timer.payload);
        let record = TimerRecord {
            id: self.next_id,
            namespace,
            key_and_payload,
            key_len,
            deadline_unix,
            repeat: timer.repeat.into(),
            ttl: timer.ttl.into(),
            fired_count: 0,
            late: false,
        };
        let handle = match self.wheel.insert(deadline_monotonic, record) {
            Ok(handle) => handle,
            Err(full) => {
                // Not expected (the room was checked above), but a namespace created for
                // nothing must not stay.
                self.namespaces.queue_if_empty(namespace, now.monotonic);
                return Err(TimerError::ResourceExhausted(format!(
                    "max pending timers reached (--max-pending {})",
                    full.limit
                )));
            }
        };
        self.next_id += 1;
        self.index(handle);
        self.metrics.timers_registered.inc();
        if let Some(journal) = &mut self.journal {
            let (_, record) = self.wheel.get(handle).expect("just inserted");
            journal.record_registered(&timer_fields(&self.namespaces, record));
        }
        Ok(Registered {
            timer: self.view_of(handle, now),
            created: true,
        })
    }

    fn index(&mut self, handle: Handle) {
        let (_, record) = self.wheel.get(handle).expect("just inserted");
        let (namespace, id) = (record.namespace, record.id);
        let key = record.key().map(Box::from);
        self.handles.insert(id, handle);
        self.namespaces.add(namespace, id, key);
    }

    fn unindex(&mut self, record: &TimerRecord, now: Now) {
        self.handles.remove(record.id);
        self.namespaces
            .remove(record.namespace, record.key(), now.monotonic);
    }

    /// Finds a pending timer's handle. `Ok(None)` means the id was issued once but the
    /// timer is no longer pending (fired or cancelled).
    fn lookup(&self, timer: &TimerRef) -> Result<Option<Handle>, TimerError> {
        let namespace = self.namespaces.slot(&timer.namespace);
        let found = namespace.and_then(|namespace| {
            let id = match &timer.target {
                Target::Id(id) => id.0,
                Target::Key(key) => *self.namespaces[namespace].keys.get(key.as_str())?,
            };
            self.handle_in(namespace, id)
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

    fn cancel(&mut self, timer: &TimerRef, now: Now) -> Result<bool, TimerError> {
        let Some(handle) = self.lookup(timer)? else {
            return Ok(false);
        };
        let record = self.wheel.cancel(handle).expect("indexed handles are live");
        self.metrics.timers_cancelled.inc();
        self.log(|table| {
            Kind::Cancelled(durable::Cancelled {
                id: record.id,
                namespace: table.namespaces[record.namespace].name.to_string(),
            })
        });
        self.unindex(&record, now);
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
        let given_ttl = ttl;
        let ttl = ttl.or(record.ttl.get()).ok_or_else(|| {
            TimerError::FailedPrecondition(
                "ttl: the timer has no ttl (not a lease); give one in the request".into(),
            )
        })?;
        // A ttl given with the heartbeat becomes the timer's ttl from now on.
        record.ttl = Some(ttl).into();
        let ttl = duration_nanos(ttl);
        record.deadline_unix = now.unix.saturating_add(ttl);
        let (id, namespace, deadline_unix, fired_count) = (
            record.id,
            record.namespace,
            record.deadline_unix,
            record.fired_count,
        );
        self.wheel
            .reschedule(handle, now.monotonic.saturating_add(ttl));
        self.log(|table| {
            Kind::Touched(durable::Touched {
                id,
                namespace: table.namespaces[namespace].name.to_string(),
                deadline_unix_nanos: deadline_unix,
                ttl_nanos: given_ttl.map_or(0, duration_nanos),
                fired_count,
            })
        });
        Ok(self.view_of(handle, now))
    }

    /// One page of the pending timers, in storage order (see [`PageToken`]).
    fn pending(&self, query: PendingQuery, now: Now) -> Result<PendingPage, TimerError> {
        let namespace = match &query.namespace {
            None => None,
            Some(name) => match self.namespaces.slot(name) {
                Some(slot) => Some(slot),
                None => return Ok(PendingPage::default()),
            },
        };
        let number = namespace.map(|slot| self.namespaces[slot].number);
        let start = match query.after {
            None => 0,
            Some(token) => token.local_position(number).ok_or_else(|| {
                TimerError::invalid(
                    "page_token",
                    "comes from the listing of another namespace (or of one since emptied)",
                )
            })?,
        };
        let count = namespace.map_or(self.wheel.len() as u64, |slot| {
            self.namespaces[slot].pending
        });
        if query.page_size == 0 {
            return Ok(PendingPage {
                count,
                ..PendingPage::default()
            });
        }
        let mut timers = Vec::new();
        let mut bytes = 0;
        let mut resume_at = None;
        for (position, timer) in self.wheel.positions_from(start).take(SCAN_POSITIONS) {
            if timers.len() == query.page_size || bytes >= query.max_bytes {
                resume_at = Some(position);
                break;
            }
            resume_at = position.checked_add(1);
            let Some((_, deadline, record)) = timer else {
                continue;
            };
            if namespace.is_none_or(|id| id == record.namespace) {
                let view = self.view(record, deadline, now);
                bytes += view.listed_bytes();
                timers.push(view);
            }
        }
        // Past the last position there is nothing more to list.
        let more =
            resume_at.is_some_and(|position| self.wheel.positions_from(position).next().is_some());
        Ok(PendingPage {
            count,
            timers,
            next_page_token: more.then(|| PageToken::local(number, resume_at.unwrap_or_default())),
        })
    }

    fn view_of(&self, handle: Handle, now: Now) -> TimerView {
        let (deadline, record) = self.wheel.get(handle).expect("indexed handles are live");
        self.view(record, deadline, now)
    }

    fn view(&self, record: &TimerRecord, deadline_monotonic: u64, now: Now) -> TimerView {
        TimerView {
            id: TimerId(record.id),
            namespace: self.namespaces[record.namespace].name.clone(),
            key: record.key().map(str::to_owned),
            deadline_unix: record.deadline_unix,
            payload: Bytes::copy_from_slice(record.payload()),
            repeat: record.repeat.get(),
            ttl: record.ttl.get(),
            remaining: Duration::from_nanos(deadline_monotonic.saturating_sub(now.monotonic)),
            fired_count: record.fired_count,
        }
    }

    /// Turns a fired record into its expiration, and re-arms it if it repeats.
    fn expire(&mut self, mut record: TimerRecord, deadline_monotonic: u64, now: Now) -> Expiration {
        record.fired_count += 1;
        self.metrics.timers_fired.inc();
        let lateness = now.monotonic.saturating_sub(deadline_monotonic);
        self.metrics.firing_lateness.observe(lateness as f64 / 1e9);
        let expiration = Expiration {
            id: TimerId(record.id),
            namespace: self.namespaces[record.namespace].name.clone(),
            key: record.key().map(str::to_owned),
            payload: Bytes::copy_from_slice(record.payload()),
            deadline_unix: record.deadline_unix,
            fired_unix: now.unix,
            repeat: record.repeat.get(),
            ttl: record.ttl.get(),
            fired_count: record.fired_count,
            late: record.late,
        };
        let next = record
            .repeat
            .get()
            .map(|interval| next_repeat(&record, deadline_monotonic, interval, now));
        if let Some(journal) = &mut self.journal {
            let rearmed_deadline = next.map_or(0, |(unix, _)| unix);
            let fields = timer_fields(&self.namespaces, &record);
            journal.record_fired(&fields, now.unix, rearmed_deadline);
        }
        match next {
            Some((unix, monotonic)) => self.rearm(record, unix, monotonic),
            None => self.unindex(&record, now),
        }
        expiration
    }

    /// Puts a fired repeating timer back at its next deadline (see [`next_repeat`]).
    fn rearm(&mut self, mut record: TimerRecord, deadline_unix: u64, deadline_monotonic: u64) {
        record.deadline_unix = deadline_unix;
        record.late = false;
        let id = record.id;
        // The timer was admitted before; re-arming takes back the place it just freed.
        let handle = self
            .wheel
            .readmit(deadline_monotonic, record)
            .expect("re-arming reuses the fired timer's place");
        self.handles.insert(id, handle);
    }

    /// Applies one record from the store at start-up. Replay is idempotent per timer, so a
    /// record already reflected in a (fuzzy) snapshot changes nothing.
    pub fn replay(&mut self, record: Record, now: Now) {
        match record.kind {
            Some(Kind::Registered(timer)) => self.restore(timer, now),
            Some(Kind::Cancelled(cancelled)) => {
                if let Some(handle) = self.find(&cancelled.namespace, cancelled.id) {
                    let record = self.wheel.cancel(handle).expect("indexed handles are live");
                    self.unindex(&record, now);
                }
            }
            Some(Kind::Touched(touched)) => {
                let current = self.find(&touched.namespace, touched.id).filter(|&handle| {
                    // A snapshot may already hold a later firing of a repeating timer; a
                    // heartbeat from before that firing must not move it back.
                    self.wheel
                        .get(handle)
                        .is_some_and(|(_, record)| record.fired_count <= touched.fired_count)
                });
                if let Some(handle) = current {
                    self.move_deadline(handle, touched.deadline_unix_nanos, now);
                    if touched.ttl_nanos > 0 {
                        if let Some((_, record)) = self.wheel.get_mut(handle) {
                            record.ttl = OptionalNanos(touched.ttl_nanos);
                        }
                    }
                }
            }
            Some(Kind::Fired(fired)) => self.replay_fired(fired, now),
            Some(Kind::Settled(_)) | None => {}
            Some(Kind::NextId(next_id)) => self.next_id = self.next_id.max(next_id),
        }
    }

    fn find(&self, namespace: &str, id: u64) -> Option<Handle> {
        let namespace = self.namespaces.slot(namespace)?;
        self.handle_in(namespace, id)
    }

    /// The pending timer with this id, if it belongs to this namespace.
    fn handle_in(&self, namespace: u32, id: u64) -> Option<Handle> {
        let handle = self.handles.get(id)?;
        let (_, record) = self.wheel.get(handle)?;
        (record.namespace == namespace).then_some(handle)
    }

    fn replay_fired(&mut self, fired: durable::Fired, now: Now) {
        let Some(timer) = fired.timer else {
            return;
        };
        let Some(handle) = self.find(&timer.namespace, timer.id) else {
            return;
        };
        let (_, record) = self
            .wheel
            .get_mut(handle)
            .expect("indexed handles are live");
        if record.fired_count >= timer.fired_count {
            return;
        }
        record.fired_count = timer.fired_count;
        match fired.rearmed_deadline_unix_nanos {
            0 => {
                let record = self.wheel.cancel(handle).expect("indexed handles are live");
                self.unindex(&record, now);
            }
            rearmed => self.move_deadline(handle, rearmed, now),
        }
    }

    fn move_deadline(&mut self, handle: Handle, deadline_unix: u64, now: Now) {
        if let Some((_, record)) = self.wheel.get_mut(handle) {
            record.deadline_unix = deadline_unix;
            record.late = deadline_unix < now.unix;
        }
        self.wheel
            .reschedule(handle, now.monotonic_at(deadline_unix));
    }

    /// Puts a whole timer back (replacing an older copy of it).
    fn restore(&mut self, timer: durable::Timer, now: Now) {
        if let Some(handle) = self.find(&timer.namespace, timer.id) {
            let record = self.wheel.cancel(handle).expect("indexed handles are live");
            self.unindex(&record, now);
        }
        let namespace = self
            .namespaces
            .intern(&timer.namespace, Admission::Restored)
            .expect("restoring is never refused");
        let (key_and_payload, key_len) = TimerRecord::pack(Some(&timer.key), &timer.payload);
        let record = TimerRecord {
            id: timer.id,
            namespace,
            key_and_payload,
            key_len,
            deadline_unix: timer.deadline_unix_nanos,
            repeat: OptionalNanos(timer.repeat_nanos),
            ttl: OptionalNanos(timer.ttl_nanos),
            fired_count: timer.fired_count,
            late: timer.deadline_unix_nanos < now.unix,
        };
        self.next_id = self.next_id.max(timer.id + 1);
        // Recovery restores what was accepted before, even past a since-lowered limit (and
        // through the overlap a fuzzy snapshot's replay can briefly have).
        let (id, deadline) = (timer.id, now.monotonic_at(timer.deadline_unix_nanos));
        match self.wheel.readmit(deadline, record) {
            Ok(handle) => self.index(handle),
            Err(full) => {
                warn!(id, error = %full, "timer not restored: no index space left");
                self.namespaces.queue_if_empty(namespace, now.monotonic);
            }
        }
    }

    /// Streams the next chunk of a snapshot in progress, if any: up to a chunk of timers
    /// from the storage position where the last chunk ended.
    fn continue_snapshot(&mut self) {
        let Some(journal) = &self.journal else {
            return;
        };
        let Some(start) = journal.snapshot_cursor() else {
            return;
        };
        let size = journal.snapshot_chunk_size();
        let mut timers = Vec::with_capacity(size);
        let mut resume_at = None;
        for (position, timer) in self.wheel.positions_from(start).take(SCAN_POSITIONS) {
            if timers.len() == size {
                resume_at = Some(position);
                break;
            }
            resume_at = position.checked_add(1);
            if let Some((_, _, record)) = timer {
                timers.push(timer_fields(&self.namespaces, record));
            }
        }
        let more =
            resume_at.filter(|&position| self.wheel.positions_from(position).next().is_some());
        let journal = self.journal.as_mut().expect("checked above");
        journal.write_snapshot_chunk(timers, more);
    }
}

fn duration_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl TimerState for TimerTable {
    type Command = Command;
    type Fired = Handoff;

    fn apply(&mut self, command: Command, now: Now) {
        crate::faults::panic_if_injected("worker");
        match command {
            Command::Register { timers, reply } => {
                let results = timers
                    .into_iter()
                    .map(|timer| self.register(timer, now))
                    .collect();
                self.respond(reply, results);
            }
            Command::Cancel { timer, reply } => {
                let cancelled = self.cancel(&timer, now);
                self.respond(reply, cancelled);
            }
            Command::Get { timer, reply } => {
                let result = self
                    .lookup_pending(&timer)
                    .map(|handle| self.view_of(handle, now));
                self.respond(reply, result);
            }
            Command::Touch { timer, ttl, reply } => {
                let touched = self.touch(&timer, ttl, now);
                self.respond(reply, touched);
            }
            Command::Pending { query, reply } => {
                let page = self.pending(query, now);
                self.respond(reply, page);
            }
        }
    }

    fn end_batch(&mut self) {
        let next_id = self.next_id;
        if let Some(journal) = &mut self.journal {
            journal.flush();
            journal.maybe_begin_snapshot(next_id);
        }
    }

    fn fire_due(&mut self, now: Now, fired: &mut Vec<Handoff>) {
        let mut expired = Vec::new();
        self.wheel.advance(now.monotonic, &mut expired);
        fired.reserve(expired.len());
        for entry in expired {
            fired.push(Handoff::Fired(self.expire(
                entry.value,
                entry.deadline,
                now,
            )));
        }
        // After this batch's expirations, so that delivery holds what they need first.
        self.namespaces
            .sweep(now.monotonic, |name| fired.push(Handoff::Forgotten(name)));
        self.continue_snapshot();
        if let Some(journal) = &mut self.journal {
            journal.flush();
        }
    }

    fn next_expiration(&self) -> Option<u64> {
        // A snapshot in progress asks to be woken at once for its next chunk.
        let snapshotting = self
            .journal
            .as_ref()
            .is_some_and(Journal::snapshot_in_progress);
        if snapshotting {
            return Some(0);
        }
        match (self.wheel.next_wakeup(), self.namespaces.next_sweep()) {
            (Some(wheel), Some(sweep)) => Some(wheel.min(sweep)),
            (wheel, sweep) => wheel.or(sweep),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_72_bytes_and_keeps_key_and_payload_apart() {
        assert_eq!(std::mem::size_of::<TimerRecord>(), 72);
        for (key, payload) in [
            (None, &b""[..]),
            (None, &b"sixteen bytes!!!"[..]),
            (Some("order-42"), &b"close it"[..]),
            (Some("a-key-that-spills-to-the-heap"), &[7u8; 300][..]),
        ] {
            let (key_and_payload, key_len) = TimerRecord::pack(key, payload);
            let record = TimerRecord {
                id: 1,
                deadline_unix: 0,
                repeat: None.into(),
                ttl: None.into(),
                fired_count: 0,
                key_and_payload,
                namespace: 0,
                key_len,
                late: false,
            };
            assert_eq!(record.key(), key);
            assert_eq!(record.payload(), payload);
            // Up to 16 bytes together need no allocation of their own.
            let inline = key.map_or(0, str::len) + payload.len() <= 16;
            assert_eq!(!record.key_and_payload.spilled(), inline);
        }
    }
}
