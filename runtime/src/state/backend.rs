//! `KeyedState`: the RocksDB keyed-state backend of one stateful operator subtask.
//!
//! Model (Flink's): one RocksDB instance per stateful subtask, so each subtask snapshots
//! its own DB at its own barrier. Keys are laid out by [`StateKey`](crate::state::StateKey);
//! values are the guest's accumulator bytes, opaque here.
//!
//! Invariants:
//! - The RocksDB WAL is disabled: the live DB is scratch space, state is made durable ONLY
//!   by checkpoints. A subtask (re)starts from `open_fresh` (empty) or `restore`, never by
//!   reopening a previous run's directory.
//! - Reads and writes go through a write-back cache (see `cache`) of at most
//!   `CacheBounds::entries` entries and `CacheBounds::bytes` bytes (given at open). When
//!   the cache passes either bound, entries not used recently (CLOCK) are evicted down to
//!   7/8 of both; the dirty ones among them go to the state writer as one write-back
//!   (see `write_layer`; the writer sorts it), never one write per record. A dirty
//!   entry otherwise stays in the cache until a barrier, so a key updated many times
//!   between two barriers is written to RocksDB once. Write-backs in flight hold at
//!   most the byte bound more (see `writer`), and a snapshot's copy being made (see
//!   `begin_snapshot`) at most the cache's dirty entries again: the state's memory is
//!   at most about three times `CacheBounds::bytes` plus
//!   RocksDB's own: two memtables of `CacheBounds::memtable_bytes` (a share of the
//!   process's, `memtable_bytes`) and the block cache, one per process
//!   (`PROCESS_BLOCK_CACHE_BYTES`).
//! - Only the state writer thread (see `writer`) writes the live DB, in the order the
//!   task sent write-backs; the task thread only reads it. What `get` returns is the
//!   cache, else the newest write-back still in flight, else RocksDB; `scan` waits until
//!   RocksDB holds every write-back and merges the cache over it. `prefetch` reads a
//!   batch's keys unknown to both in one batched MultiGet and caches them (clean), so
//!   the `get`s that follow hit: it changes what is cached, never what is read.
//! - A state opened empty knows every key while its cache has evicted none that RocksDB
//!   may hold (see `cache`: a clean entry it holds, or a dirty one with a value): a key
//!   not cached is then absent, and a miss reads neither the write-backs nor RocksDB.
//!   A restored state, or one that has evicted such a key, reads them on every miss.
//! - A snapshot has a short synchronous part on the task thread, at the barrier (copy
//!   the dirty entries into one write-back, mark them clean, and ask the writer for
//!   checkpoint n), and an asynchronous part on the writer thread (sort and write
//!   them, RocksDB checkpoint into `<work_dir>/snapshot-<id>/` by hard links, upload of
//!   the SSTs the storage does not hold yet plus the small non-SST files). SSTs are
//!   immutable, so they are shared between checkpoints under names unique across DB
//!   lineages (see `shared_names`).
//! - `restore` rebuilds `<work_dir>/db/` from storage (SSTs hard-linked where possible,
//!   other files copied), starts with an empty cache, and remembers the restored files'
//!   shared names, so the next checkpoint uploads only SSTs created since. A rescale
//!   restores key-group ranges of several snapshots instead (`key_group_restore`).
//! - Everything under `<work_dir>/db/` and `<work_dir>/snapshot-*` belongs to this type and
//!   is wiped on open; nothing else in `work_dir` is touched.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DB, DBCompressionType,
    DEFAULT_COLUMN_FAMILY_NAME, Options, ReadOptions,
};

use crate::record::CheckpointId;
use crate::state::cache::{SlotId, StateCache, slot_bytes};
use crate::state::shared_names::SharedNames;
use crate::state::write_layer::InFlight;
use crate::state::writer::{
    CheckpointRequest, SNAPSHOT_DIR_PREFIX, SnapshotInProgress, StateWriter, checkpoint_request,
    remove_dir_if_exists,
};
use crate::state::{DbSnapshot, StateError, StateScan};
use crate::storage::CheckpointStorage;

