//! `WriteLayer`: one write-back of a `KeyedState`'s dirty entries on its way from the
//! task thread to RocksDB; `InFlight`: the layers sent to the writer and not yet applied.
//!
//! Layout: a layer's keys and values lie back to back in one buffer (no allocation per
//! entry); an entry is their offsets plus the key's hash under the cache's hasher
//! (`StateCache::hash`), and a hash table of entry indices finds a key in one probe. A
//! read that misses the cache asks every layer in flight before RocksDB, so that probe is
//! on the path of every new key; a binary search of a sorted layer cost some fourteen key
//! comparisons per layer there.
//!
//! Invariants:
//! - A layer's keys are distinct (they come from one cache, which holds a key once); an
//!   entry without a value is a delete.
//! - A layer is filled in the cache's order, unsorted, on the task thread; the writer
//!   thread puts its entries in key order ([`WriteLayer::sorted`]) for the `WriteBatch`
//!   (RocksDB inserts sorted keys into its memtable faster), so the sort is off the task
//!   thread.
//! - Hashes are those of the cache that filled the layer (randomly seeded per cache): a
//!   layer is only ever looked up by the `KeyedState` that owns that cache.
//! - `InFlight` holds layers oldest first and answers from the newest layer that writes a
//!   key; a layer leaves it only once the writer reports it applied (`prune`), so a key is
//!   always found in the cache, a layer in flight or RocksDB.

use std::collections::VecDeque;
use std::sync::Arc;

use hashbrown::HashTable;

use crate::state::StateKey;

/// One entry of a layer: where its key and value lie in the layer's buffer.
#[derive(Debug, Clone, Copy)]
struct Entry {
    hash: u64,
    key_start: usize,
    key_end: usize,
    /// End of the value, which starts at `key_end`; `None`: a delete.
    value_end: Option<usize>,
}

/// What an entry costs besides its key and value: the `Entry` and its index slot with
/// the table's control byte and spare room, roughly.
const ENTRY_BYTES: usize = std::mem::size_of::<Entry>() + 8;

/// Entries written back together (see the module doc); a `None` value is a delete.
#[derive(Debug, Default)]
pub(crate) struct WriteLayer {
    /// Set by the writer's task side when the layer is sent (see `StateWriter::write_back`).
    pub(crate) seq: u64,
    data: Vec<u8>,
    entries: Vec<Entry>,
    /// Indices into `entries`, filed under their `hash`.
    index: HashTable<u32>,
}

impl WriteLayer {
    /// An empty layer with room for `entries` entries.
    pub(crate) fn with_capacity(entries: usize) -> Self {
        Self {
            seq: 0,
            data: Vec::new(),
            entries: Vec::with_capacity(entries),
            index: HashTable::with_capacity(entries),
        }
    }

    /// Adds `key` (hashed to `hash` by the cache, not in the layer yet: the cache holds
    /// a key once) with `value` (`None`: a delete).
    pub(crate) fn push(&mut self, hash: u64, key: &[u8], value: Option<&[u8]>) {
        let key_start = self.data.len();
        self.data.extend_from_slice(key);
        let key_end = self.data.len();
        let value_end = value.map(|value| {
            self.data.extend_from_slice(value);
            self.data.len()
        });
        let i = u32::try_from(self.entries.len()).expect("fewer than 2^32 entries in a layer");
        self.entries.push(Entry {
            hash,
            key_start,
            key_end,
            value_end,
        });
        let entries = &self.entries;
        self.index
            .insert_unique(hash, i, |&j| entries[j as usize].hash);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Key and value bytes the layer holds.
    /// What the layer holds: its keys and values and, per entry, its offsets and its
    /// place in the index.
    pub(crate) fn bytes(&self) -> usize {
        self.data.len() + self.entries.len() * ENTRY_BYTES
    }

    fn entry(&self, entry: &Entry) -> (&[u8], Option<&[u8]>) {
        let key = &self.data[entry.key_start..entry.key_end];
        let value = entry.value_end.map(|end| &self.data[entry.key_end..end]);
        (key, value)
    }

    /// `Some(value)` (`Some(None)`: deleted) if this layer writes `key`, whose hash under
    /// the filling cache is `hash`: one probe.
    pub(crate) fn lookup(&self, hash: u64, key: &[u8]) -> Option<Option<&[u8]>> {
        let i = self.index.find(hash, |&i| {
            let entry = &self.entries[i as usize];
            &self.data[entry.key_start..entry.key_end] == key
        })?;
        Some(self.entry(&self.entries[*i as usize]).1)
    }

    /// Every entry, in the order they were pushed.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        self.entries.iter().map(|entry| self.entry(entry))
    }

