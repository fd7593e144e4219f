//! `WindowIndex`: which state keys hold an accumulator of each window, so that a window
//! fires (and its state is dropped) without scanning the state.
//!
//! Invariants:
//! - A window end maps to a [`WindowKeys`]: a set of state keys (`key group | key |
//!   window end`, see `state::key`), each once. The keys lie end to end in one buffer,
//!   found by a hash table of their indices filed under the hash the state gave them
//!   ([`KeyHash`]): adding a key already there is one probe and allocates nothing, and
//!   a new key costs its bytes and some 16 bytes more (no allocation of its own).
//! - The index only names keys; their accumulators are in the state. Adding a key whose
//!   accumulator is then deleted is harmless (the firing finds none), so the index may
//!   hold more keys than the state, never fewer.
//! - [`WindowKeys::sorted`] hands the keys out in key order, the order a firing emits
//!   them in, so a window's output does not depend on the order its records came in or
//!   on whether the index was rebuilt by a restore.

use std::collections::BTreeMap;

use hashbrown::HashTable;

use crate::state::KeyHash;

/// Window end -> the state keys of that window, windows in order of their ends.
#[derive(Debug, Default)]
pub(super) struct WindowIndex {
    windows: BTreeMap<i64, WindowKeys>,
}

impl WindowIndex {
    /// Files `key` (hashed `hash` by the state) under the window ending at `end`.
    pub(super) fn insert(&mut self, end: i64, hash: KeyHash, key: &[u8]) {
        self.windows.entry(end).or_default().insert(hash, key);
    }

    /// The window ends, in order.
    pub(super) fn ends(&self) -> impl Iterator<Item = i64> + '_ {
        self.windows.keys().copied()
    }

    /// Removes and returns the keys of the window ending at `end`.
    pub(super) fn remove(&mut self, end: i64) -> Option<WindowKeys> {
        self.windows.remove(&end)
    }

    /// Files every key of `keys` under the window ending at `end`.
    pub(super) fn extend(&mut self, end: i64, keys: WindowKeys) {
        match self.windows.entry(end) {
            std::collections::btree_map::Entry::Vacant(vacant) => {
                vacant.insert(keys);
            }
            std::collections::btree_map::Entry::Occupied(mut occupied) => {
                let into = occupied.get_mut();
                for i in 0..keys.len() {
                    into.insert(KeyHash::from_value(keys.hashes[i]), keys.key(i));
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
    /// Key indices, filed under `hashes`.
    table: HashTable<u32>,
}

impl WindowKeys {
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

    /// Adds `key` (hashed `hash`) unless it is there.
    fn insert(&mut self, hash: KeyHash, key: &[u8]) {
        let hash = hash.value();
        let found = self.table.find(hash, |&i| self.key_at(i) == key).is_some();
        if found {
            return;
        }
        let i = self.ends.len() as u32;
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len() as u32);
        self.hashes.push(hash);
        let hashes = &self.hashes;
        self.table.insert_unique(hash, i, |&i| hashes[i as usize]);
    }

    /// Every key with its hash, in the order they were added.
    pub(super) fn iter(&self) -> impl Iterator<Item = (KeyHash, &[u8])> + '_ {
        (0..self.len()).map(|i| (KeyHash::from_value(self.hashes[i]), self.key(i)))
    }

    fn key_at(&self, i: u32) -> &[u8] {
        self.key(i as usize)
    }

    /// Every key with its hash, in key order. Keys are compared by their first 8 bytes
    /// (key group and the key's start) as one number first, so most comparisons touch
    /// no key bytes.
    pub(super) fn sorted(&self) -> Vec<(KeyHash, &[u8])> {
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
        order
            .into_iter()
            .map(|(_, i)| (KeyHash::from_value(self.hashes[i]), self.key(i)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys_of<'a>(sorted: &[(KeyHash, &'a [u8])]) -> Vec<&'a [u8]> {
        sorted.iter().map(|&(_, key)| key).collect()
    }

    /// A hash for tests: any function of the key works, collisions included.
    fn hash(key: &[u8]) -> KeyHash {
        KeyHash::from_value(key.first().copied().unwrap_or(0) as u64)
    }

    #[test]
    fn a_key_is_filed_once_per_window() {
        let mut index = WindowIndex::default();
        for key in [&b"b"[..], b"a", b"b", b"ab", b"a"] {
            index.insert(10, hash(key), key);
        }
        index.insert(20, hash(b"a"), b"a");
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
            forward.insert(hash(key), key);
        }
        for key in keys.iter().rev() {
            backward.insert(hash(key), key);
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
        keys.insert(hash(b"x"), b"x");
        keys.insert(hash(b"y"), b"y");
        index.extend(5, keys);
        let mut more = WindowKeys::default();
        more.insert(hash(b"y"), b"y");
        more.insert(hash(b"z"), b"z");
        index.extend(5, more);
        let five = index.remove(5).expect("window 5");
        assert_eq!(keys_of(&five.sorted()), vec![&b"x"[..], b"y", b"z"]);
    }
}
