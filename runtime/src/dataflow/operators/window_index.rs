//! `WindowIndex`: which state keys hold an accumulator of each window, so that a window
//! fires (and its state is dropped) without scanning the state.
//!
//! Invariants:
//! - A window end maps to a [`WindowKeys`]: the state keys (`key group | key | window
//!   end`, see `state::key`) filed under that window, end to end in one buffer, each
//!   with the hash the state gave it ([`KeyHash`]) and the state cache slot it was
//!   stored in. Filing a key appends it: no probe, no table, no allocation of its own
//!   (its bytes and 20 bytes more: its end, hash and slot). The caller files a key when
//!   its accumulator is created (the state had none), which happens once per window and
//!   key; a key filed twice anyway (two windows' sets merged, a restore) is harmless:
//!   [`WindowKeys::sorted`], the firing order, hands each key out once, and
//!   [`WindowKeys::iter`] may repeat it (deleting a key twice deletes it). A new
//!   window's set starts sized for as many keys as the last window removed held.
//! - The index only names keys; their accumulators are in the state. Filing a key whose
//!   accumulator is then deleted is harmless (the firing finds none), so the index may
//!   hold more keys than the state, never fewer. A key's cache slot is a hint the state
//!   checks before it trusts it (see `KeyedState::get_with_slot`): a firing finds a key
//!   still cached there without a probe of the cache's table.
//! - [`WindowKeys::sorted`] hands the keys out in key order, each once, the order a
//!   firing emits them in, so a window's output does not depend on the order its
//!   records came in or on whether the index was rebuilt by a restore.

use std::collections::BTreeMap;

use crate::state::{KeyHash, SlotId, StateKey};

/// Window end -> the state keys of that window, windows in order of their ends.
#[derive(Debug, Default)]
pub(super) struct WindowIndex {
    windows: BTreeMap<i64, WindowKeys>,
    /// How many keys, and of how many bytes, the last window removed held: a new
    /// window is sized for as many, so a window of a million keys (like the one before
    /// it) does not grow its buffers twenty times as they come.
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
            .push(hash, key, slot);
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
                    into.push(hash, key, slot);
                }
            }
        }
    }
}

/// The state keys of one window, in the order they were filed: see the module doc.
#[derive(Debug, Default)]
pub(super) struct WindowKeys {
    /// Key `i` is `bytes[ends[i-1]..ends[i]]`.
    bytes: Vec<u8>,
    ends: Vec<u32>,
    /// The state's hash of key `i`.
    hashes: Vec<u64>,
    /// The state cache slot key `i` was stored in (a hint, see the module doc).
    slots: Vec<Option<SlotId>>,
}

impl WindowKeys {
    fn with_capacity(keys: usize, bytes: usize) -> Self {
        WindowKeys {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(keys),
            hashes: Vec::with_capacity(keys),
            slots: Vec::with_capacity(keys),
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

    /// Files `key` (hashed `hash`, in cache slot `slot`).
    fn push(&mut self, hash: KeyHash, key: &[u8], slot: Option<SlotId>) {
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len() as u32);
        self.hashes.push(hash.value());
        self.slots.push(slot);
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

    /// Every key with its hash and slot, in key order, each once. Keys are compared by
    /// [`StateKey::order_prefix`] first, so most comparisons touch no key bytes;
    /// neighbours are the same key only if their hashes are equal too.
    pub(super) fn sorted(&self) -> Vec<(KeyHash, Option<SlotId>, &[u8])> {
        let mut order: Vec<(u64, usize)> = (0..self.len())
            .map(|i| (StateKey::order_prefix(self.key(i)), i))
            .collect();
        order.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| self.key(a.1).cmp(self.key(b.1))));
        order.dedup_by(|a, b| {
            a.0 == b.0 && self.hashes[a.1] == self.hashes[b.1] && self.key(a.1) == self.key(b.1)
        });
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
    fn a_key_filed_twice_fires_once() {
        let mut index = WindowIndex::default();
        for key in [&b"b"[..], b"a", b"b", b"ab", b"a"] {
            index.insert(10, hash(key), key, None);
        }
        index.insert(20, hash(b"a"), b"a", None);
        assert_eq!(index.ends().collect::<Vec<_>>(), vec![10, 20]);
        let ten = index.remove(10).expect("window 10");
        assert_eq!(ten.len(), 5, "filed as they came");
        assert_eq!(
            keys_of(&ten.sorted()),
            vec![&b"a"[..], b"ab", b"b"],
            "each once, colliding hashes told apart by their keys"
        );
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
            forward.push(hash(key), key, None);
        }
        for key in keys.iter().rev() {
            backward.push(hash(key), key, None);
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
        keys.push(hash(b"x"), b"x", None);
        keys.push(hash(b"y"), b"y", None);
        index.extend(5, keys);
        let mut more = WindowKeys::default();
        more.push(hash(b"y"), b"y", None);
        more.push(hash(b"z"), b"z", None);
        index.extend(5, more);
        let five = index.remove(5).expect("window 5");
        assert_eq!(keys_of(&five.sorted()), vec![&b"x"[..], b"y", b"z"]);
    }
}
