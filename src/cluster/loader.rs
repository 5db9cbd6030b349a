//! Keeps a replica's wheel stocked with its partitions' timers that are due within the load
//! horizon, and passes the database's notifications on.
//!
//! Three ways a timer reaches the wheel, which together miss none:
//! - a scan every quarter horizon loads the timers whose deadlines entered the horizon
//!   since the last scan (`watermark < deadline <= now + horizon`);
//! - a newly acquired partition is scanned in full up to the watermark;
//! - a timer registered or touched to a deadline inside the horizon is announced on
//!   `tickd_due` by the same statement that wrote it, so the owner hears of it when it
//!   commits. The owner listens before it scans, and after a lost connection it listens
//!   again and rescans everything, so an announcement missed while disconnected is found.
//!
//! The same connection listens on `tickd_fired`, which wakes subscribers of a namespace.

use std::future::poll_fn;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_postgres::{AsyncMessage, Client, Notification};
use tracing::{info, warn};

use super::database::Database;
use super::error::ClusterError;
use super::notifications::{parse_due, Wakeups, DUE_CHANNEL, FIRED_CHANNEL};
use super::schedule::{DueTimer, ScheduleCommand};
use super::shared::Shared;
use crate::domain::with_causes;

/// A watermark below every deadline (a deadline already past when given may be stored as
/// 0), so a scan from it misses none.
const NOTHING_SCANNED: i64 = -1;

/// How long to wait before connecting again after the listening connection failed.
const RECONNECT_DELAY: Duration = Duration::from_millis(500);

pub(crate) struct Loader {
    database: Database,
    shared: Shared,
    wakeups: Wakeups,
    /// Deadlines up to here have been scanned for every owned partition.
    watermark: i64,
}

/// One listening connection: its client for scans, and the notifications it receives.
struct Listening {
    client: Client,
    notifications: mpsc::UnboundedReceiver<Notification>,
}

impl Loader {
    /// Checks the database is reachable now, so a wrong URL fails the start.
    pub(crate) async fn connect(
        database: &Database,
        shared: Shared,
        wakeups: Wakeups,
    ) -> Result<Self, ClusterError> {
        drop(database.connect().await?);
        Ok(Self {
            database: database.clone(),
            shared,
            wakeups,
            watermark: NOTHING_SCANNED,
        })
    }

    pub(crate) async fn run(
        mut self,
        mut acquired: mpsc::UnboundedReceiver<Vec<u32>>,
        mut stopping: watch::Receiver<bool>,
    ) {
        loop {
            let listening = tokio::select! {
                listening = self.listen() => listening,
                () = super::shared::until_stopped(&mut stopping) => return,
            };
            match listening {
                Ok(listening) => {
                    if self.serve(listening, &mut acquired, &mut stopping).await {
                        return;
                    }
                }
                Err(error) => {
                    warn!(%error, "store listener failed")
                }
            }
            tokio::select! {
                () = tokio::time::sleep(RECONNECT_DELAY) => {}
                () = super::shared::until_stopped(&mut stopping) => return,
            }
        }
    }

    async fn listen(&mut self) -> Result<Listening, ClusterError> {
        let (client, mut connection) = self.database.open().await?;
        let (sender, notifications) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(message) = poll_fn(|context| connection.poll_message(context)).await {
                match message {
                    Ok(AsyncMessage::Notification(notification)) => {
                        if sender.send(notification).is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(error) => {
                        let error = with_causes(&error);
                        warn!(%error, "store listener connection closed");
                        return;
                    }
                }
            }
        });
        client
            .batch_execute(&format!("LISTEN {DUE_CHANNEL}; LISTEN {FIRED_CHANNEL}"))
            .await
            .map_err(ClusterError::query("listening for notifications"))?;
        // Anything announced while no one listened is found by a full scan.
        self.watermark = NOTHING_SCANNED;
        self.scan(&client, &self.shared.owned.partitions(), true)
            .await?;
        self.wakeups.wake_all();
        info!("store listener ready");
        Ok(Listening {
            client,
            notifications,
        })
    }

    /// Returns true when asked to stop, false when the connection failed.
    async fn serve(
        &mut self,
        mut listening: Listening,
        acquired: &mut mpsc::UnboundedReceiver<Vec<u32>>,
        stopping: &mut watch::Receiver<bool>,
    ) -> bool {
        let mut scans = tokio::time::interval(self.shared.load_horizon / 4);
        loop {
            let scanned = tokio::select! {
                notification = listening.notifications.recv() => match notification {
                    Some(notification) => {
                        self.notified(&notification);
                        Ok(())
                    }
                    None => return false,
                },
                Some(partitions) = acquired.recv() => {
                    self.scan(&listening.client, &partitions, false).await
                }
                _ = scans.tick() => {
                    let partitions = self.shared.owned.partitions();
                    self.scan(&listening.client, &partitions, true).await
                }
                () = super::shared::until_stopped(stopping) => return true,
            };
            if let Err(error) = scanned {
                warn!(%error, "scanning for due timers failed");
                return false;
            }
        }
    }

    fn notified(&self, notification: &Notification) {
        match notification.channel() {
            DUE_CHANNEL => match parse_due(notification.payload()) {
                // Only the partition's owner loads it.
                Some(due) => {
                    if let Some(timer) = self.shared.due_timer(due, false) {
                        let _ = self
                            .shared
                            .schedule
                            .send(ScheduleCommand::Load(vec![timer]));
                    }
                }
                None => warn!(
                    payload = notification.payload(),
                    "malformed due notification"
                ),
            },
            FIRED_CHANNEL => self.wakeups.wake(notification.payload()),
            _ => {}
        }
    }

    /// Loads `partitions`' timers due by the end of the horizon: only those past the
    /// watermark when `advance` (then moving it), all of them otherwise (a partition just
    /// acquired). Loading a timer twice is harmless: the wheel keeps one entry per id.
    async fn scan(
        &mut self,
        client: &Client,
        partitions: &[u32],
        advance: bool,
    ) -> Result<(), ClusterError> {
        if partitions.is_empty() {
            return Ok(());
        }
        let horizon_end = self.shared.horizon_end() as i64;
        let (after, until) = if advance {
            (self.watermark, horizon_end)
        } else {
            // Up to the horizon's end too: before the first scan with partitions the
            // watermark is still at its start.
            (NOTHING_SCANNED, self.watermark.max(horizon_end))
        };
        let partition_numbers: Vec<i32> = partitions.iter().map(|&p| p as i32).collect();
        let rows = client
            .query(
                "SELECT namespace, id, partition, deadline, version FROM tickd_timers
                 WHERE partition = ANY($1) AND deadline > $2 AND deadline <= $3",
                &[&partition_numbers, &after, &until],
            )
            .await
            .map_err(ClusterError::query("loading due timers"))?;
        let now = self.shared.unix_now();
        let timers: Vec<DueTimer> = rows
            .iter()
            .filter_map(|row| {
                let overdue = row.get::<_, i64>(3) as u64 <= now;
                self.shared.due_timer_of_row(row, overdue)
            })
            .collect();
        if advance {
            self.watermark = until;
        }
        if !timers.is_empty() {
            let _ = self.shared.schedule.send(ScheduleCommand::Load(timers));
        }
        Ok(())
    }
}
