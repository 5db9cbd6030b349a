//! How the replicated mode fails: connecting, a statement the database refused, a setting
//! it does not support. The API sees each as UNAVAILABLE (the call may be retried).

use crate::domain::{with_causes, TimerError};

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("connecting to the store database {database}: {}", with_causes(.source))]
    Connect {
        /// [`Database`]'s description: where, as whom, in which sslmode; no password.
        database: String,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("{context}: {source}")]
    Query {
        context: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("starting the timer worker thread: {0}")]
    Worker(#[source] std::io::Error),
    #[error("{0} is not supported with --store postgres")]
    Unsupported(&'static str),
    #[error("{0}")]
    InvalidConfig(String),
    #[error("settling auto-acknowledged deliveries: {0}")]
    Settle(String),
    /// A group-committed statement's failure, as each of its callers is told it.
    #[error("{0}")]
    Batch(String),
}

/// The API sees a database failure as UNAVAILABLE: the call may be retried.
impl From<ClusterError> for TimerError {
    fn from(error: ClusterError) -> Self {
        Self::Unavailable(format!("the store database failed: {error}"))
    }
}

impl ClusterError {
    /// Whether the server cancelled the statement: its `statement_timeout` ran out (or an
    /// operator cancelled it). Its transaction was rolled back whole.
    pub(crate) fn is_cancelled(&self) -> bool {
        matches!(self, ClusterError::Query { source, .. }
            if source.code() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED))
    }

    /// For `map_err`: names what was being done when the database refused.
    pub(super) fn query(
        context: &'static str,
    ) -> impl FnOnce(tokio_postgres::Error) -> ClusterError {
        move |source| ClusterError::Query { context, source }
    }
}
