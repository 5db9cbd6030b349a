//! Timer ids: handed out by the database sequence `tickd_timer_ids` in blocks, so that a
//! replica asks the database for ids once per thousand timers, and whether an id was ever
//! handed out (a cancel of an id that fired is told from one of an id never issued).

use crate::cluster::connections::Connections;
use crate::cluster::error::ClusterError;
use crate::domain::{TimerError, TimerId};

/// Ids are handed out by a database sequence in blocks of this many (its INCREMENT), so a
/// replica asks for ids once per thousand timers.
pub(super) const ID_BLOCK: u64 = 1_000;

/// Blocks a replica takes from the sequence in one statement.
pub(super) const ID_BLOCKS_AT_ONCE: i32 = 8;

/// The block of ids a replica is handing out, and blocks taken but not yet begun.
#[derive(Default)]
pub(super) struct IdBlock {
    pub(super) next: u64,
    pub(super) end: u64,
    /// Blocks taken from the sequence and not yet begun.
    pub(super) spare: Vec<u64>,
}

impl IdBlock {
    /// `count` new ids. Blocks are taken from the sequence several at a time (the
    /// sequence hands out one per `nextval`), so that concurrent calls, which wait for
    /// each other on this block's lock, rarely wait for a round trip.
    pub(super) async fn allocate(
        &mut self,
        connections: &Connections,
        count: usize,
    ) -> Result<Vec<u64>, ClusterError> {
        let mut ids = Vec::with_capacity(count);
        while ids.len() < count {
            if self.next == self.end {
                if self.spare.is_empty() {
                    let rows = connections
                        .client()
                        .await?
                        .query(
                            "SELECT nextval('tickd_timer_ids') FROM generate_series(1, $1)",
                            &[&ID_BLOCKS_AT_ONCE],
                        )
                        .await
                        .map_err(ClusterError::query("allocating timer ids"))?;
                    self.spare
                        .extend(rows.iter().map(|row| row.get::<_, i64>(0) as u64));
                }
                let start = self.spare.pop().expect("blocks were just taken");
                self.next = start;
                self.end = start + ID_BLOCK;
            }
            ids.push(self.next);
            self.next += 1;
        }
        Ok(ids)
    }
}

/// Whether an id was ever handed out (so it fired or was cancelled, rather than never
/// existed): the sequence has passed its self.
pub(super) async fn was_issued(connections: &Connections, id: TimerId) -> Result<bool, TimerError> {
    let row = connections
        .client()
        .await?
        .query_one("SELECT last_value FROM tickd_timer_ids", &[])
        .await
        .map_err(ClusterError::query("reading ids"))?;
    let last_block_start = row.get::<_, i64>(0) as u64;
    Ok(id.0 > 0 && id.0 < last_block_start + ID_BLOCK)
}
