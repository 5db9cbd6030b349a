//! The one place that chooses what holds the timers: a replica of the shared database
//! named by `--store`, or, without one, the local backend over `--data-dir`. The server
//! gets a [`Backend`] and never learns which.

use std::sync::Arc;

use crate::budget::container::MemoryLimit;
use crate::budget::MemoryBudget;
use crate::cluster::{ClusterError, Replica};
use crate::config::Config;
use crate::domain::Backend;
use crate::local::{LocalBackend, LocalError};
use crate::metrics::Metrics;

/// Why no backend could start.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(transparent)]
    Local(#[from] LocalError),
    #[error("starting the replicated store: {0}")]
    Cluster(#[from] ClusterError),
}

/// Starts the backend `config` asks for. `memory_limit`: what recovery may restore
/// within (the local backend's; a replica restores nothing).
pub(crate) async fn start(
    config: &Config,
    metrics: &Arc<Metrics>,
    memory: &Arc<MemoryBudget>,
    memory_limit: &MemoryLimit,
) -> Result<Box<dyn Backend>, BackendError> {
    Ok(match &config.store {
        Some(url) => {
            let cluster_config = config.cluster(url, memory)?;
            Box::new(Replica::start(cluster_config, metrics.clone()).await?)
        }
        None => Box::new(LocalBackend::start(
            config,
            metrics,
            (memory, memory_limit),
        )?),
    })
}
