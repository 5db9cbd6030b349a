//! Announcing deadlines to their partition's owner: a statement that writes a deadline
//! inside the load horizon sends `tickd_due` for its row in the same statement, so the
//! owner loads it when (and only if) the statement commits.

use crate::cluster::notifications::{due_payload_sql, DUE_CHANNEL};
use crate::cluster::shared::Shared;

/// Deadlines up to here are announced to their owner. Twice the horizon: the owner's
/// scans reach the rest, and the margin covers a writer whose clock is behind.
pub(super) fn announce_until(shared: &Shared) -> i64 {
    let horizon = shared.load_horizon.as_nanos() as u64;
    shared.unix_now().saturating_add(2 * horizon) as i64
}

/// A select-list item that sends `tickd_due` for a row whose deadline is at most the
/// parameter `$limit` (pg_notify returns void, hence the cast).
pub(super) fn announce_if_due(limit: usize) -> String {
    format!(
        "CASE WHEN deadline <= ${limit} THEN pg_notify('{DUE_CHANNEL}', {})::TEXT END",
        due_payload_sql()
    )
}
