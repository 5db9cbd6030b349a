//! Registration on the shared database: batches of new timers inserted in one statement,
//! keys already taken answered with their timer (an idempotent retry), and `replace`
//! registrations that take over the pending timer under their key in one statement.
//!
//! A batch is applied in its order: runs of plain registrations go in one statement each,
//! and each replacing one in a statement of its own, so that two items of one batch under
//! the same key meet each other as they would on one node.

use rustc_hash::FxHashSet;

use super::announce::announce_if_due;
use super::cluster_timers::ClusterTimers;
use super::columns::{TimerColumns, ANNOUNCE_LIMIT, INSERTED_COLUMNS, INSERTED_ROWS};
use super::inserts::InsertRequest;
use super::rows::{deadline_of, new_view, view_of, VIEW_COLUMNS};
use crate::budget::Refusal;
use crate::cluster::error::ClusterError;
use crate::domain::{NewTimer, Registered, TimerError};

/// What a replacement rewrites: all the timer is, but its id (so its partition) and its
/// count of firings. The version bump makes the owner's wheel take the new deadline over
/// the old one (see `schedule`), and the firing, which matches the deadline it was given,
/// fires nothing at the old one.
const REPLACED: &str = "deadline = EXCLUDED.deadline, payload = EXCLUDED.payload, \
     repeat_nanos = EXCLUDED.repeat_nanos, ttl_nanos = EXCLUDED.ttl_nanos, \
     cron = EXCLUDED.cron, time_zone = EXCLUDED.time_zone, \
     trace_context = EXCLUDED.trace_context, version = tickd_timers.version + 1";

impl ClusterTimers {
    pub(super) async fn register(
        &self,
        timers: Vec<NewTimer>,
    ) -> Vec<Result<Registered, TimerError>> {
        // Held until the answer: the statement's copy of the request (the request itself
        // is held by the API while it is served).
        let _in_flight = match self.memory.try_reserve(in_flight_bytes(&timers)) {
            Ok(reservation) => reservation,
            Err(exhausted) => {
                let refusal = TimerError::from(exhausted);
                return timers
                    .iter()
                    .map(|_| {
                        self.metrics.budgets.refused(Refusal::Memory);
                        Err(refusal.clone())
                    })
                    .collect();
            }
        };
        let now = self.shared.unix_now();
        let mut deadlines: Vec<Result<u64, TimerError>> = timers
            .iter()
            .map(|timer| first_deadline(timer, now))
            .collect();
        let registered = match self.admit_namespaces(&timers, &mut deadlines).await {
            Ok(()) => self.register_in_order(&timers, &deadlines, now).await,
            Err(error) => Err(error),
        };
        match registered {
            Ok(registered) => registered,
            Err(error) => {
                let error = TimerError::from(error);
                timers.iter().map(|_| Err(error.clone())).collect()
            }
        }
    }

    /// Refuses (in `deadlines`) the timers whose namespace would be one more than
    /// `--max-namespaces` allows, as the single node does; nothing of them is written.
    async fn admit_namespaces(
        &self,
        timers: &[NewTimer],
        deadlines: &mut [Result<u64, TimerError>],
    ) -> Result<(), ClusterError> {
        let namespaces: Vec<&str> = timers
            .iter()
            .zip(deadlines.iter())
            .filter(|(_, deadline)| deadline.is_ok())
            .map(|(timer, _)| timer.namespace.as_str())
            .collect();
        if namespaces.is_empty() {
            return Ok(());
        }
        let refused = self
            .namespaces
            .admit(&self.connections, &namespaces)
            .await?;
        if refused.is_empty() {
            return Ok(());
        }
        for (timer, deadline) in timers.iter().zip(deadlines.iter_mut()) {
            if let (Some(refusal), Ok(_)) = (refused.get(&timer.namespace), &deadline) {
                self.metrics.budgets.refused(Refusal::Namespaces);
                *deadline = Err(refusal.clone());
            }
        }
        Ok(())
    }

    /// Answers each timer in its order: refused ones (no first firing) at once, runs of
    /// plain ones in one statement, replacing ones one by one.
    async fn register_in_order(
        &self,
        timers: &[NewTimer],
        deadlines: &[Result<u64, TimerError>],
        now: u64,
    ) -> Result<Vec<Result<Registered, TimerError>>, ClusterError> {
        let mut answers = Vec::with_capacity(timers.len());
        let mut run: Vec<(&NewTimer, u64)> = Vec::new();
        for (timer, deadline) in timers.iter().zip(deadlines) {
            if let (Ok(deadline), false) = (deadline, timer.replace) {
                run.push((timer, *deadline));
                continue;
            }
            // What came before it is answered first.
            answers.extend(self.register_run(&run, now).await?.into_iter().map(Ok));
            run.clear();
            answers.push(match deadline {
                Ok(deadline) => Ok(self.replace(timer, *deadline, now).await?),
                Err(error) => Err(error.clone()),
            });
        }
        answers.extend(self.register_run(&run, now).await?.into_iter().map(Ok));
        Ok(answers)
    }

