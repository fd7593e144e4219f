//! `WindowIndex`: which state keys hold an accumulator of each window, so that a window
//! fires (and its state is dropped) without scanning the state.
//!
//! Invariants:
//! - A window end maps to a [`WindowKeys`]: a set of state keys (`key group | key |
//!   window end`, see `state::key`), each once. The keys lie end to end in one buffer,
//!   found by a hash table of their indices filed under the hash the state gave them
//!   ([`KeyHash`]): adding a key already there is one probe and allocates nothing, and
//!   a new key costs its bytes and some 16 bytes more (no allocation of its own). A new
//!   window's set starts sized for as many keys as the last window removed held.
//! - The index only names keys; their accumulators are in the state. Adding a key whose
//!   accumulator is then deleted is harmless (the firing finds none), so the index may
//!   hold more keys than the state, never fewer. Each key keeps the state cache slot it
//!   was stored in, a hint the state checks before it trusts it (see
//!   `KeyedState::get_with_slot`): a firing finds a key still cached there without a
//!   probe of the cache's table.
//! - [`WindowKeys::sorted`] hands the keys out in key order, the order a firing emits
//!   them in, so a window's output does not depend on the order its records came in or
//!   on whether the index was rebuilt by a restore.

use std::collections::BTreeMap;

use hashbrown::HashTable;

use crate::state::{KeyHash, SlotId};

/// Window end -> the state keys of that window, windows in order of their ends.
#[derive(Debug, Default)]
pub(super) struct WindowIndex {
    windows: BTreeMap<i64, WindowKeys>,
    /// How many keys, and of how many bytes, the last window removed held: a new
    /// window is sized for as many, so a window of a million keys (like the one before
    /// it) does not grow its table twenty times as they come.
    last_size: (usize, usize),
}

impl WindowIndex {
    /// Files `key` (hashed `hash` by the state, stored in cache slot `slot`) under the
    /// window ending at `end`.
    pub(super) fn insert(&mut self, end: i64, hash: KeyHash, key: &[u8], slot: Option<SlotId>) {
        let (keys, bytes) = self.last_size;
        self.windows
            .entry(end)
            .or_insert_with(|| WindowKeys::with_capacity(keys, bytes))
            .insert(hash, key, slot);
    }

    /// The window ends, in order.
    pub(super) fn ends(&self) -> impl Iterator<Item = i64> + '_ {
        self.windows.keys().copied()
    }

    /// Removes and returns the keys of the window ending at `end`.
    pub(super) fn remove(&mut self, end: i64) -> Option<WindowKeys> {
        let keys = self.windows.remove(&end)?;
        self.last_size = (keys.len(), keys.bytes.len());
        Some(keys)
    }

    /// Files every key of `keys` under the window ending at `end`.
    pub(super) fn extend(&mut self, end: i64, keys: WindowKeys) {
        match self.windows.entry(end) {
            std::collections::btree_map::Entry::Vacant(vacant) => {
                vacant.insert(keys);
            }
            std::collections::btree_map::Entry::Occupied(mut occupied) => {
                let into = occupied.get_mut();
                for (hash, slot, key) in keys.iter() {
                    into.insert(hash, key, slot);
                }
            }
        }
    }
}

/// The state keys of one window: a set, see the module doc.
#[derive(Debug, Default)]
pub(super) struct WindowKeys {
    /// Key `i` is `bytes[ends[i-1]..ends[i]]`.
    bytes: Vec<u8>,
    ends: Vec<u32>,
    /// The state's hash of key `i`: the table's, kept so that growing it reads no key.
    hashes: Vec<u64>,
    /// The state cache slot key `i` was stored in (a hint, see the module doc).
    slots: Vec<Option<SlotId>>,
    /// Key indices, filed under `hashes`.
    table: HashTable<u32>,
}

impl WindowKeys {
    fn with_capacity(keys: usize, bytes: usize) -> Self {
        WindowKeys {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(keys),
            hashes: Vec::with_capacity(keys),
            slots: Vec::with_capacity(keys),
            table: HashTable::with_capacity(keys),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    fn key(&self, i: usize) -> &[u8] {
        let start = match i {
            0 => 0,
            i => self.ends[i - 1] as usize,
        };
        &self.bytes[start..self.ends[i] as usize]
    }

    /// Adds `key` (hashed `hash`, in cache slot `slot`) unless it is there.
    fn insert(&mut self, hash: KeyHash, key: &[u8], slot: Option<SlotId>) {
        let hash = hash.value();
        let found = self.table.find(hash, |&i| self.key_at(i) == key).is_some();
        if found {
            return;
        }
        let i = self.ends.len() as u32;
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len() as u32);
        self.hashes.push(hash);
        self.slots.push(slot);
        let hashes = &self.hashes;
        self.table.insert_unique(hash, i, |&i| hashes[i as usize]);
    }

    /// Every key with its hash and slot, in the order they were added.
    pub(super) fn iter(&self) -> impl Iterator<Item = (KeyHash, Option<SlotId>, &[u8])> + '_ {
        (0..self.len()).map(|i| self.entry(i))
    }