/// Default cache capacity, in entries (keys): no bound of its own, the byte bound binds
/// (every entry counts for at least `cache::SLOT_BYTES`, so 64 MiB hold at most some
/// 1.2 million).
pub const DEFAULT_CACHE_CAPACITY: usize = u32::MAX as usize;
/// Default cache capacity in bytes (keys, values and per-entry overhead): 64 MiB per
/// stateful subtask, whatever the accumulators' sizes: about 1.4 million small ones.
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;

/// Memory bounds of one `KeyedState`: its write-back cache and its RocksDB memtables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheBounds {
    /// Most entries (values, tombstones, negative lookups); at least 1.
    pub entries: usize,
    /// Most bytes those entries count for (see `cache::slot_bytes`); at least 1.
    pub bytes: usize,
    /// Size of each RocksDB memtable (at most two are held: one filling, one being
    /// flushed); see [`memtable_bytes`].
    pub memtable_bytes: usize,
}

impl From<usize> for CacheBounds {
    /// `entries` entries, the default byte bound and the largest memtables.
    fn from(entries: usize) -> Self {
        CacheBounds {
            entries,
            bytes: DEFAULT_CACHE_BYTES,
            memtable_bytes: MAX_MEMTABLE_BYTES,
        }
    }
}

/// Largest RocksDB memtable. RocksDB's default, 64 MiB, would make memtables the largest
/// part of a subtask's memory next to a bounded accumulator cache; every checkpoint
/// flushes the memtable anyway, so a smaller one costs little.
const MAX_MEMTABLE_BYTES: usize = 16 << 20;
/// Smallest memtable a subtask gets, however many share the process.
const MIN_MEMTABLE_BYTES: usize = 1 << 20;
/// Memtables of all the stateful subtasks of one process together (two each).
pub const PROCESS_MEMTABLE_BYTES: usize = 256 << 20;
/// The block cache all the DBs of a process share (RocksDB would give each DB its own
/// 32 MiB).
pub const PROCESS_BLOCK_CACHE_BYTES: usize = 64 << 20;

/// The memtable size of each of `stateful_subtasks` DBs in one process: an equal share
/// of [`PROCESS_MEMTABLE_BYTES`] (two memtables each), between 1 and 16 MiB. So the
/// memtables (and their bloom filters, a tenth of their size, allocated up front) do not
/// grow with parallelism past 8 stateful subtasks, up to 128.
pub fn memtable_bytes(stateful_subtasks: usize) -> usize {
    (PROCESS_MEMTABLE_BYTES / (2 * stateful_subtasks.max(1)))
        .clamp(MIN_MEMTABLE_BYTES, MAX_MEMTABLE_BYTES)
}

/// The process's shared block cache (see [`PROCESS_BLOCK_CACHE_BYTES`]).
fn block_cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Cache::new_lru_cache(PROCESS_BLOCK_CACHE_BYTES))
}

/// Bloom filter bits per key in the SSTs: about 1% false positives.
const BLOOM_BITS_PER_KEY: f64 = 10.0;
/// Share of the memtable's size given to its whole-key bloom filter.
const MEMTABLE_BLOOM_RATIO: f64 = 0.1;

/// RocksDB info-log files kept in the DB directory (`LOG`, `LOG.old.*`).
const INFO_LOG_FILES_KEPT: usize = 2;

/// Sub-directory of the work dir holding the live DB.
const DB_DIR: &str = "db";

/// A state key's hash under one [`KeyedState`]'s cache ([`KeyedState::key_hash`]). A
/// caller that hashes its keys anyway (the aggregate groups a batch by state key) files
/// them under this hash and hands it back to [`KeyedState::get_with_slot`] and
/// [`KeyedState::put_at`], so a key is hashed once per batch, not once per access.
/// Meaningful only to the state that made it (its hasher is randomly seeded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHash(u64);

impl KeyHash {
    /// The hash, to file the key in the caller's own hash table.
    pub fn value(self) -> u64 {
        self.0
    }

    /// A hash [`value`](Self::value) gave, back (e.g. from an index that stores them).
    pub(crate) fn from_value(value: u64) -> Self {
        KeyHash(value)
    }
}

