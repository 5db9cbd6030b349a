//! Partition leases: which replica may fire which partition's timers.
//!
//! Every third of `--lease-ttl` a replica announces itself alive, renews the leases it
//! holds, and evens out the load: with `L` live replicas each holds at most
//! `ceil(partitions / L)`, releasing the excess and claiming free or expired partitions up
//! to that share. Claiming a partition bumps its epoch. The lease times come from the
//! database's clock, so replicas' clocks need not agree.
//!
//! The guarantee that a replica that lost a partition never fires from it again does not
//! rest on this loop noticing in time (it may be paused, or its connection slow): the
//! firing transaction itself locks the partition row and checks owner, epoch and expiry.
//!
//! How the round and firing share the partition rows (see `firing` and
//! docs/replication.md): a firing locks its partitions' rows `FOR KEY SHARE`. A renewal
//! is a plain `UPDATE` of `lease_until`, a column no unique index covers, so it takes
//! `FOR NO KEY UPDATE`, which does not conflict: a renewal never waits for a firing,
//! however long the firing takes. Everything that changes a row's owner or epoch (a
//! claim, a release) locks it `FOR UPDATE SKIP LOCKED` first, which does conflict: it
//! passes over a partition a firing holds, and tries again at a later round, so no
//! owner changes under a firing in flight, and the round never waits for one either.
//! The round runs on a connection of its own, behind nothing else the replica does.

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use super::connections::Connections;
use super::connections::StoreClient;
use super::error::ClusterError;
use super::schedule::ScheduleCommand;
use super::shared::Shared;

/// Lets go of partitions `$2` held by replica `$1`, each locked `FOR UPDATE SKIP LOCKED`
/// first: a firing of this replica in flight holds its rows `FOR KEY SHARE`, and the
/// owner must not change under it (its fence would no longer be true while it writes),
/// nor must the lease round wait for it. Returns the partitions released.
const RELEASE: &str = "
UPDATE tickd_partitions SET owner = NULL, lease_until = NULL
WHERE partition IN (
    SELECT partition FROM tickd_partitions
    WHERE owner = $1 AND partition = ANY($2)
    FOR UPDATE SKIP LOCKED)
RETURNING partition";

#[derive(Clone)]
pub(crate) struct Ownership {
    connections: Connections,
    shared: Shared,
    /// Newly acquired partitions, for the loader to scan.
    acquired: mpsc::UnboundedSender<Vec<u32>>,
    partitions_owned: Gauge,
}

impl Ownership {
    pub(crate) fn new(
        connections: Connections,
        shared: Shared,
        acquired: mpsc::UnboundedSender<Vec<u32>>,
        partitions_owned: Gauge,
    ) -> Self {
        Self {
            connections,
            shared,
            acquired,
            partitions_owned,
        }
    }

