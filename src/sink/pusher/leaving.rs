//! How a pusher's pushes end when it leaves its subscription: a pause of the sink, or the
//! pusher stopping, seen by each push not yet sent ([`Leaving`]) and by the loop that
//! lets those under way finish before it drops the rest.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use tokio::sync::{mpsc, watch, Notify};
use tokio_stream::StreamExt;

use super::STOP_GRACE;

/// What makes a push not yet sent leave: a pause of the sink, or the pusher stopping.
pub(super) struct Leaving {
    pub(super) paused: watch::Receiver<bool>,
    pub(super) stop: watch::Receiver<bool>,
    /// Told once a push gave its delivery back for leaving (see `Pusher::run`).
    pub(super) given_back: Arc<Notify>,
}

impl Leaving {
    /// Resolves once the sink is paused or the pusher stops.
    pub(super) async fn now(&mut self) {
        tokio::select! {
            () = paused_is(&mut self.paused, true) => {}
            () = stopped(&mut self.stop) => {}
        }
    }

    pub(super) fn is_now(&self) -> bool {
        *self.paused.borrow() || *self.stop.borrow()
    }
}

/// Resolves once the sink's pause is `wanted` (never, if its sender is gone).
pub(super) async fn paused_is(paused: &mut watch::Receiver<bool>, wanted: bool) {
    if paused.wait_for(|paused| *paused == wanted).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Resolves once `stop` says true (or its sender is gone).
pub(super) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// Lets the pushes in flight finish for a moment, then drops the rest; then the acks of
/// those delivered go out.
pub(super) async fn finish(
    mut pushes: FuturesUnordered<impl Future>,
    acks: mpsc::UnboundedSender<u64>,
    acker: tokio::task::JoinHandle<()>,
) {
    finish_pushes(&mut pushes, STOP_GRACE).await;
    drop(acks);
    let _ = tokio::time::timeout(STOP_GRACE, acker).await;
}

/// Lets the pushes in flight finish for at most `grace`, then drops the rest.
pub(super) async fn finish_pushes(pushes: &mut FuturesUnordered<impl Future>, grace: Duration) {
    let _ = tokio::time::timeout(grace, async { while pushes.next().await.is_some() {} }).await;
    pushes.clear();
}