/// Keyed state of one stateful operator subtask. See the module doc.
pub struct KeyedState {
    cache: StateCache,
    /// Write-backs sent to the writer, served to reads until RocksDB holds them.
    in_flight: InFlight,
    /// Owns the DB; dropped (thread joined) before anything else of the state goes.
    writer: StateWriter,
    /// The state started empty (`open_fresh`): while the cache has evicted no key
    /// RocksDB may hold (`StateCache::evicted_stored`), a key it does not hold is
    /// absent, and a miss reads neither the write-backs in flight nor RocksDB.
    started_empty: bool,
    /// The checkpoint whose entries the cache is copying out (see
    /// [`begin_snapshot`](Self::begin_snapshot)): sent once they all are.
    snapshot_due: Option<CheckpointRequest>,
    /// The cache's byte bound, also the most bytes write-backs in flight may hold.
    max_bytes: usize,
    /// Keys RocksDB was asked for since the last [`prefetch`](Self::prefetch): whether
    /// the next one is worth its cache probes.
    read_from_db: usize,
    /// One set of read options for every RocksDB read (creating them is a C++ allocation).
    read_options: ReadOptions,
    work_dir: PathBuf,
    db_dir: PathBuf,
}

impl std::fmt::Debug for KeyedState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedState")
            .field("db_dir", &self.db_dir)
            .field("cached", &self.cache.len())
            .field("dirty", &self.cache.dirty_len())
            .finish_non_exhaustive()
    }
}

impl KeyedState {
    /// Wipes `<work_dir>/db` (and leftover snapshot dirs) and opens an empty DB there.
    /// `cache_capacity`: the cache's bounds (a number: entries, with the default bytes).
    pub fn open_fresh(
        work_dir: impl AsRef<Path>,
        cache_capacity: impl Into<CacheBounds>,
    ) -> Result<Self, StateError> {
        let cache_capacity = cache_capacity.into();
        let work_dir = work_dir.as_ref().to_path_buf();
        let db_dir = prepare_work_dir(&work_dir)?;
        let db = open_db(&db_dir, cache_capacity.memtable_bytes)?;
        let mut state = Self::from_parts(db, work_dir, db_dir, cache_capacity, SharedNames::new())?;
        state.started_empty = true;
        Ok(state)
    }

    /// Rebuilds `<work_dir>/db` from `snapshot`'s files in `storage` and opens it. The cache
    /// (of at most `cache_capacity` entries) starts empty.
    pub fn restore(
        work_dir: impl AsRef<Path>,
        storage: &CheckpointStorage,
        snapshot: &DbSnapshot,
        cache_capacity: impl Into<CacheBounds>,
    ) -> Result<Self, StateError> {
        let cache_capacity = cache_capacity.into();
        let work_dir = work_dir.as_ref().to_path_buf();
        let restore = || -> Result<Self, StateError> {
            let db_dir = prepare_work_dir(&work_dir)?;
            fetch_snapshot(storage, snapshot, &db_dir)?;
            let db = open_db(&db_dir, cache_capacity.memtable_bytes)?;
            let names = SharedNames::restored(snapshot);
            Self::from_parts(db, work_dir.clone(), db_dir, cache_capacity, names)
        };
        let state = restore()
            .map_err(|e| e.in_checkpoint("restore", &snapshot.task, snapshot.checkpoint_id))?;
        tracing::debug!(
            task = %snapshot.task,
            checkpoint = %snapshot.checkpoint_id,
            sst_files = snapshot.shared.len(),
            bytes = snapshot.total_bytes(),
            "state restored"
        );
        Ok(state)
    }

    /// The state around an open `db` in `db_dir` (below `work_dir`), with an empty
    /// cache of `cache_capacity` and the shared names of its lineage.
    pub(super) fn from_parts(
        db: DB,
        work_dir: PathBuf,
        db_dir: PathBuf,
        cache_capacity: CacheBounds,
        names: SharedNames,
    ) -> Result<Self, StateError> {
        let writer = StateWriter::start(db, work_dir.clone(), db_dir.clone(), names)?;
        Ok(Self {
            cache: StateCache::new(cache_capacity.entries, cache_capacity.bytes),
            in_flight: InFlight::default(),
            writer,
            started_empty: false,
            snapshot_due: None,
            max_bytes: cache_capacity.bytes,
            read_from_db: 0,
            read_options: ReadOptions::default(),
            work_dir,
            db_dir,
        })
    }

