//! The replicated backend's timers: [`Timers`] answered from the shared database, with
//! the same answers and errors as the worker's table, so the API cannot tell which store
//! is behind it.
//!
//! Each command runs on its own task as single statements on the shared connections. A
//! registration or heartbeat that moves a deadline inside the load horizon announces it
//! on `tickd_due` in the same statement, so the partition's owner loads it when (and only
//! if) it commits.

use std::future::{ready, Future};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustc_hash::FxHashSet;
use tokio::sync::{Mutex, Semaphore};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::notifications::{due_payload_sql, DUE_CHANNEL};
use super::{ClusterError, Connections, Shared};
use crate::domain::{
    Answer, Due, NewTimer, PageToken, PendingPage, PendingQuery, Registered, Target, TimerError,
    TimerId, TimerRef, TimerView, Timers, ALL_NAMESPACES,
};
use crate::metrics::Metrics;

/// Calls in progress at once; beyond it the API sheds load (RESOURCE_EXHAUSTED).
const MAX_IN_FLIGHT: usize = 4_096;

/// The columns a [`TimerView`] is read from, in [`view_of`]'s order.
const VIEW_COLUMNS: &str =
    "id, namespace, key, deadline, payload, repeat_nanos, ttl_nanos, fired_count";

/// Ids are handed out by a database sequence in blocks of this many (its INCREMENT), so a
/// replica asks for ids once per thousand timers.
const ID_BLOCK: u64 = 1_000;

#[derive(Clone)]
pub(crate) struct ClusterTimers {
    connections: Connections,
    shared: Shared,
    metrics: Arc<Metrics>,
    in_flight: Arc<Semaphore>,
    ids: Arc<Mutex<IdBlock>>,
}

#[derive(Default)]
struct IdBlock {
    next: u64,
    end: u64,
}

impl ClusterTimers {
    pub(crate) fn new(connections: Connections, shared: Shared, metrics: Arc<Metrics>) -> Self {
        Self {
            connections,
            shared,
            metrics,
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            ids: Arc::default(),
        }
    }