    fn entry(&self, i: usize) -> (KeyHash, Option<SlotId>, &[u8]) {
        (
            KeyHash::from_value(self.hashes[i]),
            self.slots[i],
            self.key(i),
        )
    }

    fn key_at(&self, i: u32) -> &[u8] {
        self.key(i as usize)
    }

    /// Every key with its hash and slot, in key order. Keys are compared by their first 8 bytes
    /// (key group and the key's start) as one number first, so most comparisons touch
    /// no key bytes.
    pub(super) fn sorted(&self) -> Vec<(KeyHash, Option<SlotId>, &[u8])> {
        let mut order: Vec<(u64, usize)> = (0..self.len())
            .map(|i| {
                let key = self.key(i);
                let mut prefix = [0u8; 8];
                let n = key.len().min(8);
                prefix[..n].copy_from_slice(&key[..n]);
                (u64::from_be_bytes(prefix), i)
            })
            .collect();
        order.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| self.key(a.1).cmp(self.key(b.1))));
        order.into_iter().map(|(_, i)| self.entry(i)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys_of<'a>(sorted: &[(KeyHash, Option<SlotId>, &'a [u8])]) -> Vec<&'a [u8]> {
        sorted.iter().map(|&(_, _, key)| key).collect()
    }

    /// A hash for tests: any function of the key works, collisions included.
    fn hash(key: &[u8]) -> KeyHash {
        KeyHash::from_value(key.first().copied().unwrap_or(0) as u64)
    }

    #[test]
    fn a_key_is_filed_once_per_window() {
        let mut index = WindowIndex::default();
        for key in [&b"b"[..], b"a", b"b", b"ab", b"a"] {
            index.insert(10, hash(key), key, None);
        }
        index.insert(20, hash(b"a"), b"a", None);
        assert_eq!(index.ends().collect::<Vec<_>>(), vec![10, 20]);
        let ten = index.remove(10).expect("window 10");
        assert_eq!(
            ten.len(),
            3,
            "colliding hashes are told apart by their keys"
        );
        assert_eq!(keys_of(&ten.sorted()), vec![&b"a"[..], b"ab", b"b"]);
        assert!(index.remove(10).is_none());
        assert_eq!(index.ends().collect::<Vec<_>>(), vec![20]);
    }

    #[test]
    fn sorted_is_key_order_whatever_the_insertion_order() {
        // Keys sharing 8-byte prefixes, of several lengths, and shorter than 8 bytes.
        let keys: Vec<Vec<u8>> = (0..500u32)
            .map(|i| {
                let mut key = vec![0, (i % 3) as u8, b'k'];
                key.extend_from_slice(format!("{}", i * 7919 % 1000).as_bytes());
                if i % 5 == 0 {
                    key.truncate(2);
                }
                key
            })
            .collect();
        let mut forward = WindowKeys::default();
        let mut backward = WindowKeys::default();
        for key in &keys {
            forward.insert(hash(key), key, None);
        }
        for key in keys.iter().rev() {
            backward.insert(hash(key), key, None);
        }
        let mut expected: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        expected.sort();
        expected.dedup();
        assert_eq!(keys_of(&forward.sorted()), expected);
        assert_eq!(keys_of(&backward.sorted()), expected);
    }

    #[test]
    fn extend_moves_a_window_or_merges_it() {
        let mut index = WindowIndex::default();
        let mut keys = WindowKeys::default();
        keys.insert(hash(b"x"), b"x", None);
        keys.insert(hash(b"y"), b"y", None);
        index.extend(5, keys);
        let mut more = WindowKeys::default();
        more.insert(hash(b"y"), b"y", None);
        more.insert(hash(b"z"), b"z", None);
        index.extend(5, more);
        let five = index.remove(5).expect("window 5");
        assert_eq!(keys_of(&five.sorted()), vec![&b"x"[..], b"y", b"z"]);
    }
}
