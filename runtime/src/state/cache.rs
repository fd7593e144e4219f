//! `StateCache`: the in-memory write-back cache in front of RocksDB.
//!
//! Invariants:
//! - Each slot holds the CURRENT value of its key: `Some(bytes)`, or `None` for a key known
//!   to be absent (a deletion not yet flushed, or a negative lookup). A slot in the cache
//!   always wins over RocksDB.
//! - A slot is dirty iff it differs from what RocksDB holds; a dirty `None` is a tombstone
//!   that must reach RocksDB as a delete. Dirty slots are only dropped after the caller has
//!   written them (`mark_clean` then `clear`), so no update or deletion is ever lost.
//! - The cache never holds more than `capacity` slots: the caller asks [`is_full`] before
//!   inserting a new key and evicts (flush, then clear) first.
//!
//! [`is_full`]: StateCache::is_full

use std::collections::HashMap;
use std::collections::hash_map::Entry;

#[derive(Debug)]
struct Slot {
    value: Option<Vec<u8>>,
    dirty: bool,
}

#[derive(Debug)]
pub(crate) struct StateCache {
    slots: HashMap<Vec<u8>, Slot>,
    /// Maximum number of slots (entries, not bytes); at least 1.
    capacity: usize,
    dirty: usize,
}

impl StateCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            slots: HashMap::new(),
            capacity: capacity.max(1),
            dirty: 0,
        }
    }

    /// `Some(current value)` if the cache knows `key` (`Some(None)`: known absent),
    /// `None` if RocksDB must be asked.
    pub(crate) fn lookup(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.slots.get(key).map(|slot| slot.value.as_deref())
    }

    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        self.slots.contains_key(key)
    }

    /// Whether inserting a key not yet cached would exceed the capacity.
    pub(crate) fn is_full(&self) -> bool {
        self.slots.len() >= self.capacity
    }

    /// Caches what RocksDB holds for `key` (clean) and returns it.
    pub(crate) fn insert_clean(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) -> Option<&[u8]> {
        let slot = Slot {
            value,
            dirty: false,
        };
        let slot = match self.slots.entry(key) {
            Entry::Occupied(mut entry) => {
                if entry.get().dirty {
                    self.dirty -= 1;
                }
                entry.insert(slot);
                entry.into_mut()
            }
            Entry::Vacant(entry) => entry.insert(slot),
        };
        slot.value.as_deref()
    }

    /// Sets `key` to `value` (dirty).
    pub(crate) fn put(&mut self, key: &[u8], value: Vec<u8>) {
        self.set_dirty(key, Some(value));
    }

    /// Deletes `key`: a dirty tombstone until flushed.
    pub(crate) fn delete(&mut self, key: &[u8]) {
        self.set_dirty(key, None);
    }

    fn set_dirty(&mut self, key: &[u8], value: Option<Vec<u8>>) {
        match self.slots.get_mut(key) {
            Some(slot) => {
                if !slot.dirty {
                    self.dirty += 1;
                }
                *slot = Slot { value, dirty: true };
            }
            None => {
                self.slots.insert(key.to_vec(), Slot { value, dirty: true });
                self.dirty += 1;
            }
        }
    }

    /// Dirty slots as (key, value or `None` for a tombstone), in no particular order.
    pub(crate) fn dirty(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        self.slots
            .iter()
            .filter(|(_, slot)| slot.dirty)
            .map(|(key, slot)| (key.as_slice(), slot.value.as_deref()))
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
    pub(crate) fn clear(&mut self) {
        debug_assert_eq!(self.dirty, 0, "clearing a cache with unflushed writes");
        self.slots.clear();
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
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
        let mut cache = StateCache::new(3);
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
        assert!(cache.is_full());
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
        assert_eq!(cache.len(), 0);
    }
}