    /// Runs one call on a task of its own, within [`MAX_IN_FLIGHT`]: the call is under way
    /// (or refused) when this returns, as [`Timers`] promises.
    fn spawn<T, F>(&self, call: impl FnOnce(Self) -> F) -> Answer<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, TimerError>> + Send + 'static,
    {
        let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
            return Box::pin(ready(Err(TimerError::ResourceExhausted(format!(
                "this replica has {MAX_IN_FLIGHT} calls in progress on the database, \
                 the most it takes at once; retry later"
            )))));
        };
        let call = tokio::spawn(call(self.clone()));
        Box::pin(async move {
            let answer = call
                .await
                .unwrap_or_else(|_| Err(TimerError::Unavailable("the replica stopped".into())));
            drop(permit);
            answer
        })
    }

    async fn register(&self, timers: Vec<NewTimer>) -> Vec<Result<Registered, TimerError>> {
        match self.try_register(&timers).await {
            Ok(registered) => registered.into_iter().map(Ok).collect(),
            Err(error) => {
                let error = TimerError::from(error);
                timers.iter().map(|_| Err(error.clone())).collect()
            }
        }
    }

    /// Inserts every timer whose key is new, then answers the others with the timer that
    /// holds their key.
    async fn try_register(&self, timers: &[NewTimer]) -> Result<Vec<Registered>, ClusterError> {
        if timers.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.shared.unix_now();
        let ids = self.allocate_ids(timers.len()).await?;
        let deadlines: Vec<u64> = timers.iter().map(|t| deadline_of(t.due, now)).collect();
        let inserted = self.insert(timers, &ids, &deadlines).await?;
        let mut registered = Vec::with_capacity(timers.len());
        for ((timer, id), deadline) in timers.iter().zip(ids).zip(deadlines) {
            if inserted.contains(&id) {
                self.metrics.timers_registered.inc();
                registered.push(Registered {
                    timer: new_view(timer, id, deadline, now),
                    created: true,
                    replaced: false,
                });
            } else {
                registered.push(self.existing_key(timer, now).await?);
            }
        }
        Ok(registered)
    }

    /// Returns the ids of the timers inserted (not those whose key was taken).
    async fn insert(
        &self,
        timers: &[NewTimer],
        ids: &[u64],
        deadlines: &[u64],
    ) -> Result<FxHashSet<u64>, ClusterError> {
        let ids_param: Vec<i64> = ids.iter().map(|&id| id as i64).collect();
        let namespaces: Vec<&str> = timers.iter().map(|t| t.namespace.as_str()).collect();
        let keys: Vec<Option<&str>> = timers.iter().map(|t| t.key.as_deref()).collect();
        let partitions: Vec<i32> = ids
            .iter()
            .map(|&id| self.shared.partition_of(id) as i32)
            .collect();
        let deadlines: Vec<i64> = deadlines.iter().map(|&deadline| deadline as i64).collect();
        let payloads: Vec<&[u8]> = timers.iter().map(|t| &t.payload[..]).collect();
        let repeats: Vec<Option<i64>> = timers.iter().map(|t| nanos(t.repeat)).collect();
        let ttls: Vec<Option<i64>> = timers.iter().map(|t| nanos(t.ttl)).collect();
        let statement = format!(
            "WITH inserted AS (
                INSERT INTO tickd_timers
                    (id, namespace, key, partition, deadline, payload, repeat_nanos, ttl_nanos)
                SELECT * FROM unnest($1::INT8[], $2::TEXT[], $3::TEXT[], $4::INT4[], $5::INT8[],
                                     $6::BYTEA[], $7::INT8[], $8::INT8[])
                ON CONFLICT (namespace, key) WHERE key IS NOT NULL DO NOTHING
                RETURNING id, namespace, partition, deadline, version)
             SELECT id, {} FROM inserted",
            announce_if_due(9)
        );
        let rows = self
            .connections
            .client()
            .await?
            .query(
                &statement,
                &[
                    &ids_param,
                    &namespaces,
                    &keys,
                    &partitions,
                    &deadlines,
                    &payloads,
                    &repeats,
                    &ttls,
                    &self.announce_until(),
                ],
            )
            .await
            .map_err(ClusterError::query("registering timers"))?;
        Ok(rows.iter().map(|row| row.get::<_, i64>(0) as u64).collect())
    }

    /// The timer already registered under `timer`'s key (an idempotent retry).
    async fn existing_key(&self, timer: &NewTimer, now: u64) -> Result<Registered, ClusterError> {
        let statement =
            format!("SELECT {VIEW_COLUMNS} FROM tickd_timers WHERE namespace = $1 AND key = $2");
        let row = self
            .connections
            .client()
            .await?
            .query_opt(&statement, &[&timer.namespace, &timer.key])
            .await
            .map_err(ClusterError::query("reading a timer by key"))?;
        match row {
            Some(row) => Ok(Registered {
                timer: view_of(&row, now),
                created: false,
                replaced: false,
            }),
            // The key's timer fired or was cancelled between the two statements: register
            // this one anew.
            None => Ok(Box::pin(self.try_register(std::slice::from_ref(timer)))
                .await?
                .pop()
                .expect("a registration answers each timer")),
        }
    }

    async fn allocate_ids(&self, count: usize) -> Result<Vec<u64>, ClusterError> {
        let mut block = self.ids.lock().await;
        let mut ids = Vec::with_capacity(count);
        while ids.len() < count {
            if block.next == block.end {
                let row = self
                    .connections
                    .client()
                    .await?
                    .query_one("SELECT nextval('tickd_timer_ids')", &[])
                    .await
                    .map_err(ClusterError::query("allocating timer ids"))?;
                let start = row.get::<_, i64>(0) as u64;
                *block = IdBlock {
                    next: start,
                    end: start + ID_BLOCK,
                };
            }
            ids.push(block.next);
            block.next += 1;
        }
        Ok(ids)
    }

    async fn cancel(&self, timer: &TimerRef) -> Result<bool, TimerError> {
        let (condition, target) = target_condition(&timer.target);
        let statement = format!("DELETE FROM tickd_timers WHERE namespace = $1 AND {condition}");
        let deleted = self
            .connections
            .client()
            .await?
            .execute(&statement, &[&timer.namespace, &*target])
            .await
            .map_err(ClusterError::query("cancelling"))?;
        match (&timer.target, deleted) {
            (_, 1..) => {
                self.metrics.timers_cancelled.inc();
                Ok(true)
            }
            (Target::Id(id), 0) if self.was_issued(*id).await? => Ok(false),
            (_, _) => Err(not_found(timer)),
        }
    }

    /// Whether an id was ever handed out (so it fired or was cancelled, rather than never
    /// existed): the sequence has passed its block.
    async fn was_issued(&self, id: TimerId) -> Result<bool, TimerError> {
        let row = self
            .connections
            .client()
            .await?
            .query_one("SELECT last_value FROM tickd_timer_ids", &[])
            .await
            .map_err(ClusterError::query("reading ids"))?;
        let last_block_start = row.get::<_, i64>(0) as u64;
        Ok(id.0 > 0 && id.0 < last_block_start + ID_BLOCK)
    }

    async fn get(&self, timer: &TimerRef) -> Result<TimerView, TimerError> {
        let (condition, target) = target_condition(&timer.target);
        let statement =
            format!("SELECT {VIEW_COLUMNS} FROM tickd_timers WHERE namespace = $1 AND {condition}");
        let row = self
            .connections
            .client()
            .await?
            .query_opt(&statement, &[&timer.namespace, &*target])
            .await
            .map_err(ClusterError::query("reading a timer"))?;
        let now = self.shared.unix_now();
        row.map(|row| view_of(&row, now))
            .ok_or_else(|| not_found(timer))
    }

    async fn touch(
        &self,
        timer: &TimerRef,
        ttl: Option<Duration>,
    ) -> Result<TimerView, TimerError> {
        let (condition, target) = target_condition(&timer.target);
        let now = self.shared.unix_now();
        let statement = format!(
            "WITH touched AS (
                UPDATE tickd_timers
                SET ttl_nanos = COALESCE($3, ttl_nanos), deadline = $4 + COALESCE($3, ttl_nanos),
                    version = version + 1
                WHERE namespace = $1 AND {condition} AND COALESCE($3, ttl_nanos) IS NOT NULL
                RETURNING {VIEW_COLUMNS}, partition, version)
             SELECT {VIEW_COLUMNS}, {} FROM touched",
            announce_if_due(5)
        );
        let row = self
            .connections
            .client()
            .await?
            .query_opt(
                &statement,
                &[
                    &timer.namespace,
                    &*target,
                    &nanos(ttl),
                    &(now as i64),
                    &self.announce_until(),
                ],
            )
            .await
            .map_err(ClusterError::query("touching a timer"))?;
        match row {
            Some(row) => Ok(view_of(&row, now)),
            // Either no such timer, or one with no ttl: Get tells which.
            None => match self.get(timer).await {
                Ok(_) => Err(TimerError::FailedPrecondition(
                    "ttl: the timer has no ttl (not a lease); give one in the request".into(),
                )),
                Err(error) => Err(error),
            },
        }
    }

    async fn pending(&self, query: PendingQuery) -> Result<PendingPage, TimerError> {
        let scope = query.namespace.as_deref().map_or(ALL_NAMESPACES, scope_of);
        let after = match query.after {
            None => 0,
            Some(token) if token.scope == scope => token.position,
            Some(_) => {
                return Err(TimerError::invalid(
                    "page_token",
                    "comes from the listing of another namespace",
                ))
            }
        };
        let filter = if query.namespace.is_some() {
            "namespace = $1"
        } else {
            "$1::TEXT IS NULL"
        };
        let client = self.connections.client().await?;
        let count_statement = format!("SELECT count(*) FROM tickd_timers WHERE {filter}");
        let count: i64 = client
            .query_one(&count_statement, &[&query.namespace])
            .await
            .map_err(ClusterError::query("listing pending timers"))?
            .get(0);
        let page_statement = format!(
            "SELECT {VIEW_COLUMNS} FROM tickd_timers WHERE {filter} AND id > $2 ORDER BY id LIMIT $3"
        );
        let rows = client
            .query(
                &page_statement,
                &[
                    &query.namespace,
                    &(after as i64),
                    &(query.page_size as i64 + 1),
                ],
            )
            .await
            .map_err(ClusterError::query("listing pending timers"))?;
        let now = self.shared.unix_now();
        let mut timers: Vec<TimerView> = rows.iter().map(|row| view_of(row, now)).collect();
        // The page also ends once it holds `max_bytes` (one timer at least).
        let mut bytes = 0;
        let within_bytes = timers
            .iter()
            .position(|timer| {
                let full = bytes >= query.max_bytes;
                bytes += timer.listed_bytes();
                full
            })
            .unwrap_or(timers.len());
        let more = timers.len() > query.page_size.min(within_bytes);
        timers.truncate(query.page_size.min(within_bytes));
        let next_page_token = match timers.last() {
            Some(last) if more => Some(PageToken {
                scope,
                position: last.id.0,
            }),
            _ => None,
        };
        Ok(PendingPage {
            count: count as u64,
            timers,
            next_page_token,
        })
    }

    /// Deadlines up to here are announced to their owner. Twice the horizon: the owner's
    /// scans reach the rest, and the margin covers a writer whose clock is behind.
    fn announce_until(&self) -> i64 {
        let horizon = self.shared.load_horizon.as_nanos() as u64;
        self.shared.unix_now().saturating_add(2 * horizon) as i64
    }
}

