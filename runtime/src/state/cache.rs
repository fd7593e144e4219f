//! `StateCache`: the in-memory write-back cache in front of RocksDB, bounded in entries
//! and in bytes.
//!
//! Invariants:
//! - Each slot holds the CURRENT value of its key: `Some(bytes)`, or `None` for a key known
//!   to be absent (a deletion not yet flushed, or a negative lookup). A slot in the cache
//!   always wins over RocksDB.
//! - A slot is dirty iff it differs from what RocksDB holds; a dirty `None` is a tombstone
//!   that must reach RocksDB as a delete. Dirty slots are only dropped after the caller has
//!   written them (`eviction_candidates`, write, then `remove`; or `mark_clean` then
//!   `clear`), so no update or deletion is ever lost.
//! - `bytes` is the sum of [`slot_bytes`] over the slots: the key (twice: the map and the
//!   recency index), the value and a fixed per-slot overhead. The caller keeps the cache
//!   within `capacity` slots and `max_bytes` bytes by asking [`over_budget`] after each
//!   insert and evicting the least recently used slots ([`eviction_candidates`]) down to
//!   7/8 of both bounds, so write-backs come in batches, not one per record. One slot
//!   larger than the whole budget is evicted as soon as it is not the newest.
//! - `order` maps each slot's last-use tick to its key, one entry per slot: the least
//!   recently used slot is the first entry.
//!
//! [`over_budget`]: StateCache::over_budget
//! [`eviction_candidates`]: StateCache::eviction_candidates

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};

/// Bytes counted per slot besides its key and value: the `HashMap` entry, the `Slot`, the
/// recency entry and the allocators' headers, roughly. Makes a cache of many tiny
/// accumulators count for what it costs.
pub(crate) const SLOT_OVERHEAD_BYTES: usize = 96;

/// What a slot counts against `max_bytes`.
pub(crate) fn slot_bytes(key: &[u8], value: Option<&[u8]>) -> usize {
    2 * key.len() + value.map_or(0, <[u8]>::len) + SLOT_OVERHEAD_BYTES
}

#[derive(Debug)]
struct Slot {
    value: Option<Vec<u8>>,
    dirty: bool,
    /// Key of this slot in `order`.
    tick: u64,
}

#[derive(Debug)]
pub(crate) struct StateCache {
    slots: HashMap<Vec<u8>, Slot>,
    /// Last-use tick -> key; the first entry is the least recently used slot.
    order: BTreeMap<u64, Vec<u8>>,
    next_tick: u64,
    /// Maximum number of slots; at least 1.
    capacity: usize,
    /// Maximum of `bytes`; at least 1.
    max_bytes: usize,
    bytes: usize,
    dirty: usize,
}

impl StateCache {
    pub(crate) fn new(capacity: usize, max_bytes: usize) -> Self {
        Self {
            slots: HashMap::new(),
            order: BTreeMap::new(),
            next_tick: 0,
            capacity: capacity.max(1),
            max_bytes: max_bytes.max(1),
            bytes: 0,
            dirty: 0,
        }
    }

    /// `Some(current value)` if the cache knows `key` (`Some(None)`: known absent),
    /// `None` if RocksDB must be asked.
    pub(crate) fn lookup(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.slots.get(key).map(|slot| slot.value.as_deref())
    }

    /// Like [`lookup`](Self::lookup), and marks a cached `key` as the most recently used.
    pub(crate) fn lookup_touch(&mut self, key: &[u8]) -> Option<Option<&[u8]>> {
        if !self.slots.contains_key(key) {
            return None;
        }
        self.touch(key);
        self.lookup(key)
    }

