//! The drain signal: one watch channel set when shutdown begins, which every listener, the
//! per-call accounting and the reloader wait on, so that each ends its own part of the
//! drain without the server telling each one.

use tokio::sync::watch;

/// Resolves once the drain begins.
pub(super) async fn stopped(mut stop_signal: watch::Receiver<bool>) {
    let _ = stop_signal.wait_for(|stopping| *stopping).await;
}
