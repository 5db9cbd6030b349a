//! Why the local backend could not start: its data directory, its threads, or a
//! recovery larger than the memory tickd may use.

use super::store::StoreError;

/// Why the local backend could not start.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("opening the data directory: {0}")]
    Store(#[from] StoreError),
    #[error("starting the timer worker thread: {0}")]
    Worker(#[source] std::io::Error),
    #[error("starting the thread that answers calls once durable: {0}")]
    Replies(#[source] std::io::Error),
    /// Recovery would need more memory than tickd can have (the message says how much).
    #[error("{0}")]
    RecoveryTooLarge(String),
    /// The sinks set through the API could not be read back (`sinks.json`).
    #[error("reading the sinks set at run time: {0}")]
    Sinks(String),
}
