//! Byte budgets: how much memory (`--max-memory`) and disk (`--max-disk`) tickd may use
//! for what it holds, so that it refuses new work with RESOURCE_EXHAUSTED before the
//! machine (or the container's memory limit) runs out, instead of being OOM-killed.
//!
//! Counts alone (`--max-pending`, `--max-buffered-total`, ...) cannot do this: their
//! defaults multiplied by the largest payload are hundreds of gigabytes. A budget is
//! accounted as bytes are admitted and released, not sampled from RSS, so a refusal is
//! decided before the bytes exist and a refused call changes nothing.
//!
//! - [`memory`]: the memory budget every holder (the timer table, delivery, the write path)
//!   reserves from and releases to;
//! - [`container`]: the default budget, derived from the cgroup memory limit or physical
//!   memory;
//! - [`size`]: how a byte size is written on the command line (`256MiB`, `2GiB`).

pub mod container;
pub mod memory;
pub mod size;

pub use memory::{MemoryBudget, MemoryReservation};
pub use size::ByteCount;

/// Why a call was refused with RESOURCE_EXHAUSTED: the `reason` label of
/// `tickd_refusals_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// `--max-memory`.
    Memory,
    /// `--max-disk`.
    Disk,
    /// `--max-pending`.
    Pending,
    /// `--max-pending-per-namespace`.
    NamespaceQuota,
    /// `--max-namespaces`.
    Namespaces,
}

impl Refusal {
    pub const ALL: [Refusal; 5] = [
        Refusal::Memory,
        Refusal::Disk,
        Refusal::Pending,
        Refusal::NamespaceQuota,
        Refusal::Namespaces,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Refusal::Memory => "memory",
            Refusal::Disk => "disk",
            Refusal::Pending => "max_pending",
            Refusal::NamespaceQuota => "namespace_quota",
            Refusal::Namespaces => "max_namespaces",
        }
    }
}
