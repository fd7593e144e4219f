//! `StateCache`: the in-memory write-back cache in front of RocksDB, bounded in entries
//! and in bytes, with CLOCK eviction.
//!
//! Layout: the slots live in one array (`slots`, a free slot is `None` and its index is
//! on `free`); a `hashbrown::HashTable` of slot indices, hashed with foldhash (randomly
//! seeded per cache, so keys chosen by an adversary cannot aim at one bucket), finds a
//! key's slot in one probe. A slot holds its key and value back to back, inside the slot
//! when together they fit in [`INLINE_BYTES`] (a key of a few tens of bytes and a small
//! accumulator: no heap allocation at all, and a lookup touches one cache line of the
//! slot array after the table), else in one heap buffer; no allocation per lookup or per
//! update of an existing key with a value of about its old size. A small entry costs
//! [`SLOT_BYTES`] in all, so the default 64 MiB hold about 1.4 million of them.
//!
//! Invariants:
//! - Each slot holds the CURRENT value of its key: `Some(bytes)`, or `None` for a key known
//!   to be absent (a deletion not yet flushed, or a negative lookup). A slot in the cache
//!   always wins over RocksDB.
//! - `table` holds exactly one index per live slot, stored under its key's hash; no two
//!   live slots have equal keys.
//! - A slot is dirty iff it differs from what RocksDB holds; a dirty `None` is a tombstone
//!   that must reach RocksDB as a delete. A slot is *stored* if RocksDB may hold a value
//!   for its key once the write-backs sent so far are applied: it was read with a value,
//!   a value of it was copied into a write-back, or it was written without being read
//!   (unknown, so assumed). Deleting a slot that is not stored leaves it a clean `None`:
//!   an entry created and deleted between two write-backs (a window's accumulator that
//!   fires before the next checkpoint) never reaches RocksDB, not even as a tombstone.
//! - A dirty slot leaves the cache only through [`take_victims`], which hands its key and
//!   value to the caller in a write-back to write; [`copy_out_dirty`] copies every dirty
//!   slot into one and marks them clean. So no update or deletion is ever lost. Once a
//!   victim's key is one RocksDB may hold (a dirty value, or a clean stored slot),
//!   [`evicted_stored`] says so for good: until then, a cache in front of a RocksDB that
//!   started empty holds every key that has a value.
//! - A snapshot may copy the dirty slots out over time instead of at once: [`owe_dirty`]
//!   makes every dirty slot *owed* (dirty in an earlier epoch: its `EPOCH` bit differs
//!   from the cache's) and [`copy_owed`] copies owed slots into the snapshot's layer a
//!   stretch of the slot array at a time. An owed slot about to change (put, delete,
//!   clean reload) is copied first, copy on write, so the layer ends up holding each
//!   owed slot's value as of `owe_dirty`, whatever happened since. While slots are owed,
//!   nothing leaves the cache: [`take_victims`] and [`copy_out_dirty`] need none owed
//!   (the caller finishes the copy first, so no write-back of later values can reach
//!   RocksDB before the snapshot's).
//! - `bytes` is the sum of [`slot_bytes`] over the live slots: the key, the value and a
//!   fixed per-slot overhead. The caller keeps the cache within `capacity` slots and
//!   `max_bytes` bytes by asking [`over_budget`] after each insert (or [`would_overflow`]
//!   before one) and then calling [`take_victims`], which evicts down to 7/8 of both
//!   bounds, so write-backs come in batches, not one per record. This is the one bound on
//!   the cache's memory, for large and small values alike.
//! - Recency is CLOCK (second chance), an approximation of LRU that costs no allocation
//!   and no ordered-index update on a hit: every use of a slot (lookup with touch, insert,
//!   put) sets its `referenced` bit, and a delete clears it (so a fired window's
//!   tombstones leave before the live keys of the next window); eviction sweeps `hand`
//!   over the slot array, clearing set bits and evicting the first slots found with a
//!   clear bit. A slot used since the hand last passed it therefore survives the next
//!   sweep; among slots not used since, the sweep takes them in array order. One slot
//!   larger than the whole budget stays until the next eviction.
//! - A large cache is read out of the CPU's caches: a million slots do not fit in them,
//!   and a probe that reads a slot and compares its key has about one memory read in
//!   flight at a time. [`warm`] and [`warm_hinted`] read the slots a batch of keys will
//!   probe in loops that only read, so the memory reads overlap and the probes that
//!   follow hit the CPU's caches. They change nothing (a slot they read in vain costs
//!   one read), and a cache smaller than [`WARM_MIN_SLOTS`] skips them.
//!
//! [`copy_out_dirty`]: StateCache::copy_out_dirty
//! [`owe_dirty`]: StateCache::owe_dirty
//! [`copy_owed`]: StateCache::copy_owed
//! [`over_budget`]: StateCache::over_budget
//! [`would_overflow`]: StateCache::would_overflow
//! [`take_victims`]: StateCache::take_victims
//! [`evicted_stored`]: StateCache::evicted_stored
//! [`warm`]: StateCache::warm
//! [`warm_hinted`]: StateCache::warm_hinted

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::state::write_layer::WriteLayer;

/// Most bytes of key and value a slot holds inline, without a heap buffer.
pub(crate) const INLINE_BYTES: usize = 30;

/// What every slot counts for: the slot in the array (40 bytes: its inline bytes, key
/// length and flags) and its index in the hash table with its control byte and the
/// table's spare room (8), roughly. Makes a cache of many tiny accumulators count for
/// what it costs.
pub(crate) const SLOT_BYTES: usize = 48;

/// Slots below which the cache does not warm a batch's slots (see the module doc): some
/// 3 MiB of slots, about what a core's own caches hold.
const WARM_MIN_SLOTS: usize = 1 << 16;

/// What a heap buffer counts for besides its bytes: the allocator's header and rounding.
const HEAP_OVERHEAD_BYTES: usize = 16;

/// What a slot of `key` and `value` counts against `max_bytes` (as made by an insert: a
/// heap buffer of exactly their length).
pub(crate) fn slot_bytes(key: &[u8], value: Option<&[u8]>) -> usize {
    let len = key.len() + value.map_or(0, <[u8]>::len);
    if len <= INLINE_BYTES {
        SLOT_BYTES
    } else {
        SLOT_BYTES + len + HEAP_OVERHEAD_BYTES
    }
}