    /// Evicts the least recently used slots (see
    /// [`eviction_candidates`](Self::eviction_candidates)) and returns the dirty ones
    /// among them, values moved out, sorted by key: the caller must write them back.
    pub(crate) fn take_victims(
        &mut self,
        incoming: usize,
        new_slot: bool,
    ) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let victims: Vec<Vec<u8>> = self
            .eviction_candidates(incoming, new_slot)
            .into_iter()
            .map(<[u8]>::to_vec)
            .collect();
        let mut dirty = Vec::new();
        for key in victims {
            if let Some(slot) = self.slots.remove(key.as_slice()) {
                self.order.remove(&slot.tick);
                self.bytes -= slot_bytes(&key, slot.value.as_deref());
                if slot.dirty {
                    self.dirty -= 1;
                    dirty.push((key, slot.value));
                }
            }
        }
        dirty.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        dirty
    }

    /// Marks `key` (if cached) as the most recently used slot.
    pub(crate) fn touch(&mut self, key: &[u8]) {
        let tick = self.next_tick;
        if let Some(slot) = self.slots.get_mut(key) {
            if let Some(k) = self.order.remove(&slot.tick) {
                self.order.insert(tick, k);
            }
            slot.tick = tick;
            self.next_tick += 1;
        }
    }

    /// Whether the cache holds more than its bounds allow (the caller then evicts).
    pub(crate) fn over_budget(&self) -> bool {
        self.slots.len() > self.capacity || self.bytes > self.max_bytes
    }

    /// Whether adding a slot of `incoming` bytes for a key not cached yet would put the
    /// cache over its bounds.
    pub(crate) fn would_overflow(&self, incoming: usize) -> bool {
        self.slots.len() >= self.capacity || self.bytes.saturating_add(incoming) > self.max_bytes
    }

    /// The least recently used keys whose removal brings the cache to 7/8 of both bounds
    /// with `incoming` more bytes and one more slot to come (0 and no slot: after an
    /// insert). Dirty ones must be written before [`remove`](Self::remove) drops them.
    pub(crate) fn eviction_candidates(&self, incoming: usize, new_slot: bool) -> Vec<&[u8]> {
        let target_entries = self.capacity - self.capacity / 8;
        let target_entries = target_entries.saturating_sub(usize::from(new_slot));
        let target_bytes = (self.max_bytes - self.max_bytes / 8).saturating_sub(incoming);
        let (mut entries, mut bytes) = (self.slots.len(), self.bytes);
        let mut victims = Vec::new();
        for key in self.order.values() {
            if entries <= target_entries && bytes <= target_bytes {
                break;
            }
            let Some(slot) = self.slots.get(key) else {
                continue;
            };
            entries -= 1;
            bytes -= slot_bytes(key, slot.value.as_deref());
            victims.push(key.as_slice());
        }
        victims
    }

    /// Drops the slots of `keys` (their dirty values written by the caller first).
    #[cfg(test)]
    pub(crate) fn remove(&mut self, keys: &[Vec<u8>]) {
        for key in keys {
            if let Some(slot) = self.slots.remove(key.as_slice()) {
                self.order.remove(&slot.tick);
                self.bytes -= slot_bytes(key, slot.value.as_deref());
                if slot.dirty {
                    self.dirty -= 1;
                }
            }
        }
    }

    /// Caches what RocksDB holds for `key` (clean) and returns it.
    pub(crate) fn insert_clean(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) -> Option<&[u8]> {
        self.set(key, value, false)
    }

    /// Sets `key` to `value` (dirty).
    pub(crate) fn put(&mut self, key: &[u8], value: Vec<u8>) {
        self.set(key.to_vec(), Some(value), true);
    }

    /// Deletes `key`: a dirty tombstone until flushed.
    pub(crate) fn delete(&mut self, key: &[u8]) {
        self.set(key.to_vec(), None, true);
    }

    fn set(&mut self, key: Vec<u8>, value: Option<Vec<u8>>, dirty: bool) -> Option<&[u8]> {
        let tick = self.next_tick;
        self.next_tick += 1;
        self.bytes += slot_bytes(&key, value.as_deref());
        if dirty {
            self.dirty += 1;
        }
        let slot = Slot { value, dirty, tick };
        let slot = match self.slots.entry(key) {
            Entry::Occupied(mut entry) => {
                let old = entry.insert(slot);
                self.bytes -= slot_bytes(entry.key(), old.value.as_deref());
                if old.dirty {
                    self.dirty -= 1;
                }
                if let Some(k) = self.order.remove(&old.tick) {
                    self.order.insert(tick, k);
                }
                entry.into_mut()
            }
            Entry::Vacant(entry) => {
                self.order.insert(tick, entry.key().clone());
                entry.insert(slot)
            }
        };
        slot.value.as_deref()
    }

    /// Dirty slots as (key, value or `None` for a tombstone), in no particular order.
    pub(crate) fn dirty(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        self.slots
            .iter()
            .filter(|(_, slot)| slot.dirty)
            .map(|(key, slot)| (key.as_slice(), slot.value.as_deref()))
    }

    /// Whether `key`'s slot is dirty (false if not cached).
    #[cfg(test)]
    pub(crate) fn is_dirty(&self, key: &[u8]) -> bool {
        self.slots.get(key).is_some_and(|slot| slot.dirty)
    }

    pub(crate) fn dirty_len(&self) -> usize {
        self.dirty
    }

    /// Records that every dirty slot has been written to RocksDB.
    pub(crate) fn mark_clean(&mut self) {
        if self.dirty == 0 {
            return;
        }
        for slot in self.slots.values_mut() {
            slot.dirty = false;
        }
        self.dirty = 0;
    }

    /// Drops every slot. Only after `mark_clean`: dropping a dirty slot would lose a write.
    #[cfg(test)]
    pub(crate) fn clear(&mut self) {
        debug_assert_eq!(self.dirty, 0, "clearing a cache with unflushed writes");
        self.slots.clear();
        self.order.clear();
        self.bytes = 0;
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Bytes the slots count for (see [`slot_bytes`]).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Slots whose key starts with `prefix`, sorted by key (RocksDB's bytewise order).
    pub(crate) fn sorted_with_prefix(&self, prefix: &[u8]) -> Vec<(&[u8], Option<&[u8]>)> {
        let mut entries: Vec<_> = self
            .slots
            .iter()
            .filter(|(key, _)| key.starts_with(prefix))
            .map(|(key, slot)| (key.as_slice(), slot.value.as_deref()))
            .collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_cache_tracks_dirty_slots_and_tombstones() {
        let mut cache = StateCache::new(3, usize::MAX);
        assert_eq!(cache.lookup(b"a"), None);
        assert_eq!(
            cache.insert_clean(b"a".to_vec(), Some(b"1".to_vec())),
            Some(&b"1"[..])
        );
        assert_eq!(cache.insert_clean(b"b".to_vec(), None), None);
        assert_eq!(cache.lookup(b"a"), Some(Some(&b"1"[..])));
        assert_eq!(cache.lookup(b"b"), Some(None));
        assert_eq!(cache.dirty_len(), 0);

        cache.put(b"a", b"2".to_vec());
        cache.delete(b"c");
        cache.put(b"a", b"3".to_vec());
        assert_eq!(cache.dirty_len(), 2);
        assert!(cache.would_overflow(0));
        assert!(!cache.over_budget());
        let mut dirty: Vec<_> = cache.dirty().collect();
        dirty.sort();
        assert_eq!(dirty, vec![(&b"a"[..], Some(&b"3"[..])), (&b"c"[..], None)]);

        assert_eq!(
            cache.sorted_with_prefix(b""),
            vec![
                (&b"a"[..], Some(&b"3"[..])),
                (&b"b"[..], None),
                (&b"c"[..], None)
            ]
        );

        cache.mark_clean();
        assert_eq!(cache.dirty_len(), 0);
        assert_eq!(cache.lookup(b"c"), Some(None));
        cache.clear();
        assert_eq!((cache.len(), cache.bytes()), (0, 0));
    }

    /// Issue 7 §2: the cache counts bytes, and evicts least recently used slots first.
    #[test]
    fn bytes_are_counted_and_eviction_takes_the_least_recently_used() {
        let slot = slot_bytes(b"k0", Some(&[0; 1000]));
        let mut cache = StateCache::new(100, 4 * slot);
        for k in 0..4u8 {
            cache.put(&[b'k', b'0' + k], vec![0; 1000]);
        }
        assert_eq!(cache.bytes(), 4 * slot);
        assert!(!cache.over_budget());
        cache.touch(b"k0");
        cache.put(b"k4", vec![0; 1000]);
        assert!(cache.over_budget());
        // Down to 7/8 of 4 slots: two go, the least recently used (k1, k2), not k0.
        let victims: Vec<Vec<u8>> = cache
            .eviction_candidates(0, false)
            .into_iter()
            .map(<[u8]>::to_vec)
            .collect();
        assert_eq!(victims, [b"k1".to_vec(), b"k2".to_vec()]);
        assert!(cache.is_dirty(b"k1"));
        cache.remove(&victims);
        assert_eq!(
            (cache.len(), cache.bytes(), cache.dirty_len()),
            (3, 3 * slot, 3)
        );
        assert!(!cache.over_budget());
        // Replacing a value re-counts its bytes.
        cache.put(b"k0", vec![]);
        assert_eq!(cache.bytes(), 2 * slot + slot_bytes(b"k0", Some(&[])));
    }
}