    /// Inserts every timer whose key is new, then answers the others with the timer that
    /// holds their key.
    async fn register_run(
        &self,
        run: &[(&NewTimer, u64)],
        now: u64,
    ) -> Result<Vec<Registered>, ClusterError> {
        if run.is_empty() {
            return Ok(Vec::new());
        }
        let (timers, deadlines): (Vec<&NewTimer>, Vec<u64>) = run.iter().copied().unzip();
        let ids = self
            .ids
            .lock()
            .await
            .allocate(&self.connections, timers.len())
            .await?;
        let inserted = self.insert(&timers, &ids, &deadlines).await?;
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
                registered.push(self.existing_key(timer, deadline, now).await?);
            }
        }
        Ok(registered)
    }

    /// Returns the ids of the timers inserted (not those whose key was taken). The
    /// insert is group-committed with those of other calls (see [`super::inserts`]).
    async fn insert(
        &self,
        timers: &[&NewTimer],
        ids: &[u64],
        deadlines: &[u64],
    ) -> Result<FxHashSet<u64>, ClusterError> {
        let request = InsertRequest {
            timers: timers.iter().map(|&timer| timer.clone()).collect(),
            ids: ids.to_vec(),
            deadlines: deadlines.to_vec(),
        };
        self.inserts
            .submit(request)
            .await
            .unwrap_or_else(|| Err("the replica is stopping".to_owned()))
            .map_err(ClusterError::Batch)
    }

    /// Registers `timer`, or replaces the pending timer under its key, in one statement:
    /// the replaced timer keeps its id (the one allocated here goes unused), which is how
    /// the answer tells the two apart.
    async fn replace(
        &self,
        timer: &NewTimer,
        deadline: u64,
        now: u64,
    ) -> Result<Registered, ClusterError> {
        let id = self.ids.lock().await.allocate(&self.connections, 1).await?[0];
        let columns = TimerColumns::new(&self.shared, &[timer], &[id], &[deadline]);
        let statement = format!(
            "WITH upserted AS (
                INSERT INTO tickd_timers ({INSERTED_COLUMNS}) {INSERTED_ROWS}
                ON CONFLICT (namespace, key) WHERE key IS NOT NULL DO UPDATE SET {REPLACED}
                RETURNING {VIEW_COLUMNS}, partition, version)
             SELECT {VIEW_COLUMNS}, {} FROM upserted",
            announce_if_due(ANNOUNCE_LIMIT)
        );
        let row = self
            .connections
            .client()
            .await?
            .query_one(&statement, &columns.parameters(&self.announce_until()))
            .await
            .map_err(ClusterError::query("replacing a timer"))?;
        let timer = view_of(&row, now);
        let replaced = timer.id.0 != id;
        if !replaced {
            self.metrics.timers_registered.inc();
        }
        Ok(Registered {
            timer,
            created: !replaced,
            replaced,
        })
    }

    /// The timer already registered under `timer`'s key (an idempotent retry).
    async fn existing_key(
        &self,
        timer: &NewTimer,
        deadline: u64,
        now: u64,
    ) -> Result<Registered, ClusterError> {
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
            None => Ok(Box::pin(self.register_run(&[(timer, deadline)], now))
                .await?
                .pop()
                .expect("a registration answers each timer")),
        }
    }
}

/// What a batch of registrations holds while it is under way: each timer as the request
/// decoded it and again as the statement's parameters encode it, with a little for its
/// fixed fields.
fn in_flight_bytes(timers: &[NewTimer]) -> u64 {
    const FIXED: usize = 128;
    timers
        .iter()
        .map(|timer| {
            let key = timer.key.as_ref().map_or(0, String::len);
            (timer.payload.len() + key + timer.namespace.len() + FIXED) as u64
        })
        .sum()
}

/// A new timer's first deadline: when it is due, or for a cron timer the first cron time
/// at or after that.
fn first_deadline(timer: &NewTimer, now: u64) -> Result<u64, TimerError> {
    let earliest = deadline_of(timer.due, now);
    match &timer.calendar {
        None => Ok(earliest),
        Some(calendar) => calendar.first_firing(earliest),
    }
}