/// A slot's key and value, back to back.
#[derive(Debug)]
enum SlotData {
    Inline { len: u8, bytes: [u8; INLINE_BYTES] },
    Heap(Vec<u8>),
}

impl SlotData {
    fn new(key: &[u8], value: Option<&[u8]>) -> Self {
        let value = value.unwrap_or_default();
        let len = key.len() + value.len();
        if len <= INLINE_BYTES {
            let mut bytes = [0u8; INLINE_BYTES];
            bytes[..key.len()].copy_from_slice(key);
            bytes[key.len()..len].copy_from_slice(value);
            SlotData::Inline {
                len: len as u8,
                bytes,
            }
        } else {
            let mut buffer = Vec::with_capacity(len);
            buffer.extend_from_slice(key);
            buffer.extend_from_slice(value);
            SlotData::Heap(buffer)
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            SlotData::Inline { len, bytes } => &bytes[..*len as usize],
            SlotData::Heap(buffer) => buffer,
        }
    }

    /// Keeps the first `key_len` bytes and puts `value` after them: in place when it
    /// fits inline, or in the heap buffer when that holds it and is at most about twice
    /// its size (so the byte bound, which counts capacity, stays tight).
    fn set_value(&mut self, key_len: usize, value: &[u8]) {
        let len = key_len + value.len();
        match self {
            SlotData::Inline { len: old, bytes } if len <= INLINE_BYTES => {
                bytes[key_len..len].copy_from_slice(value);
                *old = len as u8;
            }
            SlotData::Heap(buffer)
                if len > INLINE_BYTES && (len..=len * 2).contains(&buffer.capacity()) =>
            {
                buffer.truncate(key_len);
                buffer.extend_from_slice(value);
            }
            _ => {
                let key = &self.bytes()[..key_len];
                *self = SlotData::new(key, Some(value));
            }
        }
    }

    /// What the data counts for besides [`SLOT_BYTES`].
    fn heap_bytes(&self) -> usize {
        match self {
            SlotData::Inline { .. } => 0,
            SlotData::Heap(buffer) => buffer.capacity() + HEAP_OVERHEAD_BYTES,
        }
    }
}

/// A live slot. Its hash is not kept (8 bytes a slot, a sixth of it): growing the
/// table, evicting the slot and copying it into a write-back hash its key again, which
/// lies in the slot's own cache line, read anyway.
#[derive(Debug)]
struct Slot {
    data: SlotData,
    /// The key is `data`'s first `key_len` bytes, the value (if [`HAS_VALUE`]) the rest.
    key_len: u32,
    /// One bit per flag (five `bool`s would make a slot 48 bytes instead of 40).
    flags: u8,
}

/// The slot holds a value (else `None`: known absent, or a tombstone if dirty).
const HAS_VALUE: u8 = 1;
/// The slot differs from what RocksDB holds.
const DIRTY: u8 = 1 << 1;
/// RocksDB may hold a value for the key (see the module doc).
const STORED: u8 = 1 << 2;
/// The cache's epoch when the slot was last made dirty: a dirty slot of an earlier
/// epoch is owed to the snapshot being copied (see the module doc).
const EPOCH: u8 = 1 << 3;
/// Used since the CLOCK hand last passed this slot.
const REFERENCED: u8 = 1 << 4;

impl Slot {
    fn new(key: &[u8], value: Option<&[u8]>, dirty: bool, stored: bool, epoch: bool) -> Self {
        let mut slot = Slot {
            data: SlotData::new(key, value),
            key_len: u32::try_from(key.len()).expect("a state key shorter than 4 GiB"),
            flags: REFERENCED,
        };
        slot.set(HAS_VALUE, value.is_some());
        slot.set(DIRTY, dirty);
        slot.set(STORED, stored);
        slot.set(EPOCH, epoch);
        slot
    }

    fn is(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    fn set(&mut self, flag: u8, on: bool) {
        if on {
            self.flags |= flag;
        } else {
            self.flags &= !flag;
        }
    }

    /// Copies the key and value (filed under `hash`) into the write-back `layer`:
    /// RocksDB will hold them, so the slot is clean, and stored iff it has a value.
    fn write_into(&mut self, hash: u64, layer: &mut WriteLayer) {
        layer.push(hash, self.key(), self.value());
        self.set(DIRTY, false);
        self.set(STORED, self.is(HAS_VALUE));
    }

    /// Whether the slot is owed to the snapshot copied under the cache's `epoch`.
    fn owed(&self, epoch: bool) -> bool {
        self.is(DIRTY) && self.is(EPOCH) != epoch
    }

    fn key(&self) -> &[u8] {
        &self.data.bytes()[..self.key_len as usize]
    }

    fn value(&self) -> Option<&[u8]> {
        self.is(HAS_VALUE)
            .then(|| &self.data.bytes()[self.key_len as usize..])
    }

    fn set_value(&mut self, value: Option<&[u8]>) {
        self.data
            .set_value(self.key_len as usize, value.unwrap_or_default());
        self.set(HAS_VALUE, value.is_some());
    }

    fn bytes(&self) -> usize {
        SLOT_BYTES + self.data.heap_bytes()
    }
}

/// A slot of the cache: found by [`StateCache::find_touch`] (then valid until the cache
/// is next changed), or kept as a hint of where a key was (see
/// [`StateCache::put_hashed`]), checked before it is trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotId(u32);

#[derive(Debug)]
pub(crate) struct StateCache {
    /// Indices into `slots`, hashed by the slots' keys.
    table: HashTable<u32>,
    slots: Vec<Option<Slot>>,
    /// Indices of the `None` entries of `slots`.
    free: Vec<u32>,
    hasher: DefaultHashBuilder,
    /// Next slot the CLOCK sweep looks at (may be `slots.len()`: wraps to 0).
    hand: usize,
    /// Maximum number of slots; at least 1.
    capacity: usize,
    /// Maximum of `bytes`; at least 1.
    max_bytes: usize,
    bytes: usize,
    dirty: usize,
    /// Flipped by [`owe_dirty`](Self::owe_dirty); see the module doc.
    epoch: bool,
    /// Owed slots not copied yet (all of them dirty, counted in `dirty` too).
    owed: usize,
    /// Next slot [`copy_owed`](Self::copy_owed) looks at.
    owed_cursor: usize,
    /// The owed slots copied so far.
    owed_layer: WriteLayer,
    /// [`warm`](Self::warm)'s slots to read, kept for its allocation.
    to_warm: Vec<u32>,
    /// A slot whose key RocksDB may hold (once the write-backs sent are applied) has
    /// left the cache: see [`evicted_stored`](Self::evicted_stored).
    evicted_stored: bool,
}

impl StateCache {
    /// An empty cache of at most `capacity` slots and `max_bytes` bytes. Its table and
    /// slot array grow as slots come (sized up front for the most the bounds allow,
    /// the table's control bytes alone would cost 2 MiB of memory per subtask at the
    /// defaults, however small its state).
    pub(crate) fn new(capacity: usize, max_bytes: usize) -> Self {
        Self {
            table: HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            hasher: DefaultHashBuilder::default(),
            hand: 0,
            capacity: capacity.max(1),
            max_bytes: max_bytes.max(1),
            bytes: 0,
            dirty: 0,
            epoch: false,
            owed: 0,
            owed_cursor: 0,
            owed_layer: WriteLayer::default(),
            to_warm: Vec::new(),
            evicted_stored: false,
        }
    }

