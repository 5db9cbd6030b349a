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

    /// A call that needs a pending timer (Reschedule) found none: it fired (a one-shot
    /// timer), was cancelled, or never existed.
    pub fn no_longer_pending(timer: &super::timer::TimerRef) -> Self {
        Self::NotFound(format!(
            "timer {} in namespace {:?} is no longer pending (fired or cancelled)",
            timer.target, timer.namespace
        ))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Target, TimerId, TimerRef};

    #[test]
    fn a_timer_no_longer_pending_is_named_as_its_client_knows_it() {
        let by_id = TimerRef {
            namespace: "leases".into(),
            target: Target::Id(TimerId(202)),
        };
        assert_eq!(
            TimerError::no_longer_pending(&by_id).to_string(),
            "timer 00000000000000ca in namespace \"leases\" is no longer pending (fired or cancelled)"
        );
        let by_key = TimerRef {
            namespace: "leases".into(),
            target: Target::Key("worker-7".into()),
        };
        assert_eq!(
            TimerError::no_longer_pending(&by_key).to_string(),
            "timer with key \"worker-7\" in namespace \"leases\" is no longer pending (fired or cancelled)"
        );
    }
}
