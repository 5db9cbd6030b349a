//! How the replicated mode fails: connecting, a statement the database refused, a setting
//! it does not support. The API sees each as UNAVAILABLE (the call may be retried).

use crate::domain::TimerError;

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

/// `error` and its causes, `: `-separated. tokio-postgres' own text names only the kind of
/// failure ("db error", "error performing TLS handshake"); the reason an operator needs
/// (the server's message, the certificate problem) is in its causes.
pub(crate) fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
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