    /// Every entry in key order (RocksDB's bytewise order), for the writer; keys are
    /// compared by [`StateKey::order_prefix`] first.
    pub(crate) fn sorted(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        let mut entries: Vec<_> = self
            .iter()
            .map(|(key, value)| (StateKey::order_prefix(key), key, value))
            .collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        entries.into_iter().map(|(_, key, value)| (key, value))
    }
}

/// The layers sent to the writer and not yet known to be applied, oldest first.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    layers: VecDeque<Arc<WriteLayer>>,
    /// Keys and values the layers hold.
    bytes: usize,
}

impl InFlight {
    /// Forgets the layers the writer has applied (they are in RocksDB now).
    pub(crate) fn prune(&mut self, applied: u64) {
        while self.layers.front().is_some_and(|l| l.seq <= applied) {
            if let Some(layer) = self.layers.pop_front() {
                self.bytes -= layer.bytes();
            }
        }
    }

    /// Keeps `layer` (just sent) until [`prune`](Self::prune) is told it is applied.
    pub(crate) fn push(&mut self, layer: Arc<WriteLayer>) {
        debug_assert!(self.layers.back().is_none_or(|last| last.seq < layer.seq));
        self.bytes += layer.bytes();
        self.layers.push_back(layer);
    }

    /// The newest in-flight value of `key` (hashed to `hash` by the cache), if a layer
    /// writes it.
    pub(crate) fn lookup(&self, hash: u64, key: &[u8]) -> Option<Option<&[u8]>> {
        self.layers
            .iter()
            .rev()
            .find_map(|layer| layer.lookup(hash, key))
    }

    /// Key and value bytes of the layers in flight.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hash that makes every key collide: lookups must still compare keys.
    const SAME: u64 = 7;

    fn layer(seq: u64, entries: &[(&[u8], Option<&[u8]>)]) -> Arc<WriteLayer> {
        let mut layer = WriteLayer::with_capacity(0);
        for &(key, value) in entries {
            layer.push(SAME, key, value);
        }
        layer.seq = seq;
        Arc::new(layer)
    }

    #[test]
    fn a_layer_finds_its_keys_and_sorts_them_for_the_writer() {
        let layer = layer(1, &[(b"c", Some(b"3")), (b"a", None), (b"b", Some(b""))]);
        assert_eq!(layer.iter().count(), 3);
        assert_eq!(
            layer.bytes(),
            4 + 3 * ENTRY_BYTES,
            "keys, values and entries"
        );
        assert_eq!(layer.lookup(SAME, b"c"), Some(Some(&b"3"[..])));
        assert_eq!(layer.lookup(SAME, b"a"), Some(None), "a delete");
        assert_eq!(
            layer.lookup(SAME, b"b"),
            Some(Some(&b""[..])),
            "an empty value"
        );
        assert_eq!(layer.lookup(SAME, b"d"), None);
        assert_eq!(
            layer.sorted().collect::<Vec<_>>(),
            vec![
                (&b"a"[..], None),
                (&b"b"[..], Some(&b""[..])),
                (&b"c"[..], Some(&b"3"[..]))
            ]
        );
    }

    #[test]
    fn in_flight_answers_from_the_newest_layer_until_pruned() {
        let mut in_flight = InFlight::default();
        in_flight.push(layer(1, &[(b"k", Some(b"old")), (b"gone", Some(b"x"))]));
        in_flight.push(layer(2, &[(b"k", Some(b"new")), (b"gone", None)]));
        assert_eq!(in_flight.bytes(), 9 + 8 + 4 * ENTRY_BYTES);
        assert_eq!(in_flight.lookup(SAME, b"k"), Some(Some(&b"new"[..])));
        assert_eq!(in_flight.lookup(SAME, b"gone"), Some(None));
        in_flight.prune(1);
        assert_eq!(in_flight.bytes(), 8 + 2 * ENTRY_BYTES);
        assert_eq!(in_flight.lookup(SAME, b"k"), Some(Some(&b"new"[..])));
        in_flight.prune(2);
        assert!(in_flight.is_empty());
        assert_eq!(in_flight.bytes(), 0);
        assert_eq!(in_flight.lookup(SAME, b"k"), None);
    }
}