    /// The current value of `key`: from the cache, else from the write-backs in flight,
    /// else from RocksDB (then cached, clean).
    pub fn get(&mut self, key: &[u8]) -> Result<Option<&[u8]>, StateError> {
        let slot = self.cached_slot(self.key_hash(key), key)?;
        Ok(self.cache.value(slot))
    }

    /// `key`'s hash in this state (see [`KeyHash`]).
    pub fn key_hash(&self, key: &[u8]) -> KeyHash {
        KeyHash(self.cache.hash(key))
    }

    /// Like [`get`](Self::get) with `hash` = [`key_hash`](Self::key_hash)`(key)`, with
    /// the cache slot that now holds `key`: a hint for the [`put_at`](Self::put_at) of
    /// the same key that follows (the aggregate reads a group's accumulator, calls the
    /// guest, stores the new one). `hint` is where the caller last saw `key` (a slot a
    /// [`prefetch`](Self::prefetch) gave): tried first, trusted only if it holds `key`,
    /// so a key a prefetch found costs no second probe of the cache.
    pub fn get_with_slot(
        &mut self,
        hint: Option<SlotId>,
        hash: KeyHash,
        key: &[u8],
    ) -> Result<(Option<&[u8]>, SlotId), StateError> {
        let slot = match self.cache.touch_hinted(hint, key) {
            Some(slot) => slot,
            None => self.cached_slot(hash, key)?,
        };
        Ok((self.cache.value(slot), slot))
    }

