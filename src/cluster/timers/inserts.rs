//! New timers of concurrent registrations inserted by one statement (group commit, see
//! `cluster::group_commit`): the NewTimeouts calls that arrive while a replica's previous
//! insert runs go together in its next one, so the database plans and commits once for
//! all of them. Each call is answered once that statement has committed, with which of
//! its timers were inserted (the others found their key taken).

use std::sync::Arc;

use rustc_hash::FxHashSet;

use super::announce::{announce_if_due, announce_until};
use super::columns::{TimerColumns, ANNOUNCE_LIMIT, INSERTED_COLUMNS, INSERTED_ROWS};
use crate::cluster::connections::Connections;
use crate::cluster::error::ClusterError;
use crate::cluster::group_commit::GroupCommit;
use crate::cluster::shared::Shared;
use crate::domain::NewTimer;

/// What one statement inserts at most, in units of [`units`] (a timer, or a KiB of its
/// payload and key if more): what is queued beyond waits for the next. 10,000 small
/// timers, or ~10 MiB of payloads.
const MAX_INSERT_BATCH: usize = 10_000;

/// Statements under way at once: while one runs, the next gathers, so the database is
/// not left idle between a batch's commit and the next batch.
const INSERT_RUNNERS: usize = 2;

/// One call's run of new timers, with their ids and first deadlines.
pub(super) struct InsertRequest {
    pub(super) timers: Vec<NewTimer>,
    pub(super) ids: Vec<u64>,
    pub(super) deadlines: Vec<u64>,
}

/// The ids of the call's timers that were inserted, or why none was.
pub(super) type InsertAnswer = Result<FxHashSet<u64>, String>;

pub(super) type Inserts = Arc<GroupCommit<InsertRequest, InsertAnswer>>;

/// Starts the replica's insert queue.
pub(super) fn start(connections: Connections, shared: Shared) -> Inserts {
    Arc::new(GroupCommit::start(
        INSERT_RUNNERS,
        MAX_INSERT_BATCH,
        units,
        move |requests: Vec<InsertRequest>| {
            let connections = connections.clone();
            let shared = shared.clone();
            async move {
                match insert(&connections, &shared, &requests).await {
                    Ok(inserted) => requests
                        .iter()
                        .map(|request| {
                            Ok(request
                                .ids
                                .iter()
                                .copied()
                                .filter(|id| inserted.contains(id))
                                .collect())
                        })
                        .collect(),
                    Err(error) => {
                        let error = error.to_string();
                        requests.iter().map(|_| Err(error.clone())).collect()
                    }
                }
            }
        },
    ))
}

/// A request's weight against [`MAX_INSERT_BATCH`]: each timer counts one, or one per
/// KiB of its payload and key, so that a batch of large payloads stays a modest
/// statement.
fn units(request: &InsertRequest) -> usize {
    request
        .timers
        .iter()
        .map(|timer| {
            let bytes = timer.payload.len() + timer.key.as_ref().map_or(0, String::len);
            (bytes / 1024).max(1)
        })
        .sum()
}

/// Inserts every timer of `requests` whose key is new, announcing those due soon to
/// their partition's owner; the ids inserted.
async fn insert(
    connections: &Connections,
    shared: &Shared,
    requests: &[InsertRequest],
) -> Result<FxHashSet<u64>, ClusterError> {
    let timers: Vec<&NewTimer> = requests.iter().flat_map(|r| r.timers.iter()).collect();
    let ids: Vec<u64> = requests
        .iter()
        .flat_map(|r| r.ids.iter().copied())
        .collect();
    let deadlines: Vec<u64> = requests
        .iter()
        .flat_map(|r| r.deadlines.iter().copied())
        .collect();
    let columns = TimerColumns::new(shared, &timers, &ids, &deadlines);
    // Only a timer with a key can find its place taken, so only those (and those due
    // soon, to announce) come back: a batch of keyless timers far off returns nothing.
    // Nor does such a batch need ON CONFLICT, which makes every row's insert speculative
    // (a second WAL record and buffer lock per row) even where the key index skips it.
    let on_conflict = if timers.iter().any(|timer| timer.key.is_some()) {
        "ON CONFLICT (namespace, key) WHERE key IS NOT NULL DO NOTHING"
    } else {
        ""
    };
    let statement = format!(
        "WITH inserted AS (
            INSERT INTO tickd_timers ({INSERTED_COLUMNS}) {INSERTED_ROWS} {on_conflict}
            RETURNING id, namespace, key, partition, deadline, version)
         SELECT id, {} FROM inserted WHERE key IS NOT NULL OR deadline <= ${ANNOUNCE_LIMIT}",
        announce_if_due(ANNOUNCE_LIMIT)
    );
    let rows = connections
        .client()
        .await?
        .query(&statement, &columns.parameters(&announce_until(shared)))
        .await
        .map_err(ClusterError::query("registering timers"))?;
    let keyless = timers
        .iter()
        .zip(&ids)
        .filter(|(timer, _)| timer.key.is_none())
        .map(|(_, &id)| id);
    Ok(rows
        .iter()
        .map(|row| row.get::<_, i64>(0) as u64)
        .chain(keyless)
        .collect())
}