    /// The hash this cache files `key` under; a caller that needs it anyway (the
    /// aggregate's grouping) passes it back to the `_hashed` methods instead of having
    /// the key hashed again.
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    fn slot(&self, index: u32) -> &Slot {
        self.slots[index as usize]
            .as_ref()
            .expect("the table indexes only live slots")
    }

    fn slot_mut(&mut self, index: u32) -> &mut Slot {
        self.slots[index as usize]
            .as_mut()
            .expect("the table indexes only live slots")
    }

    /// The index of `key`'s slot, if cached: one probe.
    fn find(&self, hash: u64, key: &[u8]) -> Option<u32> {
        self.table
            .find(hash, |&i| {
                self.slots[i as usize]
                    .as_ref()
                    .is_some_and(|s| s.key() == key)
            })
            .copied()
    }

    /// `Some(current value)` if the cache knows `key` (`Some(None)`: known absent),
    /// `None` if RocksDB must be asked. Does not count as a use.
    #[cfg(test)]
    pub(crate) fn lookup(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.find(self.hash(key), key).map(|i| self.slot(i).value())
    }

    /// Like [`lookup`](Self::lookup), and marks the slot (if any) as recently used: one
    /// probe.
    #[cfg(test)]
    pub(crate) fn lookup_touch(&mut self, key: &[u8]) -> Option<Option<&[u8]>> {
        let id = self.find_touch(key)?;
        Some(self.value(id))
    }

    /// The slot of `key`, if cached, marked as recently used: one probe. Lets a caller
    /// that must change the cache on a miss (and so cannot hold a borrow of the value
    /// across it) read the value with [`value`](Self::value) afterwards.
    #[cfg(test)]
    pub(crate) fn find_touch(&mut self, key: &[u8]) -> Option<SlotId> {
        self.find_touch_hashed(self.hash(key), key)
    }

    /// Reads into the CPU's caches the slots the keys of `hashes` (each
    /// [`hash`](Self::hash) of a key) are most likely in, if the cache is large (see the
    /// module doc): first the table finds each hash's first candidate slot (its key
    /// unread), then one loop reads the candidates.
    pub(crate) fn warm(&mut self, hashes: impl Iterator<Item = u64>) {
        if !self.worth_warming() {
            return;
        }
        let mut to_warm = std::mem::take(&mut self.to_warm);
        to_warm.clear();
        to_warm.extend(hashes.filter_map(|hash| self.table.find(hash, |_| true).copied()));
        self.read_slots(to_warm.iter().copied());
        self.to_warm = to_warm;
    }

    /// Reads into the CPU's caches the keys of `keys` and the slots their hints name (see
    /// [`warm`](Self::warm)), if the cache is large: for probes by hint of keys whose
    /// bytes lie scattered too (a window's keys in key order).
    pub(crate) fn warm_hinted<'k>(
        &self,
        keys: impl Iterator<Item = (Option<SlotId>, &'k [u8])> + Clone,
    ) {
        if !self.worth_warming() {
            return;
        }
        self.read_slots(keys.clone().filter_map(|(hint, _)| hint.map(|SlotId(i)| i)));
        let read = keys.fold(0u8, |read, (_, key)| {
            read ^ key.first().copied().unwrap_or(0)
        });
        std::hint::black_box(read);
    }

    /// Whether the cache is large enough to warm (see the module doc).
    fn worth_warming(&self) -> bool {
        self.table.len() >= WARM_MIN_SLOTS
    }

    /// Reads the slots `indices` name (those past the array or free skipped), in a loop
    /// that does nothing else.
    fn read_slots(&self, indices: impl Iterator<Item = u32>) {
        let mut read = 0u32;
        for i in indices {
            if let Some(Some(slot)) = self.slots.get(i as usize) {
                read ^= slot.key_len;
            }
        }
        // Reads whose values nothing uses would be optimised away.
        std::hint::black_box(read);
    }

    /// [`find_touch`](Self::find_touch) with `hash` = [`hash`](Self::hash)`(key)`.
    pub(crate) fn find_touch_hashed(&mut self, hash: u64, key: &[u8]) -> Option<SlotId> {
        let i = self.find(hash, key)?;
        self.slot_mut(i).set(REFERENCED, true);
        Some(SlotId(i))
    }

    /// Slot `hint` if it holds `key` (a slot kept from an earlier probe, maybe reused
    /// since by another key), marked as recently used; `None` if not: the caller probes.
    pub(crate) fn touch_hinted(&mut self, hint: Option<SlotId>, key: &[u8]) -> Option<SlotId> {
        let i = self.hinted(hint, key)?;
        self.slot_mut(i).set(REFERENCED, true);
        Some(SlotId(i))
    }

    /// The value of a slot [`find_touch`](Self::find_touch) returned, the cache unchanged
    /// since.
    pub(crate) fn value(&self, id: SlotId) -> Option<&[u8]> {
        self.slot(id.0).value()
    }

    /// Whether the cache holds more than its bounds allow (the caller then evicts).
    pub(crate) fn over_budget(&self) -> bool {
        self.table.len() > self.capacity || self.bytes > self.max_bytes
    }

