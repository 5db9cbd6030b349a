//! Health as gRPC health checks report it, kept in step with the backend: readiness
//! (`tickd.v1.Timers`) follows whether the backend can answer now, liveness (`""`) whether
//! it can ever again.

use std::time::Duration;

use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;
use tracing::{info, warn};

use crate::api::TimersService;
use crate::domain::{Backend, Health};
use crate::metrics::Metrics;
use crate::proto::timers_server::TimersServer;

/// How often the health watch looks at the backend: a failure shows within this.
const HEALTH_INTERVAL: Duration = Duration::from_millis(100);

/// Keeps health in step with the backend. While a replica cannot reach its database,
/// `tickd.v1.Timers` (what readiness probes ask) is NOT_SERVING, and SERVING again once it
/// can; the server as a whole ("", what liveness probes ask) stays SERVING, since
/// restarting tickd would not bring the database back. Returns when the backend has failed
/// for good; the caller then reports NOT_SERVING everywhere.
pub(super) async fn watch_health(
    backend: &dyn Backend,
    reporter: &HealthReporter,
    metrics: &Metrics,
) -> &'static str {
    let mut ticks = tokio::time::interval(HEALTH_INTERVAL);
    let mut ready = true;
    loop {
        ticks.tick().await;
        match backend.health() {
            Health::Failed(reason) => return reason,
            Health::Unreachable(unreachable) if ready => {
                warn!(?unreachable, "store unreachable: not ready");
                set_ready(reporter, metrics, false).await;
                ready = false;
            }
            Health::Serving if !ready => {
                info!("store reachable again: ready");
                set_ready(reporter, metrics, true).await;
                ready = true;
            }
            _ => {}
        }
    }
}

/// SERVING or NOT_SERVING for `tickd.v1.Timers`, and `tickd_serving`.
async fn set_ready(reporter: &HealthReporter, metrics: &Metrics, ready: bool) {
    reporter
        .set_service_status(
            <TimersServer<TimersService> as tonic::server::NamedService>::NAME,
            serving_status(ready),
        )
        .await;
    metrics.serving.set(i64::from(ready));
}

/// SERVING or NOT_SERVING for every service name: the server ("") and `tickd.v1.Timers`.
pub(super) async fn set_health(reporter: &HealthReporter, metrics: &Metrics, serving: bool) {
    reporter
        .set_service_status("", serving_status(serving))
        .await;
    set_ready(reporter, metrics, serving).await;
}

fn serving_status(serving: bool) -> ServingStatus {
    match serving {
        true => ServingStatus::Serving,
        false => ServingStatus::NotServing,
    }
}
