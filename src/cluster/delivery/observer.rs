//! An observer's task: follows its namespace's expirations in `seq` order and streams a
//! best-effort copy of each. While its registration in `tickd_observers` is live, acks keep
//! the namespace's rows (marked acknowledged) so that it can copy them.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tracing::{warn, Instrument};

use super::cluster_deliveries::ClusterDeliveries;
use super::rows::{expiration_of, EXPIRATION_COLUMNS};
use super::wake::{next_look, Woke};
use crate::cluster::error::ClusterError;
use crate::domain::{Delivered, DeliveryStream};

/// How long an observer's registration lasts unrenewed (it renews at every look).
const OBSERVER_TTL: Duration = Duration::from_secs(10);

/// Copies an observer may have waiting in its stream; beyond it copies are dropped (an
/// observer never slows delivery down).
const OBSERVER_BUFFER: usize = 10_000;

/// Rows an observer reads per query.
const OBSERVER_PAGE: i64 = 1_000;

/// One observer's task: follows the namespace's expirations in `seq` order. While its row
/// in `tickd_observers` is live, acks keep the namespace's expirations for it.
struct Observer {
    name: String,
    /// When its registration was last renewed.
    announced: Option<std::time::Instant>,
    namespace: String,
    sender: mpsc::Sender<Delivered>,
    deliveries: ClusterDeliveries,
}

impl Observer {
    async fn run(mut self, mut stopping: watch::Receiver<bool>) {
        let wakeup = self.deliveries.wakeups.of(&self.namespace);
        if let Err(error) = self.announce().await {
            warn!(namespace = %self.namespace, %error, "starting an observer failed");
            return;
        }
        let mut after = match self.last_seq().await {
            Ok(last) => last,
            Err(error) => {
                warn!(namespace = %self.namespace, %error, "starting an observer failed");
                return;
            }
        };
        loop {
            let woken = wakeup.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let copied = match self.announce().await {
                Ok(()) => self.copy_after(after).await,
                Err(error) => Err(error),
            };
            match copied {
                Ok(last) => after = last,
                Err(error) => warn!(namespace = %self.namespace, %error, "observing failed"),
            }
            match next_look(woken, &self.sender, &mut stopping).await {
                Woke::ToLook | Woke::Polled => {}
                Woke::StreamClosed | Woke::Stopping => break,
            }
        }
        self.leave().await;
    }

    /// Registers (or renews, a third of the way through its time) this observer, so that
    /// acks keep what it has yet to copy.
    async fn announce(&mut self) -> Result<(), ClusterError> {
        let fresh = self
            .announced
            .is_some_and(|announced| announced.elapsed() < OBSERVER_TTL / 3);
        if fresh {
            return Ok(());
        }
        let now = std::time::Instant::now();
        self.deliveries
            .connections
            .client()
            .await?
            .execute(
                "INSERT INTO tickd_observers (namespace, observer, alive_until)
                 VALUES ($1, $2, clock_timestamp() + $3::INT8 * INTERVAL '1 millisecond')
                 ON CONFLICT (namespace, observer) DO UPDATE SET alive_until = excluded.alive_until",
                &[&self.namespace, &self.name, &(OBSERVER_TTL.as_millis() as i64)],
            )
            .await
            .map_err(ClusterError::query("registering an observer"))?;
        self.announced = Some(now);
        Ok(())
    }

    async fn leave(&self) {
        let client = match self.deliveries.connections.client().await {
            Ok(client) => client,
            Err(_) => return, // its registration runs out by itself
        };
        let _ = client
            .execute(
                "DELETE FROM tickd_observers WHERE namespace = $1 AND observer = $2",
                &[&self.namespace, &self.name],
            )
            .await;
    }

    /// Where the observer starts: after everything fired before it subscribed.
    async fn last_seq(&self) -> Result<i64, ClusterError> {
        let row = self
            .deliveries
            .connections
            .client()
            .await?
            .query_one(
                "SELECT COALESCE(max(seq), 0) FROM tickd_expirations WHERE namespace = $1",
                &[&self.namespace],
            )
            .await
            .map_err(ClusterError::query("starting an observer"))?;
        Ok(row.get(0))
    }

    /// Streams a copy of every row after `after`; returns the last `seq` seen.
    async fn copy_after(&self, mut after: i64) -> Result<i64, ClusterError> {
        loop {
            let rows = self
                .deliveries
                .connections
                .client()
                .await?
                .query(
                    &format!(
                        "SELECT {EXPIRATION_COLUMNS} FROM tickd_expirations
                         WHERE namespace = $1 AND seq > $2 ORDER BY seq LIMIT $3"
                    ),
                    &[&self.namespace, &after, &OBSERVER_PAGE],
                )
                .await
                .map_err(ClusterError::query("observing expirations"))?;
            for row in &rows {
                after = row.get(0);
                // As on one node: a copy names no delivery and is the firing's first.
                let copy = Delivered {
                    delivery_id: 0,
                    expiration: Arc::new(expiration_of(row)),
                    attempt: 1,
                };
                // Best-effort: a full stream drops the copy.
                let _ = self.sender.try_send(copy);
            }
            if (rows.len() as i64) < OBSERVER_PAGE {
                return Ok(after);
            }
        }
    }
}

impl ClusterDeliveries {
    /// A stream of copies of the namespace's expirations from now on.
    pub(super) fn observe(&self, namespace: String) -> DeliveryStream {
        let (sender, receiver) = mpsc::channel(OBSERVER_BUFFER);
        let observer = Observer {
            name: self.next_name(),
            announced: None,
            namespace,
            sender,
            deliveries: self.clone(),
        };
        tokio::spawn(
            observer
                .run(self.stopping.clone())
                .instrument(self.span.clone()),
        );
        Box::pin(ReceiverStream::new(receiver))
    }
}