    /// Reads into the CPU's caches the keys of `keys` and the cache slots their hints
    /// name (see `state::cache`), if the cache is large: before the
    /// [`get_with_slot`](Self::get_with_slot)s of many keys at once whose bytes lie
    /// scattered too (a window's keys in key order).
    pub fn warm<'k>(&self, keys: impl Iterator<Item = (Option<SlotId>, &'k [u8])> + Clone) {
        self.cache.warm_hinted(keys);
    }

    /// The cache slot of `key`, read from a write-back in flight or RocksDB into the
    /// cache (clean) if it was not cached.
    fn cached_slot(&mut self, hash: KeyHash, key: &[u8]) -> Result<SlotId, StateError> {
        // One probe on a hit; the value is read by slot, so the miss path may change the cache.
        if let Some(slot) = self.cache.find_touch_hashed(hash.0, key) {
            return Ok(slot);
        }
        let value = if self.cache_knows_every_key() {
            None
        } else {
            self.read_uncached(hash, key)?
        };
        let incoming = slot_bytes(key, value.as_deref());
        if self.cache.would_overflow(incoming) {
            self.evict(incoming, true)?;
        }
        Ok(self
            .cache
            .insert_clean_hashed(hash.0, key, value.as_deref()))
    }

    /// `key`'s value from the newest write-back in flight that writes it, else RocksDB.
    fn read_uncached(&mut self, hash: KeyHash, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.in_flight.prune(self.writer.applied());
        if let Some(value) = self.in_flight.lookup(hash.0, key) {
            return Ok(value.map(<[u8]>::to_vec));
        }
        self.read_from_db += 1;
        let value = self
            .writer
            .db()
            .get_pinned_opt(key, &self.read_options)
            .map_err(|e| StateError::db("get", &self.db_dir, e))?;
        Ok(value.map(|v| v.to_vec()))
    }

    /// Reads every key of `keys` that neither the cache nor a write-back in flight knows
    /// from RocksDB in one batched MultiGet, and caches what it holds (clean), so that
    /// the `get`s that follow hit the cache. A batch's keys new to the cache are mostly new
    /// to the state too, and RocksDB answers such misses together (memtable and bloom
    /// filter probes of the whole batch) faster than one by one. Skipped when the last
    /// batch found (almost) everything cached, so a cache-resident state pays nothing,
    /// and while the cache knows every key (a miss is absent: see `started_empty`);
    /// the keys' slots are warmed first all the same (see `state::cache`).
    /// Only a hint: an entry evicted again before its `get` is read again then.
    /// `slots` gets, per key in order, the slot now holding it (`None`: in a write-back
    /// in flight), for the [`get_with_slot`](Self::get_with_slot) that follows; left
    /// empty when skipped.
    pub fn prefetch<'k, K>(
        &mut self,
        keys: K,
        slots: &mut Vec<Option<SlotId>>,
    ) -> Result<(), StateError>
    where
        K: IntoIterator<Item = (KeyHash, &'k [u8])>,
        K::IntoIter: Clone,
    {
        slots.clear();
        let keys = keys.into_iter();
        self.cache.warm(keys.clone().map(|(hash, _)| hash.0));
        let worth_it = self.read_from_db >= PREFETCH_MIN_READS && !self.cache_knows_every_key();
        self.read_from_db = 0;
        if !worth_it {
            return Ok(());
        }
        self.in_flight.prune(self.writer.applied());
        let (cache, in_flight) = (&mut self.cache, &self.in_flight);
        let mut misses: Vec<(usize, KeyHash, &[u8])> = Vec::new();
        for (n, (hash, key)) in keys.enumerate() {
            let slot = cache.find_touch_hashed(hash.0, key);
            if slot.is_none() && in_flight.lookup(hash.0, key).is_none() {
                misses.push((n, hash, key));
            }
            slots.push(slot);
        }
        self.read_from_db = misses.len();
        let db = self.writer.db();
        let Some(default) = db.cf_handle(DEFAULT_COLUMN_FAMILY_NAME) else {
            return Ok(());
        };
        misses.sort_unstable_by(|a, b| a.2.cmp(b.2));
        let values = db
            .batched_multi_get_cf_opt(
                default,
                misses.iter().map(|m| m.2),
                true,
                &self.read_options,
            )
            .into_iter()
            .map(|value| value.map(|v| v.map(|v| v.to_vec())))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StateError::db("multi-get", &self.db_dir, e))?;
        for ((n, hash, key), value) in misses.into_iter().zip(values) {
            let incoming = slot_bytes(key, value.as_deref());
            if self.cache.would_overflow(incoming) {
                self.evict(incoming, true)?;
            }
            slots[n] = Some(
                self.cache
                    .insert_clean_hashed(hash.0, key, value.as_deref()),
            );
        }
        Ok(())
    }

    /// Whether a key the cache does not hold is absent (see `started_empty`).
    fn cache_knows_every_key(&self) -> bool {
        self.started_empty && !self.cache.evicted_stored()
    }

    /// Keys RocksDB was asked for since the last `prefetch`.
    #[cfg(test)]
    pub(crate) fn reads_from_db(&self) -> usize {
        self.read_from_db
    }

    /// Sets `key` to `value` in the cache (written back at the next barrier or eviction).
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        self.cache
            .put_hashed(None, self.key_hash(key).0, key, value);
        self.shrink()
    }

    /// [`put`](Self::put) with `hash` = [`key_hash`](Self::key_hash)`(key)`, of a key
    /// whose slot [`get_with_slot`] gave: the slot is tried first (checked: if it holds
    /// another key by now, `key` is looked up as by `put`).
    ///
    /// [`get_with_slot`]: Self::get_with_slot
    pub fn put_at(
        &mut self,
        slot: SlotId,
        hash: KeyHash,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), StateError> {
        self.cache.put_hashed(Some(slot), hash.0, key, value);
        self.shrink()
    }

    /// Deletes `key` (a tombstone in the cache until written back).
    pub fn delete(&mut self, key: &[u8]) -> Result<(), StateError> {
        self.delete_at(None, self.key_hash(key), key)
    }

    /// [`delete`](Self::delete) with `hash` = [`key_hash`](Self::key_hash)`(key)` and,
    /// if given, the slot a [`get_with_slot`](Self::get_with_slot) of `key` found (as
    /// [`put_at`](Self::put_at) takes it): the firing of a window reads and deletes each
    /// key with one probe.
    pub fn delete_at(
        &mut self,
        slot: Option<SlotId>,
        hash: KeyHash,
        key: &[u8],
    ) -> Result<(), StateError> {
        self.cache.delete_hashed(slot, hash.0, key);
        self.shrink()
    }

    /// Writes every dirty cache entry to RocksDB and waits until it is there; entries
    /// stay cached, clean.
    pub fn flush(&mut self) -> Result<(), StateError> {
        self.write_back_dirty()?;
        self.writer.sync()?;
        self.in_flight.prune(self.writer.applied());
        debug_assert!(self.in_flight.is_empty());
        Ok(())
    }

    /// Puts and deletes in RocksDB's active memtable (what write-backs wrote since the
    /// last flush of the memtable).
    #[cfg(test)]
    pub(crate) fn memtable_entries(&self) -> u64 {
        let entries = self
            .writer
            .db()
            .property_int_value("rocksdb.num-entries-active-mem-table");
        entries.ok().flatten().unwrap_or(0)
    }

    /// Every live entry, cache merged over RocksDB, in key order. Waits until RocksDB
    /// holds every write-back sent.
    pub fn scan(&self) -> Result<StateScan<'_>, StateError> {
        self.scan_prefix(&[])
    }

    /// Every live entry whose key starts with `prefix` (e.g. a key group), in key order.
    pub fn scan_prefix(&self, prefix: &[u8]) -> Result<StateScan<'_>, StateError> {
        self.writer.sync()?;
        Ok(StateScan::new(
            self.writer.db(),
            &self.db_dir,
            self.cache.sorted_with_prefix(prefix),
            prefix,
        ))
    }

    /// Every live key, in key order (e.g. to rebuild a window index after a restore).
    pub fn keys(&self) -> Result<Vec<Vec<u8>>, StateError> {
        self.scan()?
            .map(|entry| entry.map(|(key, _)| key))
            .collect()
    }

    /// Entries in the cache (values, tombstones and negative lookups).
    pub fn len_cached(&self) -> usize {
        self.cache.len()
    }

    /// Bytes the cache's entries count for (keys, values, per-entry overhead).
    pub fn bytes_cached(&self) -> usize {
        self.cache.bytes()
    }

    /// Cache entries not yet written back.
    pub fn len_dirty(&self) -> usize {
        self.cache.dirty_len()
    }

    /// The working directory (`<work_dir>/db` is the live DB).
    pub fn work_dir(&self) -> &Path {
        &self.work_dir
    }

    /// Snapshots the state for checkpoint `checkpoint_id` and uploads it to `storage`
    /// under `task`, waiting for the upload: [`begin_snapshot`](Self::begin_snapshot)
    /// then [`SnapshotInProgress::wait`].
    pub fn snapshot(
        &mut self,
        storage: &Arc<CheckpointStorage>,
        checkpoint_id: CheckpointId,
        task: &str,
    ) -> Result<DbSnapshot, StateError> {
        let progress = self.begin_snapshot(storage.clone(), checkpoint_id, task)?;
        self.finish_snapshot_copy()
            .map_err(|e| e.in_checkpoint("snapshot", task, checkpoint_id))?;
        progress.wait()
    }

    /// The synchronous part of a snapshot, done at the barrier: the dirty entries as of
    /// now are what the snapshot adds to RocksDB. At most [`SYNC_COPY_ENTRIES`] are
    /// copied into one write-back at once and the writer asked for the checkpoint; more
    /// are only marked owed (`StateCache::owe_dirty`), after an eviction that makes room
    /// if the cache is nearly full, and copied a stretch at a time as
    /// the task goes on ([`continue_snapshot_copy`](Self::continue_snapshot_copy) after
    /// each batch; each entry before it changes, copy on write), and the layer and the
    /// checkpoint go to the writer when the last is copied, before any other write-back,
    /// or when [`finish_snapshot_copy`](Self::finish_snapshot_copy) is called. Until
    /// then the checkpoint's [`SnapshotInProgress`] does not answer: the owner of the
    /// state must go on calling one of them (a task does, after each batch and when its
    /// input is quiet), never only wait. The writer writes them, takes the RocksDB
    /// checkpoint and uploads it while the task goes on; what the task writes from now
    /// on is not in this snapshot.
    pub fn begin_snapshot(
        &mut self,
        storage: Arc<CheckpointStorage>,
        checkpoint_id: CheckpointId,
        task: &str,
    ) -> Result<SnapshotInProgress, StateError> {
        let begin = |state: &mut Self| {
            state.finish_snapshot_copy()?;
            if state.cache.dirty_len() <= SYNC_COPY_ENTRIES {
                state.write_back_dirty()?;
                return state.writer.checkpoint(storage, checkpoint_id, task);
            }
            if state.cache.nearly_full() {
                // Room first (an eighth of the cache): an eviction while slots are owed
                // copies all of them at once (see `evict`), and the copy looks at
                // `COPY_SLOTS_PER_RECORD` slots a record while a record adds about one,
                // so it is done long before the room is used up.
                state.evict(0, false)?;
            }
            let (request, progress) = checkpoint_request(storage, checkpoint_id, task);
            state.cache.owe_dirty();
            state.snapshot_due = Some(request);
            Ok(progress)
        };
        begin(self).map_err(|e| e.in_checkpoint("snapshot", task, checkpoint_id))
    }

    /// Copies the next stretch of a snapshot's owed entries (if one is being copied),
    /// sized for a batch of `records` records: [`COPY_SLOTS_PER_RECORD`] cache slots
    /// each; sends the snapshot once none is left.
    pub fn continue_snapshot_copy(&mut self, records: usize) -> Result<(), StateError> {
        if self.snapshot_due.is_none() {
            return Ok(());
        }
        self.cache
            .copy_owed(records.max(1).saturating_mul(COPY_SLOTS_PER_RECORD));
        if self.cache.owed_len() == 0 {
            self.send_snapshot()?;
        }
        Ok(())
    }

    /// Copies every owed entry left and sends the snapshot being copied, if any: when
    /// no more puts are coming soon (the input is quiet, or ends).
    pub fn finish_snapshot_copy(&mut self) -> Result<(), StateError> {
        if self.snapshot_due.is_some() {
            self.cache.copy_owed(usize::MAX);
            self.send_snapshot()?;
        }
        Ok(())
    }

    /// Hands the owed entries (all copied) and then the checkpoint to the writer.
    fn send_snapshot(&mut self) -> Result<(), StateError> {
        let Some(request) = self.snapshot_due.take() else {
            return Ok(());
        };
        let layer = self.cache.take_owed_layer();
        self.writer
            .write_back(layer, &mut self.in_flight, self.max_bytes)?;
        self.writer.send_checkpoint(request)
    }

    /// Sends a copy of every dirty entry to the writer; they stay cached, clean.
    fn write_back_dirty(&mut self) -> Result<(), StateError> {
        self.finish_snapshot_copy()?;
        let layer = self.cache.copy_out_dirty();
        self.writer
            .write_back(layer, &mut self.in_flight, self.max_bytes)
    }

    /// Evicts down to the cache's bounds if an insert took it past them.
    fn shrink(&mut self) -> Result<(), StateError> {
        if self.cache.over_budget() {
            self.evict(0, false)?;
        }
        Ok(())
    }

    /// Evicts entries not used recently (CLOCK) down to 7/8 of the cache's bounds, leaving
    /// room for `incoming` bytes (and one more entry if `new_slot`): the dirty ones go
    /// to the writer as one write-back, the clean ones are dropped. A snapshot being
    /// copied is sent first, so no later value reaches RocksDB before its own.
    fn evict(&mut self, incoming: usize, new_slot: bool) -> Result<(), StateError> {
        self.finish_snapshot_copy()?;
        let dirty = self.cache.take_victims(incoming, new_slot);
        self.writer
            .write_back(dirty, &mut self.in_flight, self.max_bytes)
    }
}

