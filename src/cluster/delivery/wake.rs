//! When a subscriber's or observer's task looks again: woken by `tickd_fired` (after a
//! short gathering), at the poll interval, or not at all because its client left or the
//! replica is stopping.

use std::pin::Pin;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::domain::Delivered;

/// How often a subscriber looks for expirations it was not woken for: redeliveries, and
/// room made by acks on other replicas.
const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// How long a woken subscriber lets notifications gather before it claims: one claim
/// then takes what several firings (on several replicas) produced, instead of one query
/// per firing per subscriber.
const GATHER: Duration = Duration::from_millis(5);

/// Why a subscriber's or observer's task goes on.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Woke {
    /// Woken: something may be there to look at.
    ToLook,
    /// The poll interval passed without a wake-up.
    Polled,
    /// The client went away.
    StreamClosed,
    /// The replica is stopping or draining.
    Stopping,
}

/// Waits for a `tickd_fired` wake-up (then lets more gather for [`GATHER`]), the poll
/// interval, the client leaving, or the replica stopping.
pub(super) async fn next_look(
    woken: Pin<&mut tokio::sync::futures::Notified<'_>>,
    sender: &mpsc::Sender<Delivered>,
    stopping: &mut watch::Receiver<bool>,
) -> Woke {
    tokio::select! {
        () = woken => {
            tokio::time::sleep(GATHER).await;
            Woke::ToLook
        }
        () = tokio::time::sleep(POLL_INTERVAL) => Woke::Polled,
        () = sender.closed() => Woke::StreamClosed,
        () = crate::cluster::shared::until_stopped(stopping) => Woke::Stopping,
    }
}