    /// Whether the cache is past 7/8 of either bound, where evictions bring it back.
    pub(crate) fn nearly_full(&self) -> bool {
        self.table.len() > self.capacity - self.capacity / 8
            || self.bytes > self.max_bytes - self.max_bytes / 8
    }

    /// Whether adding a slot of `incoming` bytes for a key not cached yet would put the
    /// cache over its bounds.
    pub(crate) fn would_overflow(&self, incoming: usize) -> bool {
        self.table.len() >= self.capacity || self.bytes.saturating_add(incoming) > self.max_bytes
    }

    /// Evicts slots (CLOCK order, see the module doc) until the cache is within 7/8 of
    /// both bounds with `incoming` more bytes and (if `new_slot`) one more slot to come
    /// (0 and no slot: after an insert), and returns the dirty ones among them as one
    /// write-back: the caller must write them to RocksDB (`None`: a delete). Clean
    /// victims are dropped.
    pub(crate) fn take_victims(&mut self, incoming: usize, new_slot: bool) -> WriteLayer {
        debug_assert_eq!(self.owed, 0, "evicting while slots are owed to a snapshot");
        let target_entries = self.capacity - self.capacity / 8;
        let target_entries = target_entries.saturating_sub(usize::from(new_slot));
        let target_bytes = (self.max_bytes - self.max_bytes / 8).saturating_sub(incoming);
        let mut victims = WriteLayer::with_capacity(
            self.dirty
                .min(self.table.len().saturating_sub(target_entries)),
        );
        // Each step clears a bit or evicts a slot, so two turns of the hand over the
        // array empty it at worst.
        while !self.table.is_empty()
            && (self.table.len() > target_entries || self.bytes > target_bytes)
        {
            if self.hand >= self.slots.len() {
                self.hand = 0;
            }
            let i = self.hand;
            self.hand += 1;
            let Some(slot) = self.slots[i].as_mut() else {
                continue;
            };
            if slot.is(REFERENCED) {
                slot.set(REFERENCED, false);
                continue;
            }
            let mut slot = self.slots[i].take().expect("checked live above");
            let hash = self.hasher.hash_one(slot.key());
            self.table
                .find_entry(hash, |&j| j as usize == i)
                .expect("every live slot is in the table")
                .remove();
            self.free.push(i as u32);
            self.bytes -= slot.bytes();
            if slot.is(DIRTY) {
                self.dirty -= 1;
                slot.write_into(hash, &mut victims);
            }
            // Once the victims are written, RocksDB holds the key iff the slot is stored.
            self.evicted_stored |= slot.is(STORED);
        }
        victims
    }

    /// Whether a slot whose key RocksDB may hold has ever been evicted. Until one is, a
    /// cache that started with an empty RocksDB knows every key that has a value: a key
    /// it does not hold is absent, and need not be looked up.
    pub(crate) fn evicted_stored(&self) -> bool {
        self.evicted_stored
    }

    /// Caches what RocksDB holds for `key` (clean) and returns it.
    #[cfg(test)]
    pub(crate) fn insert_clean(&mut self, key: &[u8], value: Option<&[u8]>) -> Option<&[u8]> {
        let slot = self.insert_clean_hashed(self.hash(key), key, value);
        self.value(slot)
    }

    /// [`insert_clean`](Self::insert_clean) with `hash` = [`hash`](Self::hash)`(key)`.
    pub(crate) fn insert_clean_hashed(
        &mut self,
        hash: u64,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> SlotId {
        let i = match self.find(hash, key) {
            Some(i) => {
                self.replace(i, false, value);
                i
            }
            None => self.insert_new(hash, key, value, false, value.is_some()),
        };
        SlotId(i)
    }

    /// Sets `key` to a copy of `value` (dirty), in place when the slot holds it (see
    /// `SlotData::set_value`): no allocation when a key is updated with a value of about
    /// its old size, the aggregate's every record.
    #[cfg(test)]
    pub(crate) fn put(&mut self, key: &[u8], value: &[u8]) {
        self.put_hashed(None, self.hash(key), key, value);
    }

    /// [`put`](Self::put) with `hash` = [`hash`](Self::hash)`(key)`. `hint`: where `key`
    /// was found earlier (its `get` in the same batch); if that slot still holds `key`
    /// it is `key`'s slot (no two live slots share a key) and the probe is skipped, at
    /// the cost of one key comparison; otherwise (the slot evicted or reused since) the
    /// key is looked up as without a hint.
    pub(crate) fn put_hashed(&mut self, hint: Option<SlotId>, hash: u64, key: &[u8], value: &[u8]) {
        match self.hinted(hint, key).or_else(|| self.find(hash, key)) {
            Some(i) => self.replace(i, true, Some(value)),
            None => {
                self.insert_new(hash, key, Some(value), true, true);
            }
        }
    }

    /// The slot `hint` names if it holds `key`.
    fn hinted(&self, hint: Option<SlotId>, key: &[u8]) -> Option<u32> {
        hint.map(|SlotId(i)| i).filter(|&i| {
            self.slots
                .get(i as usize)
                .and_then(Option::as_ref)
                .is_some_and(|s| s.key() == key)
        })
    }

    /// Deletes `key`: a dirty tombstone until flushed.
    #[cfg(test)]
    pub(crate) fn delete(&mut self, key: &[u8]) {
        self.delete_hashed(None, self.hash(key), key);
    }

    /// [`delete`](Self::delete) with `hash` = [`hash`](Self::hash)`(key)` and a slot
    /// `hint` as [`put_hashed`](Self::put_hashed) takes it.
    pub(crate) fn delete_hashed(&mut self, hint: Option<SlotId>, hash: u64, key: &[u8]) {
        let i = match self.hinted(hint, key).or_else(|| self.find(hash, key)) {
            Some(i) => {
                self.replace(i, true, None);
                i
            }
            None => self.insert_new(hash, key, None, true, true),
        };
        // Not a use: a tombstone, once written back, is the first slot a sweep takes.
        self.slot_mut(i).set(REFERENCED, false);
    }

    /// Replaces the value of live slot `i` with `value`, re-counting bytes and dirtiness:
    /// a write (`dirty`), or what RocksDB holds (a reload). A deletion of a key RocksDB
    /// cannot hold (not stored) is no write: the slot becomes a clean `None`.
    fn replace(&mut self, i: u32, dirty: bool, value: Option<&[u8]>) {
        let slot = self.slots[i as usize]
            .as_mut()
            .expect("the table indexes only live slots");
        if slot.owed(self.epoch) {
            // Copy on write: the snapshot gets the value the slot had when it was owed.
            slot.write_into(self.hasher.hash_one(slot.key()), &mut self.owed_layer);
            self.dirty -= 1;
            self.owed -= 1;
        }
        if !dirty {
            slot.set(STORED, value.is_some());
        }
        let dirty = dirty && (value.is_some() || slot.is(STORED));
        let old_bytes = slot.bytes();
        let was_dirty = slot.is(DIRTY);
        slot.set_value(value);
        slot.set(DIRTY, dirty);
        slot.set(EPOCH, self.epoch);
        slot.set(REFERENCED, true);
        let new_bytes = slot.bytes();
        self.bytes = self.bytes - old_bytes + new_bytes;
        self.dirty = self.dirty - usize::from(was_dirty) + usize::from(dirty);
    }

    /// Adds a slot for `key`, known not cached (`stored`: see the module doc); returns
    /// its index.
    fn insert_new(
        &mut self,
        hash: u64,
        key: &[u8],
        value: Option<&[u8]>,
        dirty: bool,
        stored: bool,
    ) -> u32 {
        let slot = Slot::new(key, value, dirty, stored, self.epoch);
        self.bytes += slot.bytes();
        self.dirty += usize::from(dirty);
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(slot);
                i
            }
            None => {
                let i = u32::try_from(self.slots.len()).expect("fewer than 2^32 cache slots");
                if self.slots.len() == self.slots.capacity() {
                    self.slots.reserve(self.growth(self.slots.len()));
                }
                self.slots.push(Some(slot));
                i
            }
        };
        let (slots, hasher) = (&self.slots, &self.hasher);
        let rehash = |&j: &u32| {
            hasher.hash_one(
                slots[j as usize]
                    .as_ref()
                    .expect("the table indexes only live slots")
                    .key(),
            )
        };
        if self.table.len() == self.table.capacity() {
            let growth = self.growth(self.table.len());
            self.table.reserve(growth, rehash);
        }
        self.table.insert_unique(hash, i, rehash);
        i
    }

