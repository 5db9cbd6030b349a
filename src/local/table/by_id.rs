//! Maps keyed by timer id: the handles of ids the paged index ([`super::id_index`]) has
//! handed over, and the schedules of cron timers.

use rustc_hash::FxHashMap;

/// A map from timer id, split in shards by the id's low bits. A hash map costs about 28
/// bytes per entry against a B-tree's 45 (listings page through the wheel's storage, so no
/// order is needed). It is split because a hash map grows by rehashing all of it at once:
/// at millions of timers that stalls the worker for a good tenth of a second, a shard's
/// rehash for a sixty-fourth of that.
pub(super) struct ById<V> {
    shards: Vec<FxHashMap<u64, V>>,
}

const SHARDS: u64 = 64;

// Ids are spread over a shard by FxHash's multiply-and-rotate. A hasher that kept a
// shard's consecutive ids in neighbouring buckets made registration bursts cheaper, but
// timers that fire in the order they were registered (the common same-delay case) then
// leave a trail of tombstones behind a dense run of live ids: the shard rehashed in place
// over and over (stalls of milliseconds) and lookups of fired ids probed long runs.

impl<V> Default for ById<V> {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| FxHashMap::default()).collect(),
        }
    }
}

impl<V> ById<V> {
    fn shard(&self, id: u64) -> &FxHashMap<u64, V> {
        &self.shards[(id % SHARDS) as usize]
    }

    fn shard_mut(&mut self, id: u64) -> &mut FxHashMap<u64, V> {
        &mut self.shards[(id % SHARDS) as usize]
    }

    pub(super) fn get(&self, id: u64) -> Option<&V> {
        self.shard(id).get(&id)
    }

    pub(super) fn insert(&mut self, id: u64, value: V) {
        self.shard_mut(id).insert(id, value);
    }

    pub(super) fn remove(&mut self, id: u64) -> Option<V> {
        self.shard_mut(id).remove(&id)
    }
}
