//! [`SinkStore`]: where a backend keeps the sinks set through the API (`tickd.v1.Sinks`),
//! so that they outlive the process: the local backend in a file of its data directory,
//! a replica in the shared database, where every replica reads them. A sink is kept as
//! its namespace and its whole URL (credentials included: they are what each push sends);
//! showing it masked is the caller's business.

use std::collections::BTreeMap;

use super::answer::Answer;

/// The most sinks a store keeps (`SetSink` past it is RESOURCE_EXHAUSTED): each is a
/// task with its connections in every process, so a caller cannot add them without end.
pub const MAX_SINKS: usize = 1_000;

/// The sinks kept, by namespace: namespace → URL.
pub type StoredSinks = BTreeMap<String, String>;

/// The sinks set through the API, kept durably by the backend.
pub trait SinkStore: Send + Sync + 'static {
    /// Every sink kept, as last written (by any replica, for a shared store).
    fn load(&self) -> Answer<StoredSinks>;
    /// Keeps `url` as `namespace`'s sink, replacing the one it had; durable once answered
    /// Ok. RESOURCE_EXHAUSTED, and nothing kept, if it would be sink number
    /// [`MAX_SINKS`] + 1.
    fn put(&self, namespace: String, url: String) -> Answer<()>;
    /// Forgets `namespace`'s sink; durable once answered. False if it had none.
    fn remove(&self, namespace: String) -> Answer<bool>;
    /// Whether other processes write this store too (a shared database): then what runs
    /// here must follow [`Self::load`] now and then, not only this process's own calls.
    fn shared(&self) -> bool;
}

/// The refusal of sink number [`MAX_SINKS`] + 1.
pub(crate) fn too_many_sinks() -> super::TimerError {
    super::TimerError::ResourceExhausted(format!(
        "sinks: {MAX_SINKS} sinks are set, the most tickd keeps; remove one first"
    ))
}