    /// Rounds start a third of the lease apart, counted from one round's start to the
    /// next (not from its end): a round slowed by a busy database delays the next only
    /// when it took longer than the period itself, and then the next starts at once.
    pub(crate) async fn run(self, mut stopping: watch::Receiver<bool>) {
        let mut rounds = tokio::time::interval(self.shared.lease_ttl / 3);
        rounds.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = rounds.tick() => {}
                () = super::shared::until_stopped(&mut stopping) => return,
            }
            if let Err(error) = self.round().await {
                warn!(%error, "lease round failed");
            }
        }
    }

    /// One round: renew first (the one statement whose lateness costs a lease), then
    /// announce this replica alive, and release or claim towards a fair share.
    async fn round(&self) -> Result<(), ClusterError> {
        let client = self.connections.client().await?;
        self.renew(&client).await?;
        let live = self.heartbeat(&client).await?;
        self.release_orphans(&client).await?;
        let fair_share = self.shared.partitions.div_ceil(live.max(1)) as usize;
        let held = self.shared.owned.len();
        self.partitions_owned.set(held as i64);
        if held > fair_share {
            let mut excess = self.shared.owned.partitions();
            excess.drain(..fair_share);
            self.release(&client, &excess).await?;
        } else if held < fair_share {
            self.claim(&client, fair_share - held).await?;
        }
        Ok(())
    }

    /// Marks this replica alive for one lease; returns how many replicas are alive.
    async fn heartbeat(&self, client: &StoreClient) -> Result<u32, ClusterError> {
        let ttl_ms = self.ttl_millis();
        client
            .execute(
                "INSERT INTO tickd_replicas (replica, alive_until)
                 VALUES ($1, clock_timestamp() + $2::INT8 * INTERVAL '1 millisecond')
                 ON CONFLICT (replica) DO UPDATE SET alive_until = excluded.alive_until",
                &[&&*self.shared.replica_id, &ttl_ms],
            )
            .await
            .map_err(ClusterError::query("announcing the replica"))?;
        let row = client
            .query_one(
                "SELECT count(*) FROM tickd_replicas WHERE alive_until > clock_timestamp()",
                &[],
            )
            .await
            .map_err(ClusterError::query("counting live replicas"))?;
        Ok(row.get::<_, i64>(0) as u32)
    }

    /// Extends the leases this process holds, at the epochs it was granted; any the
    /// database no longer gives back were lost (taken over by another replica, or
    /// released, while this one was paused or cut off).
    ///
    /// A lease that ran out but that nobody claimed since is renewed too: its owner and
    /// epoch are still this replica's, and a claim is the only thing that changes them
    /// (bumping the epoch), so nobody else fired from it meanwhile. This replica did not
    /// either: a firing checks the lease's time itself, in its own statement. So a renewal
    /// late by a moment (the database busy, this process starved of CPU) costs nothing
    /// but the firings it delayed, where treating it as lost would throw the partition's
    /// timers out of the wheel and load them all again.
    async fn renew(&self, client: &StoreClient) -> Result<(), ClusterError> {
        let (partitions, epochs) = self.held();
        let rows = client
            .query(
                "UPDATE tickd_partitions p
                 SET lease_until = clock_timestamp() + $2::INT8 * INTERVAL '1 millisecond'
                 FROM unnest($3::INT4[], $4::INT8[]) AS mine(partition, epoch)
                 WHERE p.partition = mine.partition AND p.epoch = mine.epoch
                   AND p.owner = $1
                 RETURNING p.partition",
                &[
                    &&*self.shared.replica_id,
                    &self.ttl_millis(),
                    &partitions,
                    &epochs,
                ],
            )
            .await
            .map_err(ClusterError::query("renewing partition leases"))?;
        let renewed: Vec<u32> = rows.iter().map(|row| row.get::<_, i32>(0) as u32).collect();
        let lost: Vec<u32> = self
            .shared
            .owned
            .partitions()
            .into_iter()
            .filter(|partition| !renewed.contains(partition))
            .collect();
        if !lost.is_empty() {
            warn!(partitions = ?lost, "partitions lost");
            self.forget(lost);
        }
        Ok(())
    }

    /// Leases under this replica's name that this process does not hold: left by an
    /// earlier process with the same id (a restart in place), or by a release that failed
    /// or passed over a partition a firing held. Renewing them would keep them from
    /// everyone with nobody firing them, so they are let go, for any replica (this one
    /// included) to claim with a new epoch; one a firing holds still is left for the next
    /// round (see [`RELEASE`]).
    async fn release_orphans(&self, client: &StoreClient) -> Result<(), ClusterError> {
        let (partitions, _) = self.held();
        let released = client
            .query(
                "UPDATE tickd_partitions SET owner = NULL, lease_until = NULL
                 WHERE partition IN (
                     SELECT partition FROM tickd_partitions
                     WHERE owner = $1 AND NOT (partition = ANY($2))
                     FOR UPDATE SKIP LOCKED)
                 RETURNING partition",
                &[&&*self.shared.replica_id, &partitions],
            )
            .await
            .map_err(ClusterError::query("releasing orphaned leases"))?;
        if !released.is_empty() {
            let orphans: Vec<i32> = released.iter().map(|row| row.get(0)).collect();
            info!(partitions = ?orphans, "orphaned leases released");
        }
        Ok(())
    }

    /// The partitions this process holds, with their epochs, as SQL arrays.
    fn held(&self) -> (Vec<i32>, Vec<i64>) {
        let owned = &self.shared.owned;
        owned.tenure_arrays(owned.partitions())
    }

    /// Claims up to `wanted` free or expired partitions, each at a new epoch. Each row is
    /// locked `FOR UPDATE SKIP LOCKED` before its owner changes: a partition whose lease
    /// ran out while its last owner's firing is still in flight (that firing holds the
    /// row `FOR KEY SHARE`) is passed over until that firing has ended, so the takeover
    /// never happens under it, and the firing's own fence stays true to its end.
    async fn claim(&self, client: &StoreClient, wanted: usize) -> Result<(), ClusterError> {
        let rows = client
            .query(
                "UPDATE tickd_partitions
                 SET owner = $1, epoch = epoch + 1,
                     lease_until = clock_timestamp() + $2::INT8 * INTERVAL '1 millisecond'
                 WHERE partition IN (
                     SELECT partition FROM tickd_partitions
                     WHERE owner IS NULL OR lease_until IS NULL OR lease_until < clock_timestamp()
                     ORDER BY partition LIMIT $3
                     FOR UPDATE SKIP LOCKED)
                 RETURNING partition, epoch",
                &[
                    &&*self.shared.replica_id,
                    &self.ttl_millis(),
                    &(wanted as i64),
                ],
            )
            .await
            .map_err(ClusterError::query("claiming partitions"))?;
        if rows.is_empty() {
            return Ok(());
        }
        let mut acquired = Vec::with_capacity(rows.len());
        for row in rows {
            let partition = row.get::<_, i32>(0) as u32;
            let epoch: i64 = row.get(1);
            self.shared.owned.insert(partition, epoch);
            acquired.push(partition);
        }
        acquired.sort_unstable();
        info!(partitions = ?acquired, "partitions acquired");
        let _ = self.acquired.send(acquired);
        Ok(())
    }

    /// Stops firing from `partitions` first, then lets the database give them to others.
    /// A partition a firing of this replica still holds (one taken before the wheel
    /// forgot it) is passed over rather than waited for (see [`RELEASE`]): the next
    /// round's [`Ownership::release_orphans`] lets it go.
    async fn release(&self, client: &StoreClient, partitions: &[u32]) -> Result<(), ClusterError> {
        self.forget(partitions.to_vec());
        let partitions: Vec<i32> = partitions
            .iter()
            .map(|&partition| partition as i32)
            .collect();
        let released: Vec<i32> = client
            .query(RELEASE, &[&&*self.shared.replica_id, &partitions])
            .await
            .map_err(ClusterError::query("releasing partitions"))?
            .iter()
            .map(|row| row.get(0))
            .collect();
        if !released.is_empty() {
            info!(partitions = ?released, "partitions released");
        }
        let firing: Vec<i32> = partitions
            .into_iter()
            .filter(|partition| !released.contains(partition))
            .collect();
        if !firing.is_empty() {
            info!(partitions = ?firing, "partitions still firing: released at the next round");
        }
        Ok(())
    }

    /// On a clean stop: every partition back, and this replica no longer counted as alive.
    pub(crate) async fn leave(&self) {
        let held = self.shared.owned.partitions();
        let client = match self.connections.client().await {
            Ok(client) => client,
            Err(error) => {
                warn!(%error, "leaving the cluster failed; leases run out instead");
                return;
            }
        };
        if let Err(error) = self.release(&client, &held).await {
            warn!(%error, "releasing partitions at shutdown failed");
        }
        let left = client
            .execute(
                "DELETE FROM tickd_replicas WHERE replica = $1",
                &[&&*self.shared.replica_id],
            )
            .await;
        if let Err(error) = left {
            warn!(%error, "leaving the replica table failed");
        }
    }

    fn forget(&self, partitions: Vec<u32>) {
        let tenures = self.shared.owned.tenures(partitions.iter().copied());
        self.shared.owned.remove(&partitions);
        // A stopped worker holds nothing left to forget.
        let _ = self.shared.schedule.send(ScheduleCommand::Forget(tenures));
    }

    fn ttl_millis(&self) -> i64 {
        self.shared.lease_ttl.as_millis() as i64
    }
}