    /// By how much to grow the table or the slot array, full at `len`: twofold (the
    /// collections' own growth) while small, eightfold past [`WARM_MIN_SLOTS`] up to
    /// the most slots the bounds allow. Growing the table rehashes every key, a read of
    /// its slot from memory each in a large cache; growing by eight, a cache that
    /// fills the default bounds (1.4 million slots) rehashes some 600,000 keys on the
    /// way instead of 2 million.
    fn growth(&self, len: usize) -> usize {
        if len < WARM_MIN_SLOTS {
            return 1;
        }
        let most = self.capacity.min(self.max_bytes / SLOT_BYTES);
        len.saturating_mul(8).min(most).saturating_sub(len).max(1)
    }

    /// Live slots.
    fn live(&self) -> impl Iterator<Item = &Slot> {
        self.slots.iter().flatten()
    }

    /// Dirty slots as (key, value or `None` for a tombstone), in no particular order.
    #[cfg(test)]
    pub(crate) fn dirty(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        self.live()
            .filter(|slot| slot.is(DIRTY))
            .map(|slot| (slot.key(), slot.value()))
    }

    /// Whether `key`'s slot is dirty (false if not cached).
    #[cfg(test)]
    pub(crate) fn is_dirty(&self, key: &[u8]) -> bool {
        self.find(self.hash(key), key)
            .is_some_and(|i| self.slot(i).is(DIRTY))
    }

    pub(crate) fn dirty_len(&self) -> usize {
        self.dirty
    }

    /// Copies every dirty slot into one write-back and marks them clean (they stay
    /// cached): the caller must write the layer to RocksDB. One pass over the slots.
    pub(crate) fn copy_out_dirty(&mut self) -> WriteLayer {
        debug_assert_eq!(
            self.owed, 0,
            "copying out while slots are owed to a snapshot"
        );
        let mut layer = WriteLayer::with_capacity(self.dirty);
        if self.dirty == 0 {
            return layer;
        }
        for slot in self
            .slots
            .iter_mut()
            .flatten()
            .filter(|slot| slot.is(DIRTY))
        {
            slot.write_into(self.hasher.hash_one(slot.key()), &mut layer);
        }
        self.dirty = 0;
        layer
    }

    /// Makes every dirty slot owed to a snapshot, to be copied by
    /// [`copy_owed`](Self::copy_owed) (or before it changes); none may be owed already.
    /// Returns how many are owed.
    pub(crate) fn owe_dirty(&mut self) -> usize {
        debug_assert_eq!(self.owed, 0, "a snapshot is being copied already");
        self.epoch = !self.epoch;
        self.owed = self.dirty;
        self.owed_cursor = 0;
        self.owed_layer = WriteLayer::with_capacity(self.owed);
        self.owed
    }

    /// Owed slots not copied yet.
    pub(crate) fn owed_len(&self) -> usize {
        self.owed
    }

    /// Copies the owed slots among the next `scan` slots of the array into the
    /// snapshot's layer and marks them clean; `usize::MAX`: all that are left.
    pub(crate) fn copy_owed(&mut self, scan: usize) {
        let end = self.slots.len().min(self.owed_cursor.saturating_add(scan));
        let epoch = self.epoch;
        for slot in self.slots[self.owed_cursor..end].iter_mut().flatten() {
            if self.owed == 0 {
                break;
            }
            if slot.owed(epoch) {
                slot.write_into(self.hasher.hash_one(slot.key()), &mut self.owed_layer);
                self.dirty -= 1;
                self.owed -= 1;
            }
        }
        self.owed_cursor = end;
    }

    /// The snapshot's layer, once no slot is owed any more.
    pub(crate) fn take_owed_layer(&mut self) -> WriteLayer {
        debug_assert_eq!(self.owed, 0, "the snapshot's layer is not complete");
        std::mem::take(&mut self.owed_layer)
    }

