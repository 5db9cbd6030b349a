//! [`ClusterTimers`]: the API's [`Timers`] answered from the shared database, each call
//! on a task of its own as single statements on the shared connections. Registration is
//! in `register`, ids in `ids`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Mutex, Semaphore};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::announce::{announce_if_due, announce_until};
use super::ids::{self, IdBlock};
use super::inserts;
use super::rows::{deadline_of, nanos, view_of, VIEW_COLUMNS};
use crate::budget::MemoryBudget;
use crate::cluster::connections::Connections;
use crate::cluster::error::ClusterError;
use crate::cluster::namespaces::NamespaceCap;
use crate::cluster::shared::Shared;
use crate::cluster::trace_column::trace_column;
use crate::domain::{
    Answer, Due, NewTimer, PageToken, PendingPage, PendingQuery, Registered, Target, TimerError,
    TimerRef, TimerView, Timers, TraceContext, ALL_NAMESPACES,
};
use crate::metrics::Metrics;

/// Calls in progress at once; beyond it the API sheds load (RESOURCE_EXHAUSTED).
const MAX_IN_FLIGHT: usize = 4_096;

#[derive(Clone)]
pub(crate) struct ClusterTimers {
    pub(super) connections: Connections,
    pub(super) shared: Shared,
    pub(super) metrics: Arc<Metrics>,
    pub(super) in_flight: Arc<Semaphore>,
    pub(super) ids: Arc<Mutex<IdBlock>>,
    /// `--max-namespaces`, applied to registrations.
    pub(super) namespaces: NamespaceCap,
    /// The replica's memory budget: a registration's bytes are reserved from it while
    /// the call is under way, so one is refused once the budget is reached (by the
    /// replica's wheel, or other calls).
    pub(super) memory: Arc<MemoryBudget>,
    /// New timers of concurrent calls, inserted a batch per statement.
    pub(super) inserts: inserts::Inserts,
}

impl ClusterTimers {
    pub(crate) fn new(
        connections: Connections,
        shared: Shared,
        metrics: Arc<Metrics>,
        namespaces: NamespaceCap,
        memory: Arc<MemoryBudget>,
    ) -> Self {
        Self {
            inserts: inserts::start(connections.clone(), shared.clone()),
            connections,
            shared,
            metrics,
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            ids: Arc::default(),
            namespaces,
            memory,
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
            return Answer::refused(TimerError::ResourceExhausted(format!(
                "this replica has {MAX_IN_FLIGHT} calls in progress on the database, \
                 the most it takes at once; retry later"
            )));
        };
        let call = tokio::spawn(call(self.clone()));
        Answer::work(async move {
            let answer = call
                .await
                .unwrap_or_else(|_| Err(TimerError::Unavailable("the replica stopped".into())));
            drop(permit);
            answer
        })
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
            (Target::Id(id), 0) if ids::was_issued(&self.connections, *id).await? => Ok(false),
            (_, _) => Err(not_found(timer)),
        }
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
        let now = self.shared.unix_now();
        let touched = self
            .move_deadline(
                timer,
                "ttl_nanos = COALESCE($3, ttl_nanos), deadline = $4 + COALESCE($3, ttl_nanos)",
                "COALESCE($3, ttl_nanos) IS NOT NULL",
                &[&nanos(ttl), &(now as i64)],
                "touching a timer",
            )
            .await?;
        match touched {
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

    /// Moves a pending timer's next firing (a lease keeps its ttl, a cron timer its
    /// schedule after this firing), and replaces its payload if one is given.
    async fn reschedule(
        &self,
        timer: &TimerRef,
        due: Due,
        payload: Option<Bytes>,
        trace: Option<Arc<TraceContext>>,
    ) -> Result<TimerView, TimerError> {
        let now = self.shared.unix_now();
        let deadline = deadline_of(due, now) as i64;
        let payload = payload.as_deref();
        let trace = trace_column(trace.as_deref());
        let moved = self
            .move_deadline(
                timer,
                "deadline = $3, payload = COALESCE($4, payload), \
                 trace_context = COALESCE($5, trace_context)",
                "TRUE",
                &[&deadline, &payload, &trace],
                "rescheduling a timer",
            )
            .await?;
        moved
            .map(|row| view_of(&row, now))
            .ok_or_else(|| timer.no_longer_pending())
    }

    /// Updates the pending timer `timer` names (`$1` namespace, `$2` id or key) with
    /// `set` (`$3`, `$4`: `values`) where `only_if` holds, bumping its version, and
    /// announces its new deadline to the owner when due within the horizon (`$5`). Returns
    /// the row as [`VIEW_COLUMNS`], if one was updated.
    async fn move_deadline(
        &self,
        timer: &TimerRef,
        set: &str,
        only_if: &str,
        values: &[&(dyn ToSql + Sync)],
        what: &'static str,
    ) -> Result<Option<Row>, TimerError> {
        let (condition, target) = target_condition(&timer.target);
        let statement = format!(
            "WITH moved AS (
                UPDATE tickd_timers SET {set}, version = version + 1
                WHERE namespace = $1 AND {condition} AND {only_if}
                RETURNING {VIEW_COLUMNS}, partition, version)
             SELECT {VIEW_COLUMNS}, {} FROM moved",
            announce_if_due(3 + values.len())
        );
        let announce_until = self.announce_until();
        let mut parameters: Vec<&(dyn ToSql + Sync)> = vec![&timer.namespace, &*target];
        parameters.extend_from_slice(values);
        parameters.push(&announce_until);
        let row = self
            .connections
            .client()
            .await?
            .query_opt(&statement, &parameters)
            .await
            .map_err(ClusterError::query(what))?;
        Ok(row)
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

    pub(super) fn announce_until(&self) -> i64 {
        announce_until(&self.shared)
    }
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
        timer: TimerRef,
        due: Due,
        payload: Option<Bytes>,
        trace: Option<Arc<TraceContext>>,
    ) -> Answer<TimerView> {
        self.spawn(
            move |replica| async move { replica.reschedule(&timer, due, payload, trace).await },
        )
    }
}