/// Most dirty entries a barrier copies at once (some 5 ms); more are copied a stretch
/// at a time after it (see [`KeyedState::begin_snapshot`]).
const SYNC_COPY_ENTRIES: usize = 65_536;

/// Cache slots a snapshot's copy looks at per input record: the copy of a full cache of
/// a million entries is done some 64,000 records after its barrier.
const COPY_SLOTS_PER_RECORD: usize = 16;

/// Fewest RocksDB reads in a batch that make the next [`KeyedState::prefetch`] worth its
/// cache probes.
const PREFETCH_MIN_READS: usize = 16;

fn db_options(memtable_bytes: usize) -> Options {
    let mut options = Options::default();
    options.create_if_missing(true);
    options.set_compression_type(DBCompressionType::Lz4);
    options.set_write_buffer_size(memtable_bytes);
    options.set_max_write_buffer_number(2);
    options.set_keep_log_file_num(INFO_LOG_FILES_KEPT);
    // Most reads miss: a key new to the cache is usually new to the state too. Bloom
    // filters (whole keys, ~1% false positives) answer those without reading a data block,
    // in the SSTs and in the memtable (a tenth of the memtable's size for its filter).
    let mut table = BlockBasedOptions::default();
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, false);
    table.set_whole_key_filtering(true);
    table.set_block_cache(block_cache());
    options.set_block_based_table_factory(&table);
    options.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO);
    options.set_memtable_whole_key_filtering(true);
    options
}