    /// Records that every dirty slot has been written to RocksDB.
    #[cfg(test)]
    pub(crate) fn mark_clean(&mut self) {
        self.copy_out_dirty();
    }

    /// Drops every slot. Only after `mark_clean`: dropping a dirty slot would lose a write.
    #[cfg(test)]
    pub(crate) fn clear(&mut self) {
        debug_assert_eq!(self.dirty, 0, "clearing a cache with unflushed writes");
        self.table.clear();
        self.slots.clear();
        self.free.clear();
        self.hand = 0;
        self.bytes = 0;
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// Bytes the slots count for (see [`slot_bytes`]).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Slots whose key starts with `prefix`, sorted by key (RocksDB's bytewise order).
    pub(crate) fn sorted_with_prefix(&self, prefix: &[u8]) -> Vec<(&[u8], Option<&[u8]>)> {
        let mut entries: Vec<_> = self
            .live()
            .filter(|slot| slot.key().starts_with(prefix))
            .map(|slot| (slot.key(), slot.value()))
            .collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write-back's entries in key order, owned.
    fn entries(layer: &WriteLayer) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        layer
            .sorted()
            .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
            .collect()
    }

    fn keys(layer: &WriteLayer) -> Vec<Vec<u8>> {
        entries(layer).into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn a_slot_hint_is_trusted_only_while_the_slot_holds_its_key() {
        let mut cache = StateCache::new(1, 1 << 20);
        let a = cache.insert_clean_hashed(cache.hash(b"a"), b"a", Some(b"1"));
        // "a" evicted (clean, dropped), and its slot taken by "b".
        assert!(cache.take_victims(0, true).is_empty());
        let b = cache.insert_clean_hashed(cache.hash(b"b"), b"b", Some(b"5"));
        assert_eq!(a, b, "the freed slot is reused, so the hint of a is stale");
        assert_eq!(
            cache.touch_hinted(Some(a), b"a"),
            None,
            "a read does not trust it"
        );
        assert_eq!(cache.touch_hinted(Some(b), b"b"), Some(b));

        cache.put_hashed(Some(a), cache.hash(b"a"), b"a", b"2");
        assert_eq!(cache.lookup(b"a"), Some(Some(&b"2"[..])));
        assert_eq!(
            cache.lookup(b"b"),
            Some(Some(&b"5"[..])),
            "b's slot is left alone"
        );

        // A hint that still holds its key is the key's slot.
        cache.put_hashed(Some(b), cache.hash(b"b"), b"b", b"6");
        assert_eq!(cache.lookup(b"b"), Some(Some(&b"6"[..])));
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.dirty_len(), 2);
        // A hint past the slot array is ignored too.
        cache.put_hashed(Some(SlotId(99)), cache.hash(b"c"), b"c", b"7");
        assert_eq!(cache.lookup(b"c"), Some(Some(&b"7"[..])));
    }

    #[test]
    fn state_cache_tracks_dirty_slots_and_tombstones() {
        let mut cache = StateCache::new(3, usize::MAX);
        assert_eq!(cache.lookup(b"a"), None);
        assert_eq!(cache.lookup_touch(b"a"), None);
        assert_eq!(cache.insert_clean(b"a", Some(b"1")), Some(&b"1"[..]));
        assert_eq!(cache.insert_clean(b"b", None), None);
        assert_eq!(cache.lookup(b"a"), Some(Some(&b"1"[..])));
        assert_eq!(cache.lookup_touch(b"b"), Some(None));
        assert_eq!(cache.dirty_len(), 0);

        cache.put(b"a", b"2");
        cache.delete(b"c");
        cache.put(b"a", b"3");
        assert_eq!(cache.dirty_len(), 2);
        assert!(cache.is_dirty(b"a") && cache.is_dirty(b"c") && !cache.is_dirty(b"b"));
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

        // A clean insert over a dirty slot (a reload) makes it clean again.
        cache.insert_clean(b"c", Some(b"9"));
        assert_eq!(cache.dirty_len(), 1);

        cache.mark_clean();
        assert_eq!(cache.dirty_len(), 0);
        assert_eq!(cache.lookup(b"c"), Some(Some(&b"9"[..])));
        cache.clear();
        assert_eq!((cache.len(), cache.bytes()), (0, 0));
        assert_eq!(cache.lookup(b"a"), None);
    }

    /// Issue 7 §2: the cache counts bytes, and evicts slots not used since the last sweep
    /// first.
    #[test]
    fn bytes_are_counted_and_eviction_takes_the_slots_not_used_since() {
        let slot = slot_bytes(b"k0", Some(&[0; 1000]));
        let mut cache = StateCache::new(100, 4 * slot);
        for k in 0..4u8 {
            cache.put(&[b'k', b'0' + k], &[0; 1000]);
        }
        assert_eq!(cache.bytes(), 4 * slot);
        assert!(!cache.over_budget());
        // First sweep: every slot was just used, so the hand clears all four bits and
        // comes round to evict in array order: down to 7/8 of 4 slots' bytes, two go.
        cache.put(b"k4", &[0; 1000]);
        assert!(cache.over_budget());
        let victims = cache.take_victims(0, false);
        assert_eq!(keys(&victims), [b"k0", b"k1"]);
        assert_eq!(
            victims.lookup(cache.hash(b"k0"), b"k0"),
            Some(Some(&[0; 1000][..]))
        );
        assert_eq!(
            (cache.len(), cache.bytes(), cache.dirty_len()),
            (3, 3 * slot, 3)
        );
        assert!(!cache.over_budget());
        // k2 is used again, k3 and k4 are not: the next sweep skips k2.
        assert!(cache.lookup_touch(b"k2").is_some());
        cache.put(b"k5", &[0; 1000]);
        cache.put(b"k6", &[0; 1000]);
        let victims = cache.take_victims(0, false);
        assert_eq!(keys(&victims), [b"k3", b"k4"]);
        assert!(cache.lookup(b"k2").is_some());
        // Replacing a value re-counts its bytes (an empty one fits in the slot).
        let before = cache.bytes();
        cache.put(b"k2", b"");
        assert_eq!(cache.bytes(), before - slot + SLOT_BYTES);
    }

    #[test]
    fn a_large_cache_grows_eightfold_up_to_its_bounds() {
        let cache = StateCache::new(usize::MAX, 1_000_000 * SLOT_BYTES);
        assert_eq!(
            cache.growth(1_000),
            1,
            "small: the collections' own doubling"
        );
        assert_eq!(cache.growth(WARM_MIN_SLOTS), 7 * WARM_MIN_SLOTS);
        assert_eq!(
            cache.growth(500_000),
            500_000,
            "up to the most slots the bytes allow"
        );
        assert_eq!(cache.growth(1_000_000), 1, "at the bound: one more");
        let few = StateCache::new(100_000, usize::MAX);
        assert_eq!(few.growth(WARM_MIN_SLOTS), 100_000 - WARM_MIN_SLOTS);
    }

    #[test]
    fn warming_reads_slots_and_changes_nothing() {
        // Two caches above the warming threshold, swept once (every clock bit cleared,
        // the first slots evicted); one warmed with keys present and absent and hints
        // live, stale and past the array. The next sweep takes the same slots from both.
        let keys = 2 * WARM_MIN_SLOTS as u32;
        let swept = || {
            let mut cache = StateCache::new(keys as usize, usize::MAX);
            for k in 0..keys {
                cache.put(&k.to_be_bytes(), b"v");
            }
            cache.delete(&3u32.to_be_bytes());
            cache.capacity = keys as usize - 1;
            cache.take_victims(0, false);
            assert!(cache.len() >= WARM_MIN_SLOTS && cache.lookup(&1u32.to_be_bytes()).is_none());
            cache
        };
        let (mut warmed, mut plain) = (swept(), swept());
        let (live, evicted) = (keys / 2, 1u32);
        let hint = warmed.find(warmed.hash(&live.to_be_bytes()), &live.to_be_bytes());
        let hashes: Vec<u64> = [&live.to_be_bytes()[..], b"absent", &evicted.to_be_bytes()]
            .iter()
            .map(|key| warmed.hash(key))
            .collect();
        warmed.warm(hashes.into_iter());
        let hints = [
            hint.map(SlotId),
            Some(SlotId(3)),
            None,
            Some(SlotId(u32::MAX)),
        ];
        warmed.warm_hinted(hints.into_iter().map(|hint| (hint, &b""[..])));
        for cache in [&mut warmed, &mut plain] {
            cache.capacity = 16;
        }
        let (a, b) = (warmed.take_victims(0, false), plain.take_victims(0, false));
        assert!(entries(&a).contains(&(live.to_be_bytes().to_vec(), Some(b"v".to_vec()))));
        assert_eq!(entries(&a), entries(&b), "the same slots: no clock bit set");
    }

    /// A deletion writes a tombstone only for a key RocksDB may hold: one read with a
    /// value, written back (directly or through a snapshot's copy, copy on write
    /// included), or written without being read; a key read as absent and deleted
    /// before any write-back leaves a clean `None`.
    #[test]
    fn a_key_never_written_back_is_deleted_without_a_tombstone() {
        let mut cache = StateCache::new(64, usize::MAX);
        // (Whether the tombstone is dirty, what a read finds.)
        fn delete_after(cache: &mut StateCache, key: &[u8]) -> (bool, Option<Option<Vec<u8>>>) {
            cache.delete(key);
            let found = cache.lookup(key).map(|v| v.map(<[u8]>::to_vec));
            (cache.is_dirty(key), found)
        }
        // Read as absent, written, deleted: nothing for RocksDB.
        cache.insert_clean(b"fresh", None);
        cache.put(b"fresh", b"1");
        assert_eq!(delete_after(&mut cache, b"fresh"), (false, Some(None)));
        assert_eq!(cache.dirty_len(), 0);
        // Read with a value, or written blind: a tombstone.
        cache.insert_clean(b"read", Some(b"1"));
        assert_eq!(delete_after(&mut cache, b"read"), (true, Some(None)));
        cache.put(b"blind", b"1");
        assert_eq!(delete_after(&mut cache, b"blind"), (true, Some(None)));
        cache.delete(b"blind-delete");
        assert!(cache.is_dirty(b"blind-delete"));
        // Written back: a tombstone; a tombstone written back: absent again.
        cache.insert_clean(b"written", None);
        cache.put(b"written", b"1");
        assert_eq!(entries(&cache.copy_out_dirty()).len(), 4);
        assert_eq!(delete_after(&mut cache, b"written"), (true, Some(None)));
        assert_eq!(entries(&cache.copy_out_dirty()).len(), 1);
        cache.put(b"written", b"2");
        assert_eq!(delete_after(&mut cache, b"written"), (false, Some(None)));
        // Owed to a snapshot: copied before the delete (copy on write) or by the copy.
        for key in [&b"owed-cow"[..], b"owed-copied"] {
            cache.insert_clean(key, None);
            cache.put(key, b"1");
        }
        cache.owe_dirty();
        assert_eq!(delete_after(&mut cache, b"owed-cow"), (true, Some(None)));
        cache.copy_owed(usize::MAX);
        assert_eq!(delete_after(&mut cache, b"owed-copied"), (true, Some(None)));
        let snapshot = entries(&cache.take_owed_layer());
        assert_eq!(
            snapshot,
            [
                (b"owed-copied".to_vec(), Some(b"1".to_vec())),
                (b"owed-cow".to_vec(), Some(b"1".to_vec()))
            ]
        );
        assert_eq!(
            cache.dirty_len(),
            2,
            "their tombstones, for after the snapshot"
        );
    }

    #[test]
    fn a_deleted_key_is_evicted_before_the_keys_used_before_it() {
        let mut cache = StateCache::new(8, usize::MAX);
        for k in 0..7u8 {
            cache.put(&[b'k', b'0' + k], b"v");
        }
        // k5's deletion is its last use: the sweep (down to 7 slots) takes its tombstone
        // at once, instead of clearing every bit and coming round to take k0.
        cache.delete(b"k5");
        cache.put(b"k7", b"v");
        let victims = cache.take_victims(0, false);
        assert_eq!(entries(&victims), [(b"k5".to_vec(), None)]);
        assert!(cache.lookup(b"k0").is_some());
        assert!(
            cache.lookup(b"k5").is_none(),
            "its tombstone is in the write-back"
        );
    }

    #[test]
    fn take_victims_returns_the_dirty_slots_and_drops_the_clean_ones() {
        let mut cache = StateCache::new(8, usize::MAX);
        // Inserted out of key order; clean and dirty mixed.
        for (key, dirty) in [
            (&b"e"[..], true),
            (b"a", false),
            (b"d", true),
            (b"b", true),
            (b"c", false),
            (b"f", true),
            (b"g", false),
            (b"h", true),
        ] {
            if dirty {
                cache.put(key, key);
            } else {
                cache.insert_clean(key, None);
            }
        }
        cache.delete(b"b");
        assert_eq!(cache.dirty_len(), 5);
        assert!(cache.would_overflow(0) && !cache.over_budget());
        // Room for one more slot within 7/8 of 8: down to 6 slots. The hand takes b's
        // tombstone on its way (a delete is not a use), clears every other bit, then
        // takes the first slot in array order: e.
        let victims = cache.take_victims(0, true);
        assert_eq!(
            entries(&victims),
            vec![(b"b".to_vec(), None), (b"e".to_vec(), Some(b"e".to_vec()))]
        );
        assert_eq!((cache.len(), cache.dirty_len()), (6, 3));
        // Everything left, down to nothing: tombstones as None.
        let mut tiny = StateCache::new(1, usize::MAX);
        tiny.put(b"z", b"1");
        tiny.delete(b"y");
        let victims = tiny.take_victims(0, true);
        assert_eq!(
            entries(&victims),
            vec![(b"y".to_vec(), None), (b"z".to_vec(), Some(b"1".to_vec()))]
        );
        assert_eq!((tiny.len(), tiny.bytes(), tiny.dirty_len()), (0, 0, 0));
        // Freed slots are reused, and the table still finds every key.
        for k in 0..100u8 {
            cache.put(&[k], &[k]);
            if cache.over_budget() {
                cache.take_victims(0, false);
            }
            assert_eq!(cache.lookup(&[k]), Some(Some(&[k][..])));
        }
        assert!(cache.len() <= 8 && cache.slots.len() <= 9);
        let live_bytes: usize = cache.live().map(Slot::bytes).sum();
        assert_eq!(cache.bytes(), live_bytes);
        assert_eq!(cache.dirty_len(), cache.dirty().count());
    }

    #[test]
    fn the_byte_bound_evicts_a_large_slot() {
        let mut cache = StateCache::new(100, 1000);
        cache.put(b"small", &[0; 10]);
        cache.put(b"huge", &[0; 5000]);
        assert!(cache.over_budget());
        let victims = cache.take_victims(0, false);
        assert_eq!(keys(&victims), [&b"huge"[..], b"small"]);
        assert_eq!((cache.len(), cache.bytes()), (0, 0));
        // A get's insert makes room first: within bounds with the incoming bytes.
        cache.put(b"a", &[0; 300]);
        cache.put(b"b", &[0; 300]);
        let incoming = slot_bytes(b"c", Some(&[0; 300]));
        assert!(cache.would_overflow(incoming));
        cache.take_victims(incoming, true);
        assert!(cache.bytes() + incoming <= 1000 - 1000 / 8);
    }

    #[test]
    fn put_counts_bytes_and_dirtiness_when_it_reuses_a_buffer() {
        let mut cache = StateCache::new(8, usize::MAX);
        let mut model = std::collections::BTreeMap::new();
        for (key, value) in [
            (&b"a"[..], &b"1234"[..]),
            (b"b", b"x"),
            (b"a", b"12345678"),
            (b"a", b""),
            (b"a", &[7; 100]),
            (b"a", b"9"),
        ] {
            cache.put(key, value);
            model.insert(key, value);
            assert_eq!(cache.lookup(key), Some(Some(value)));
            let bytes: usize = model.iter().map(|(k, v)| slot_bytes(k, Some(v))).sum();
            assert_eq!((cache.bytes(), cache.dirty_len()), (bytes, model.len()));
        }
        cache.mark_clean();
        cache.put(b"b", b"y");
        assert_eq!(cache.dirty_len(), 1);
        assert!(cache.is_dirty(b"b") && !cache.is_dirty(b"a"));
    }

    /// What `SLOT_BYTES` claims: a slot, free or not, takes 40 bytes of the slot array
    /// (and `SLOT_BYTES` counts 8 more for the table).
    #[test]
    fn a_slot_is_40_bytes() {
        assert_eq!(std::mem::size_of::<Option<Slot>>(), 40);
        assert_eq!(SLOT_BYTES, 40 + 8);
    }

    /// Small entries live in the slot; a large one in a heap buffer, reused for a value
    /// of at least half its size (and counted by its capacity); back in the slot when
    /// small again.
    #[test]
    fn entries_move_between_the_slot_and_the_heap_and_count_what_they_hold() {
        let mut cache = StateCache::new(8, usize::MAX);
        let key = b"key-of-10b";
        cache.put(key, &[1; 20]);
        assert_eq!(
            cache.bytes(),
            SLOT_BYTES,
            "30 bytes of key and value fit the slot"
        );
        cache.put(key, &[2; 21]);
        assert_eq!(cache.bytes(), SLOT_BYTES + 31 + HEAP_OVERHEAD_BYTES);
        cache.put(key, &[3; 100]);
        assert_eq!(cache.bytes(), SLOT_BYTES + 110 + HEAP_OVERHEAD_BYTES);
        cache.put(key, &[4; 60]);
        assert_eq!(cache.lookup(key), Some(Some(&[4; 60][..])));
        assert_eq!(
            cache.bytes(),
            SLOT_BYTES + 110 + HEAP_OVERHEAD_BYTES,
            "70 bytes reuse the 110-byte buffer"
        );
        cache.put(key, &[5; 40]);
        assert_eq!(cache.lookup(key), Some(Some(&[5; 40][..])));
        assert_eq!(cache.bytes(), SLOT_BYTES + 50 + HEAP_OVERHEAD_BYTES);
        cache.delete(key);
        assert_eq!(cache.lookup(key), Some(None));
        assert_eq!(cache.bytes(), SLOT_BYTES);
        cache.put(b"", &[6; 30]);
        assert_eq!(cache.lookup(b""), Some(Some(&[6; 30][..])));
        let layer = cache.copy_out_dirty();
        assert_eq!(
            entries(&layer),
            [(b"".to_vec(), Some(vec![6; 30])), (key.to_vec(), None)]
        );
    }
}
