//! The replicas' shared tables as a test reads them: who holds which partition's lease at
//! which epoch, whether a replica's partitions were taken over, and whether the database
//! is drained (nothing pending, nothing awaiting an ack). Each check answers
//! `Err(explanation)` while its state does not hold yet, for [`ReplicaSet::eventually`].

use std::collections::BTreeMap;

use super::ReplicaSet;
use crate::common::postgres::explain;

/// One row of `tickd_partitions`.
#[derive(Debug)]
pub(crate) struct Partition {
    pub(crate) number: i32,
    pub(crate) owner: Option<String>,
    pub(crate) epoch: i64,
}

impl ReplicaSet {
    /// Every row of `tickd_partitions`, by number.
    pub(crate) async fn partitions(&self) -> Vec<Partition> {
        let sql = "SELECT partition, owner, epoch FROM tickd_partitions ORDER BY partition";
        let rows = self
            .db
            .query(sql, &[])
            .await
            .unwrap_or_else(|error| panic!("{sql}: {}", explain(&error)));
        rows.iter()
            .map(|row| Partition {
                number: row.get("partition"),
                owner: row.get("owner"),
                epoch: row.get("epoch"),
            })
            .collect()
    }

    /// Partition → epoch, for the partitions `id` owns now.
    pub(crate) async fn partitions_owned_by(&self, id: &str) -> BTreeMap<i32, i64> {
        self.partitions()
            .await
            .into_iter()
            .filter(|partition| partition.owner.as_deref() == Some(id))
            .map(|partition| (partition.number, partition.epoch))
            .collect()
    }

    pub(crate) async fn each_owns_a_partition(&self, ids: &[&str]) -> Result<(), String> {
        let partitions = self.partitions().await;
        let idle: Vec<&str> = ids
            .iter()
            .copied()
            .filter(|id| {
                !partitions
                    .iter()
                    .any(|partition| partition.owner.as_deref() == Some(*id))
            })
            .collect();
        if idle.is_empty() {
            Ok(())
        } else {
            Err(format!("no partition owned by {idle:?}"))
        }
    }

    pub(crate) async fn owns_a_partition(&self, id: &str) -> Result<(), String> {
        self.each_owns_a_partition(&[id]).await
    }

    /// Whether replica `id` holds an unexpired lease on every partition.
    pub(crate) async fn owns_every_partition(&self, id: &str) -> Result<(), String> {
        let owned: i64 = self
            .db
            .query_one(
                "SELECT count(*) FROM tickd_partitions WHERE owner = $1 AND lease_until > now()",
                &[&id],
            )
            .await
            .map_err(|error| explain(&error))?
            .get(0);
        match owned as usize {
            owned if owned == self.partition_count() => Ok(()),
            owned => Err(format!(
                "{id} holds {owned} of {} partitions",
                self.partition_count()
            )),
        }
    }

    /// Every partition `victim` owned before (`before`: partition → epoch) is owned by
    /// another replica, at a later epoch.
    pub(crate) async fn taken_over(
        &self,
        victim: &str,
        before: &BTreeMap<i32, i64>,
    ) -> Result<(), String> {
        let partitions = self.partitions().await;
        let not_yet: Vec<&Partition> = partitions
            .iter()
            .filter(|partition| before.contains_key(&partition.number))
            .filter(|partition| {
                partition
                    .owner
                    .as_deref()
                    .is_none_or(|owner| owner == victim)
            })
            .collect();
        if not_yet.is_empty() && partitions.len() == self.partition_count() {
            Ok(())
        } else {
            Err(format!("not taken over yet: {not_yet:?}"))
        }
    }

    /// No unexpired lease in `id`'s name (its rows may keep the name with a past lease).
    pub(crate) async fn holds_no_lease(&self, id: &str) -> Result<(), String> {
        let sql = "SELECT partition FROM tickd_partitions WHERE owner = $1 AND lease_until > now()";
        let rows = self
            .db
            .query(sql, &[&id])
            .await
            .unwrap_or_else(|error| panic!("{sql}: {}", explain(&error)));
        let held: Vec<i32> = rows.iter().map(|row| row.get(0)).collect();
        if held.is_empty() {
            Ok(())
        } else {
            Err(format!("{id} still holds leases on partitions {held:?}"))
        }
    }

    /// Waits until nothing is pending and nothing awaits an ack: whatever was going to
    /// fire has fired, and reached a subscriber that acknowledged it.
    pub(crate) async fn wait_until_drained(&self) {
        self.eventually("no timer pending and no expiration unacknowledged", || {
            self.drained()
        })
        .await;
    }

    async fn drained(&self) -> Result<(), String> {
        let timers = self.count_rows("tickd_timers").await;
        // Acknowledged rows stay a while for observers; they are settled.
        let expirations = self
            .count_rows("tickd_expirations WHERE acked_at IS NULL")
            .await;
        if timers == 0 && expirations == 0 {
            Ok(())
        } else {
            Err(format!(
                "{timers} timers pending, {expirations} expirations unacknowledged"
            ))
        }
    }

    /// `SELECT count(*) FROM {table}` (the table may carry a `WHERE`).
    pub(crate) async fn count_rows(&self, table: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM {table}");
        let row = self
            .db
            .query_one(&sql, &[])
            .await
            .unwrap_or_else(|error| panic!("{sql}: {}", explain(&error)));
        row.get(0)
    }
}

/// A takeover moves a partition to a new epoch, which fences the previous owner: each of
/// `before`'s partitions (partition → epoch) is at a later epoch in `after`.
pub(crate) fn assert_epochs_increased(before: &BTreeMap<i32, i64>, after: &[Partition]) {
    for partition in after {
        if let Some(old_epoch) = before.get(&partition.number) {
            assert!(
                partition.epoch > *old_epoch,
                "partition {} taken over by {:?} but its epoch went from {old_epoch} to {}",
                partition.number,
                partition.owner,
                partition.epoch
            );
        }
    }
}
