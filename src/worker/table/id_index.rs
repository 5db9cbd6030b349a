//! The table's index of timer handles by id.

use rustc_hash::FxHashMap;

use crate::wheel::Handle;

/// Timer handles by id. A hash map costs about 28 bytes per timer against a B-tree's 45
/// (listings page through the wheel's storage, so no order is needed). It is split in
/// shards by the id's low bits because a hash map grows by rehashing all of it at once: at
/// millions of timers that stalls the worker for a good tenth of a second, a shard's
/// rehash for a sixty-fourth of that.
pub(super) struct IdIndex {
    shards: Vec<IdMap>,
}

const ID_INDEX_SHARDS: u64 = 64;

/// Ids are spread over the table by FxHash's multiply-and-rotate. A hasher that kept a
/// shard's consecutive ids in neighbouring buckets made registration bursts cheaper, but
/// timers that fire in the order they were registered (the common same-delay case) then
/// leave a trail of tombstones behind a dense run of live ids: the shard rehashed in place
/// over and over (stalls of milliseconds) and lookups of fired ids probed long runs.
type IdMap = FxHashMap<u64, Handle>;

impl Default for IdIndex {
    fn default() -> Self {
        Self {
            shards: (0..ID_INDEX_SHARDS).map(|_| IdMap::default()).collect(),
        }
    }
}

impl IdIndex {
    fn shard(&self, id: u64) -> &IdMap {
        &self.shards[(id % ID_INDEX_SHARDS) as usize]
    }

    fn shard_mut(&mut self, id: u64) -> &mut IdMap {
        &mut self.shards[(id % ID_INDEX_SHARDS) as usize]
    }

    pub(super) fn get(&self, id: u64) -> Option<Handle> {
        self.shard(id).get(&id).copied()
    }

    pub(super) fn insert(&mut self, id: u64, handle: Handle) {
        self.shard_mut(id).insert(id, handle);
    }

    pub(super) fn remove(&mut self, id: u64) {
        self.shard_mut(id).remove(&id);
    }
}