/// A select-list item that sends `tickd_due` for a row whose deadline is at most the
/// parameter `$limit` (pg_notify returns void, hence the cast).
fn announce_if_due(limit: usize) -> String {
    format!(
        "CASE WHEN deadline <= ${limit} THEN pg_notify('{DUE_CHANNEL}', {})::TEXT END",
        due_payload_sql()
    )
}

/// The SQL condition selecting a timer by id or key, with its parameter (`$2`).
fn target_condition(target: &Target) -> (&'static str, Box<dyn ToSql + Sync + Send>) {
    match target {
        Target::Id(id) => ("id = $2", Box::new(id.0 as i64)),
        Target::Key(key) => ("key = $2", Box::new(key.clone())),
    }
}

/// Ties a page token to the namespace it lists (the single node uses its namespace
/// number; here a hash of the name does, halved so it never equals `ALL_NAMESPACES`).
fn scope_of(namespace: &str) -> u32 {
    crc32fast::hash(namespace.as_bytes()) >> 1
}

fn deadline_of(due: Due, now: u64) -> u64 {
    match due {
        Due::After(delay) => now.saturating_add(delay.as_nanos() as u64),
        Due::AtUnix(unix) => unix,
    }
}

fn nanos(duration: Option<Duration>) -> Option<i64> {
    duration.map(|duration| duration.as_nanos().min(i64::MAX as u128) as i64)
}

