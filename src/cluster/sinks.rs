//! The replicated backend's [`SinkStore`]: the sinks set through the API are rows of
//! `tickd_sinks` in the shared database, so a sink set through one replica is every
//! replica's. A change is committed before it is answered; each replica reads the table
//! again every [`crate::sink`] poll and starts or stops its pushers to match.

use std::sync::Arc;

use super::connections::Connections;
use super::error::ClusterError;
use crate::domain::{too_many_sinks, Answer, SinkStore, StoredSinks, TimerError, MAX_SINKS};

const LOAD: &str = "SELECT namespace, url FROM tickd_sinks";
/// Inserts or replaces, unless the namespace is new and [`MAX_SINKS`] are set already.
/// Two replicas adding the last sinks at the same moment may both pass the count: the
/// limit guards against a caller adding sinks without end, not against one too many.
const PUT: &str = "INSERT INTO tickd_sinks (namespace, url)
    SELECT $1, $2 WHERE (SELECT count(*) FROM tickd_sinks WHERE namespace <> $1) < $3
    ON CONFLICT (namespace) DO UPDATE SET url = EXCLUDED.url, set_at = clock_timestamp()";
const REMOVE: &str = "DELETE FROM tickd_sinks WHERE namespace = $1";

#[derive(Clone)]
pub(crate) struct ClusterSinks {
    connections: Arc<Connections>,
}

impl ClusterSinks {
    pub(crate) fn new(connections: Connections) -> Self {
        Self {
            connections: Arc::new(connections),
        }
    }
}

impl SinkStore for ClusterSinks {
    fn load(&self) -> Answer<StoredSinks> {
        let connections = self.connections.clone();
        Answer::work(async move {
            let rows = connections
                .client()
                .await?
                .query(LOAD, &[])
                .await
                .map_err(ClusterError::query("reading the sinks"))?;
            Ok(rows
                .iter()
                .map(|row| (row.get::<_, String>(0), row.get::<_, String>(1)))
                .collect())
        })
    }

    fn put(&self, namespace: String, url: String) -> Answer<()> {
        let connections = self.connections.clone();
        Answer::work(async move {
            let written = connections
                .client()
                .await?
                .execute(PUT, &[&namespace, &url, &(MAX_SINKS as i64)])
                .await
                .map_err(ClusterError::query("setting a sink"))?;
            if written == 0 {
                return Err(too_many_sinks());
            }
            Ok(())
        })
    }

    fn remove(&self, namespace: String) -> Answer<bool> {
        let connections = self.connections.clone();
        Answer::work(async move {
            let removed = connections
                .client()
                .await?
                .execute(REMOVE, &[&namespace])
                .await
                .map_err(|error| TimerError::from(ClusterError::query("removing a sink")(error)))?;
            Ok(removed > 0)
        })
    }

    fn shared(&self) -> bool {
        true
    }
}
