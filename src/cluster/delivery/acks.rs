//! Acknowledgements, group-committed: the Ack calls (and auto-acks) that arrive on a
//! replica while its previous ack statement runs are settled together by the next one,
//! whatever their namespaces (see `cluster::group_commit`). Each caller is answered once
//! that statement has committed, with the deliveries of its own call it settled.
//!
//! The database decides what an ack settles, as with one statement per call: only the
//! attempt named, only while its claim is live (its ack deadline not passed), whichever
//! replica delivered it.

use std::sync::Arc;

use rustc_hash::FxHashSet;

use super::rows::{delivery_id, split_delivery_id};
use crate::cluster::connections::Connections;
use crate::cluster::error::ClusterError;
use crate::cluster::group_commit::GroupCommit;
use crate::domain::TimerError;

/// Settles the deliveries (`$2` seqs, `$3` attempts) of namespaces `$1` (one per delivery)
/// whose claim is still live: deletes them, or, in a namespace with a live observer,
/// marks them acknowledged so that the observer can still copy them. The conditions are
/// those of the rows updated or deleted, so a claim that changed while the statement
/// waited for its row is judged as it is now. Returns `seq, attempts` of each settled.
///
/// It runs on a connection that keeps one plan of it (`Database::with_probe_plans`),
/// and that plan must find each row by its `seq` whatever the table held when it was
/// made. Hence `(... IS NULL) IS TRUE` where `... IS NULL` would do: the planner does not
/// see through it, so it cannot prove the predicates of the partial indexes on
/// unacknowledged and on claimed rows and walk one of them whole. Made on an empty table
/// (and the table is nearly empty in steady state: only what is in flight), the plain
/// form's plan did walk the index of unacknowledged rows for every batch (`EXPLAIN
/// EXECUTE`). With sequential scans, hash and merge joins off, only the probes by `seq`
/// are left, one per delivery, at any batch size.
pub(super) const ACK: &str = "
WITH asked AS (
    SELECT * FROM unnest($1::TEXT[], $2::INT8[], $3::INT4[]) AS a(namespace, seq, attempts)
),
observed AS (
    SELECT DISTINCT o.namespace FROM tickd_observers o
    WHERE o.namespace IN (SELECT namespace FROM asked) AND o.alive_until > clock_timestamp()
),
kept AS (
    UPDATE tickd_expirations e
    SET acked_at = clock_timestamp(), claimed_by = NULL, claim_until = NULL
    FROM asked a
    WHERE e.seq = a.seq AND e.attempts = a.attempts AND e.namespace = a.namespace
      AND (e.acked_at IS NULL) IS TRUE AND (e.claimed_by IS NOT NULL) IS TRUE
      AND e.claim_until > clock_timestamp()
      AND e.namespace IN (SELECT namespace FROM observed)
    RETURNING e.seq, e.attempts
),
gone AS (
    DELETE FROM tickd_expirations e
    USING asked a
    WHERE e.seq = a.seq AND e.attempts = a.attempts AND e.namespace = a.namespace
      AND (e.acked_at IS NULL) IS TRUE AND (e.claimed_by IS NOT NULL) IS TRUE
      AND e.claim_until > clock_timestamp()
      AND e.namespace NOT IN (SELECT namespace FROM observed)
    RETURNING e.seq, e.attempts
)
SELECT seq, attempts FROM kept UNION ALL SELECT seq, attempts FROM gone";

/// Delivery ids settled by one statement at most; what is queued beyond waits for the
/// next.
const MAX_ACK_BATCH: usize = 20_000;

/// One Ack call's part of a batch.
pub(super) struct AckRequest {
    pub(super) namespace: String,
    pub(super) delivery_ids: Vec<u64>,
}

/// The delivery ids of the call that were settled.
pub(super) type AckAnswer = Result<FxHashSet<u64>, TimerError>;

/// The replica's ack queue.
pub(super) type Acks = Arc<GroupCommit<AckRequest, AckAnswer>>;

/// Starts the replica's ack queue on `connections`: one statement at a time.
pub(super) fn start(connections: Connections) -> Acks {
    Arc::new(GroupCommit::start(
        1,
        MAX_ACK_BATCH,
        |request: &AckRequest| request.delivery_ids.len(),
        move |requests: Vec<AckRequest>| {
            let connections = connections.clone();
            async move {
                match settle(&connections, &requests).await {
                    Ok(settled) => answer_each(&requests, &settled),
                    Err(error) => {
                        let error = TimerError::from(error);
                        requests.iter().map(|_| Err(error.clone())).collect()
                    }
                }
            }
        },
    ))
}

/// Runs [`ACK`] for every delivery of `requests`; the delivery ids it settled.
async fn settle(
    connections: &Connections,
    requests: &[AckRequest],
) -> Result<FxHashSet<u64>, ClusterError> {
    let mut namespaces: Vec<&str> = Vec::new();
    let mut seqs: Vec<i64> = Vec::new();
    let mut attempts: Vec<i32> = Vec::new();
    for request in requests {
        for &id in &request.delivery_ids {
            let (seq, attempt) = split_delivery_id(id);
            namespaces.push(&request.namespace);
            seqs.push(seq);
            attempts.push(attempt);
        }
    }
    let rows = connections
        .client()
        .await?
        .query(ACK, &[&namespaces, &seqs, &attempts])
        .await
        .map_err(ClusterError::query("acknowledging"))?;
    Ok(rows
        .iter()
        .map(|row| delivery_id(row.get(0), row.get(1)))
        .collect())
}

/// Each request's share of what was settled. A delivery acked twice in one batch (by
/// two calls at once) counts for the first call only, as if the two had run one after
/// the other.
fn answer_each(requests: &[AckRequest], settled: &FxHashSet<u64>) -> Vec<AckAnswer> {
    let mut credited = FxHashSet::default();
    requests
        .iter()
        .map(|request| {
            Ok(request
                .delivery_ids
                .iter()
                .copied()
                .filter(|id| settled.contains(id) && credited.insert(*id))
                .collect())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_settled_once_is_credited_to_one_call() {
        let request = |namespace: &str, ids: &[u64]| AckRequest {
            namespace: namespace.to_owned(),
            delivery_ids: ids.to_vec(),
        };
        let requests = [
            request("a", &[1, 2, 3]),
            request("a", &[3, 4]),
            request("b", &[5]),
        ];
        let settled: FxHashSet<u64> = [2, 3, 4, 5].into_iter().collect();
        let answers: Vec<Vec<u64>> = answer_each(&requests, &settled)
            .into_iter()
            .map(|answer| {
                let mut ids: Vec<u64> = answer.expect("settled").into_iter().collect();
                ids.sort_unstable();
                ids
            })
            .collect();
        assert_eq!(answers, vec![vec![2, 3], vec![4], vec![5]]);
    }
}
