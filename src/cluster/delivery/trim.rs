//! What keeps `tickd_expirations` bounded: every replica marks, on a period, the
//! expirations that died since the last (see `DEAD`), and deletes the acknowledged rows
//! past their retention, lapsed observers, each namespace's dead rows
//! beyond `--max-dead` and the oldest dead rows across namespaces beyond
//! `--max-dead-total` (counted in `tickd_expirations_dead_dropped_total`, as on one node),
//! and forgets the namespaces that hold nothing (see `cluster::namespaces`). The deletes
//! are idempotent, so replicas need not agree who.

use std::time::Duration;

use tokio::sync::watch;
use tracing::warn;

use super::cluster_deliveries::ClusterDeliveries;
use super::dead::{DEAD, MARK_DEAD};
use crate::cluster::error::ClusterError;

/// How often acknowledged expirations past their retention, and the oldest dead ones
/// beyond `--max-dead` per namespace, are deleted, and the newly dead marked.
const TRIM_INTERVAL: Duration = Duration::from_secs(10);

/// How long an acknowledged expiration stays for observers to copy.
const ACKED_RETENTION: Duration = Duration::from_secs(30);

impl ClusterDeliveries {
    /// Keeps at most `dead_capacity` dead expirations per namespace, the newest, as the
    /// single node does; runs until the replica stops. Every replica runs it: the deletes
    /// are idempotent.
    pub(crate) async fn trim_dead(self, mut stopping: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(TRIM_INTERVAL) => {}
                () = crate::cluster::shared::until_stopped(&mut stopping) => return,
            }
            match self.trim_dead_once().await {
                Ok(0) => {}
                Ok(dropped) => warn!(
                    dropped,
                    "dead expirations over --max-dead or --max-dead-total dropped"
                ),
                Err(error) => warn!(%error, "trimming dead expirations failed"),
            }
            if let Err(error) = self.forget_acknowledged_once().await {
                warn!(%error, "deleting acknowledged expirations failed");
            }
            match crate::cluster::namespaces::forget_empty(&self.connections).await {
                Ok(live) => {
                    self.metrics.namespaces.set(live as i64);
                }
                Err(error) => warn!(%error, "forgetting empty namespaces failed"),
            }
        }
    }
}

impl ClusterDeliveries {
    /// Deletes the expirations acknowledged more than [`ACKED_RETENTION`] ago, and the
    /// registrations of observers that stopped renewing.
    pub async fn forget_acknowledged_once(&self) -> Result<u64, ClusterError> {
        let client = self.connections.client().await?;
        client
            .execute(
                "DELETE FROM tickd_observers WHERE alive_until < clock_timestamp()",
                &[],
            )
            .await
            .map_err(ClusterError::query("deleting lapsed observers"))?;
        client
            .execute(
                "DELETE FROM tickd_expirations
                 WHERE acked_at < clock_timestamp() - $1::INT8 * INTERVAL '1 millisecond'",
                &[&(ACKED_RETENTION.as_millis() as i64)],
            )
            .await
            .map_err(ClusterError::query("deleting acknowledged expirations"))
    }

    /// Brings the dead marks up to date (see [`MARK_DEAD`]), then deletes each
    /// namespace's dead expirations beyond the newest `dead_capacity`, then the oldest
    /// across namespaces beyond `dead_total`; returns how many it deleted (and counts them
    /// as dropped).
    pub async fn trim_dead_once(&self) -> Result<u64, ClusterError> {
        let client = self.connections.client().await?;
        // Marks only speed delivery up (DEAD holds with or without them): a failed pass
        // (say, a deadlock with another replica's delete of the same rows) must not keep
        // the deletes below from bounding the table.
        if let Err(error) = client
            .execute(MARK_DEAD, &[&(self.config.max_attempts as i32)])
            .await
        {
            warn!(error = %error, "marking dead expirations failed; the next trim tries again");
        }
        let per_namespace = client
            .execute(
                &format!(
                    "DELETE FROM tickd_expirations WHERE seq IN (
                        SELECT seq FROM (
                            SELECT seq, row_number() OVER (
                                PARTITION BY namespace ORDER BY seq DESC) AS newer
                            FROM tickd_expirations WHERE {DEAD}
                        ) dead
                        WHERE newer > $2)"
                ),
                &[
                    &(self.config.max_attempts as i32),
                    &(self.config.dead_capacity as i64),
                ],
            )
            .await
            .map_err(ClusterError::query("trimming dead expirations"))?;
        let across = client
            .execute(
                &format!(
                    "DELETE FROM tickd_expirations WHERE seq IN (
                        SELECT seq FROM tickd_expirations WHERE {DEAD}
                        ORDER BY seq DESC OFFSET $2)
                     AND {DEAD}"
                ),
                &[
                    &(self.config.max_attempts as i32),
                    &i64::try_from(self.config.dead_total).unwrap_or(i64::MAX),
                ],
            )
            .await
            .map_err(ClusterError::query(
                "trimming dead expirations across namespaces",
            ))?;
        let dropped = per_namespace + across;
        self.metrics.expirations_dead_dropped.inc_by(dropped);
        Ok(dropped)
    }
}
