//! The one error every backend answers with: why a call, or one item of a batch, was
//! refused. Each variant is a gRPC status code (the mapping is `api::status`); the text is
//! the status message, so it names the field or the limit involved.

/// Why a command (or one item of a batch) was refused. The API maps each variant to a
/// gRPC status code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimerError {
    #[error("{field}: {reason}")]
    InvalidArgument { field: &'static str, reason: String },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    ResourceExhausted(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    PermissionDenied(String),
}

impl TimerError {
    /// The backend is gone: shutting down, or a part failed (its log, a thread) and tickd
    /// is on its way out. Retrying on another replica (or after a restart) is right.
    pub fn stopped() -> Self {
        Self::Unavailable(
            "tickd is unavailable: shutting down, or its log failed (see its log)".into(),
        )
    }

    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidArgument {
            field,
            reason: reason.into(),
        }
    }
}

impl From<crate::budget::memory::MemoryExhausted> for TimerError {
    fn from(exhausted: crate::budget::memory::MemoryExhausted) -> Self {
        TimerError::ResourceExhausted(exhausted.to_string())
    }
}

/// `error` and its causes, `: `-separated. Many libraries' own text names only the kind of
/// failure (tokio-postgres' "db error", hyper's "client error (Connect)"); the reason an
/// operator needs (the server's message, the refused connection) is in the causes.
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