fn optional_duration(nanos: Option<i64>) -> Option<Duration> {
    nanos.map(|nanos| Duration::from_nanos(nanos as u64))
}

fn new_view(timer: &NewTimer, id: u64, deadline_unix: u64, now: u64) -> TimerView {
    TimerView {
        id: TimerId(id),
        namespace: Arc::from(timer.namespace.as_str()),
        key: timer.key.clone(),
        deadline_unix,
        payload: timer.payload.clone(),
        repeat: timer.repeat,
        ttl: timer.ttl,
        remaining: Duration::from_nanos(deadline_unix.saturating_sub(now)),
        fired_count: 0,
        calendar: None,
    }
}

/// Reads [`VIEW_COLUMNS`].
fn view_of(row: &Row, now: u64) -> TimerView {
    let deadline_unix = row.get::<_, i64>(3) as u64;
    TimerView {
        id: TimerId(row.get::<_, i64>(0) as u64),
        namespace: Arc::from(row.get::<_, &str>(1)),
        key: row.get(2),
        deadline_unix,
        payload: Bytes::copy_from_slice(row.get::<_, &[u8]>(4)),
        repeat: optional_duration(row.get(5)),
        ttl: optional_duration(row.get(6)),
        remaining: Duration::from_nanos(deadline_unix.saturating_sub(now)),
        fired_count: row.get::<_, i64>(7) as u64,
        calendar: None,
    }
}

fn not_found(timer: &TimerRef) -> TimerError {
    match &timer.target {
        Target::Id(id) => TimerError::NotFound(format!(
            "timer {id} not found in namespace {:?}",
            timer.namespace
        )),
        Target::Key(key) => TimerError::NotFound(format!(
            "no pending timer with key {key:?} in namespace {:?}",
            timer.namespace
        )),
    }
}

impl Timers for ClusterTimers {
    fn register(&self, timers: Vec<NewTimer>) -> Answer<Vec<Result<Registered, TimerError>>> {
        self.spawn(|replica| async move { Ok(replica.register(timers).await) })
    }

    fn cancel(&self, timer: TimerRef) -> Answer<bool> {
        self.spawn(|replica| async move { replica.cancel(&timer).await })
    }

    fn get(&self, timer: TimerRef) -> Answer<TimerView> {
        self.spawn(|replica| async move { replica.get(&timer).await })
    }

    fn touch(&self, timer: TimerRef, ttl: Option<Duration>) -> Answer<TimerView> {
        self.spawn(move |replica| async move { replica.touch(&timer, ttl).await })
    }

    fn pending(&self, query: PendingQuery) -> Answer<PendingPage> {
        self.spawn(|replica| async move { replica.pending(query).await })
    }

    fn reschedule(
        &self,
        _timer: TimerRef,
        _due: Due,
        _payload: Option<Bytes>,
    ) -> Answer<TimerView> {
        Box::pin(ready(Err(TimerError::FailedPrecondition(
            "Reschedule is not served with --store postgres yet".into(),
        ))))
    }
}
