//! The acks of a pusher's delivered pushes, sent in batches.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::debug;

use super::{ACKS_IN_FLIGHT, ACK_BATCH};
use crate::domain::Expirations;

/// Acknowledges pushed deliveries in batches: whatever was delivered while the previous
/// Ack calls were answered goes in one call, with a few calls in flight. Under load that
/// is one Ack (and one log record) for many pushes instead of one each.
pub(super) async fn acknowledge_in_batches(
    expirations: Arc<dyn Expirations>,
    namespace: String,
    mut delivered_ids: mpsc::UnboundedReceiver<u64>,
) {
    let mut batch = Vec::with_capacity(ACK_BATCH);
    let mut in_flight = JoinSet::new();
    while delivered_ids.recv_many(&mut batch, ACK_BATCH).await > 0 {
        while in_flight.len() >= ACKS_IN_FLIGHT {
            in_flight.join_next().await;
        }
        let answer = expirations.ack(namespace.clone(), std::mem::take(&mut batch));
        let namespace = namespace.clone();
        in_flight.spawn(async move {
            match answer.await {
                Ok(outcome) if outcome.unknown.is_empty() => {}
                // Their claims ended first (a push outlived one): delivered again, at
                // least once.
                Ok(outcome) => debug!(%namespace, unknown = outcome.unknown.len(), "pushed expirations' claims had ended before their ack"),
                Err(error) => debug!(%namespace, %error, "acknowledging pushes failed"),
            }
        });
    }
    while in_flight.join_next().await.is_some() {}
}