pub(super) fn open_db(db_dir: &Path, memtable_bytes: usize) -> Result<DB, StateError> {
    // The default column family by descriptor, so that its handle serves batched
    // MultiGets; with its options given again (`open_cf` by name would give it RocksDB's
    // defaults: 64 MiB memtables, no bloom filters).
    let options = db_options(memtable_bytes);
    let default = ColumnFamilyDescriptor::new(DEFAULT_COLUMN_FAMILY_NAME, options.clone());
    DB::open_cf_descriptors(&options, db_dir, [default])
        .map_err(|e| StateError::db("open", db_dir, e))
}

/// Prefix of the scratch directories below a work dir where a rescale opens the old
/// snapshots it takes key groups from (`key_group_restore`).
pub(super) const RESCALE_DIR_PREFIX: &str = "rescale-";

/// Creates `work_dir`, removes the previous DB, snapshot temp dirs and rescale scratch
/// dirs, creates an empty DB directory and returns it.
pub(super) fn prepare_work_dir(work_dir: &Path) -> Result<PathBuf, StateError> {
    fs::create_dir_all(work_dir).map_err(|e| StateError::io("create directory", work_dir, e))?;
    let entries = fs::read_dir(work_dir).map_err(|e| StateError::io("list", work_dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StateError::io("list", work_dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(SNAPSHOT_DIR_PREFIX) || name.starts_with(RESCALE_DIR_PREFIX) {
            remove_dir_if_exists(&entry.path())?;
        }
    }
    let db_dir = work_dir.join(DB_DIR);
    remove_dir_if_exists(&db_dir)?;
    fs::create_dir(&db_dir).map_err(|e| StateError::io("create directory", &db_dir, e))?;
    Ok(db_dir)
}

/// Fetches every file of `snapshot` from `storage` into the empty `db_dir` (SSTs
/// hard-linked where the storage is local, other files copied).
pub(super) fn fetch_snapshot(
    storage: &CheckpointStorage,
    snapshot: &DbSnapshot,
    db_dir: &Path,
) -> Result<(), StateError> {
    for file in &snapshot.shared {
        let dest = db_dir.join(checked_file_name(db_dir, &file.local_name)?);
        storage.restore_shared(&snapshot.task, &file.shared_name, &dest, file.size)?;
    }
    for file in &snapshot.private {
        let dest = db_dir.join(checked_file_name(db_dir, &file.name)?);
        let id = snapshot.checkpoint_id;
        storage.restore_private(id, (&snapshot.task, &file.name), &dest, file.size)?;
    }
    Ok(())
}

/// A file name from a snapshot, refused if it could escape the DB directory.
fn checked_file_name<'a>(db_dir: &Path, name: &'a str) -> Result<&'a str, StateError> {
    let plain =
        !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0']);
    if plain {
        Ok(name)
    } else {
        Err(StateError::UnexpectedFile {
            path: db_dir.join(name),
        })
    }
}
