//! Waiting for a state that has no event to await (a lease taken over, a row written by
//! another process): the condition is checked again and again, and a test that waits in
//! vain fails with what it was waiting for and a report of the state.

use std::future::Future;
use std::time::{Duration, Instant};

/// Checks `condition` every `poll` until it holds; after `patience`, panics with `what`,
/// the condition's last explanation and `report()`.
pub(crate) async fn eventually<F, Fut, R, RFut>(
    what: &str,
    patience: Duration,
    poll: Duration,
    mut condition: F,
    report: R,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
    R: FnOnce() -> RFut,
    RFut: Future<Output = String>,
{
    let deadline = Instant::now() + patience;
    loop {
        let Err(explanation) = condition().await else {
            return;
        };
        if Instant::now() > deadline {
            panic!(
                "still not true after {patience:?}: {what} ({explanation})\n{}",
                report().await
            );
        }
        tokio::time::sleep(poll).await;
    }
}
