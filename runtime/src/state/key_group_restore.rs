//! `KeyedState::restore_key_groups`: one subtask's state rebuilt from key-group ranges
//! of other subtasks' snapshots, possibly in other checkpoint storages: what a worker
//! started by a rescale restores (see `pipeline::rescale`).
//!
//! Invariants:
//! - The new DB holds exactly the entries of the given key groups in the given
//!   snapshots: each source DB is rebuilt from its storage in a scratch directory
//!   below the work dir (`rescale-<n>/`), opened read-only, and scanned once per key-
//!   group range (keys start with their key group, big-endian, see `key`, so a range
//!   of key groups is a range of keys); every key copied is decoded and checked to lie
//!   in the range.
//! - A key group comes from one source only: ranges that overlap between sources are
//!   refused before anything is copied (two owners of one key group would merge two
//!   histories of a key).
//! - A new lineage: the DB gets fresh shared names, so its first checkpoint uploads all
//!   its SSTs to this subtask's own storage; nothing of it refers to the sources'
//!   storage afterwards, and their garbage collection cannot touch it.
//! - Writes bypass the WAL like every write to the live DB: the state is durable only
//!   through its checkpoints, and the first one flushes it.
//! - Scratch directories are removed once copied, and on every open of the work dir.

use std::ops::Range;
use std::path::Path;

use rocksdb::{DB, Direction, IteratorMode, Options, ReadOptions, WriteBatch, WriteOptions};

use crate::state::backend::{
    CacheBounds, RESCALE_DIR_PREFIX, fetch_snapshot, open_db, prepare_work_dir,
};
use crate::state::shared_names::SharedNames;
use crate::state::writer::remove_dir_if_exists;
use crate::state::{DbSnapshot, KeyedState, StateError, StateKey};
use crate::storage::CheckpointStorage;

/// Bytes of keys and values copied per write batch: bounded memory whatever the
/// state's size.
const COPY_BATCH_BYTES: usize = 4 << 20; // 4 MiB

/// Key groups to take from one snapshot.
#[derive(Debug, Clone, Copy)]
pub struct KeyGroupSource<'a> {
    /// Where the snapshot's files are.
    pub storage: &'a CheckpointStorage,
    pub snapshot: &'a DbSnapshot,
    /// Ascending, non-overlapping ranges of key groups.
    pub key_groups: &'a [Range<u16>],
}

/// What a restore by key groups copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyGroupRestoreStats {
    pub sources: usize,
    pub entries: u64,
    pub bytes: u64,
}

/// Ranges of two sources overlap (see the module invariants).
#[derive(Debug, thiserror::Error)]
#[error(
    "key groups {first:?} of task {first_task} and {second:?} of task {second_task} overlap: a key group is restored from one snapshot only"
)]
pub struct OverlappingKeyGroups {
    pub first: Range<u16>,
    pub first_task: String,
    pub second: Range<u16>,
    pub second_task: String,
}

impl KeyedState {
    /// Opens the state at `work_dir` with exactly `sources`' key groups (see the module
    /// docs). The cache (of at most `cache_capacity`) starts empty.
    pub fn restore_key_groups(
        work_dir: impl AsRef<Path>,
        sources: &[KeyGroupSource<'_>],
        cache_capacity: impl Into<CacheBounds>,
    ) -> Result<(Self, KeyGroupRestoreStats), StateError> {
        refuse_overlaps(sources)?;
        let cache_capacity = cache_capacity.into();
        let work_dir = work_dir.as_ref().to_path_buf();
        let db_dir = prepare_work_dir(&work_dir)?;
        let db = open_db(&db_dir, cache_capacity.memtable_bytes)?;
        let mut stats = KeyGroupRestoreStats::default();
        for (n, source) in sources.iter().enumerate() {
            if source.key_groups.is_empty() {
                continue;
            }
            let scratch = work_dir.join(format!("{RESCALE_DIR_PREFIX}{n}"));
            let copied = copy_key_groups(&db, &scratch, source).map_err(|e| {
                e.in_checkpoint(
                    "restore by key groups",
                    &source.snapshot.task,
                    source.snapshot.checkpoint_id,
                )
            });
            remove_dir_if_exists(&scratch)?;
            let (entries, bytes) = copied?;
            stats.sources += 1;
            stats.entries += entries;
            stats.bytes += bytes;
        }
        let state = Self::from_parts(db, work_dir, db_dir, cache_capacity, SharedNames::new())?;
        Ok((state, stats))
    }
}

fn refuse_overlaps(sources: &[KeyGroupSource<'_>]) -> Result<(), StateError> {
    let mut all: Vec<(&Range<u16>, &str)> = sources
        .iter()
        .flat_map(|s| s.key_groups.iter().map(|r| (r, s.snapshot.task.as_str())))
        .filter(|(r, _)| !r.is_empty())
        .collect();
    all.sort_by_key(|(r, _)| (r.start, r.end));
    for pair in all.windows(2) {
        let ((a, a_task), (b, b_task)) = (pair[0], pair[1]);
        if b.start < a.end {
            return Err(StateError::Rescale(Box::new(OverlappingKeyGroups {
                first: a.clone(),
                first_task: a_task.to_owned(),
                second: b.clone(),
                second_task: b_task.to_owned(),
            })));
        }
    }
    Ok(())
}

/// Rebuilds `source`'s DB in `scratch` and copies its key groups into `db`: the
/// entries and bytes copied.
fn copy_key_groups(
    db: &DB,
    scratch: &Path,
    source: &KeyGroupSource<'_>,
) -> Result<(u64, u64), StateError> {
    let source_dir = prepare_work_dir(scratch)?;
    fetch_snapshot(source.storage, source.snapshot, &source_dir)?;
    let from = DB::open_for_read_only(&Options::default(), &source_dir, false)
        .map_err(|e| StateError::db("open read-only", &source_dir, e))?;
    let mut write_options = WriteOptions::default();
    write_options.disable_wal(true);
    let (mut entries, mut bytes) = (0u64, 0u64);
    let mut batch = WriteBatch::default();
    for range in source.key_groups {
        let start = StateKey::key_group_prefix(range.start);
        let mut read_options = ReadOptions::default();
        // Keys of key group `end` and above start at its prefix (u16 big-endian).
        read_options.set_iterate_upper_bound(StateKey::key_group_prefix(range.end).to_vec());
        let scan = from.iterator_opt(IteratorMode::From(&start, Direction::Forward), read_options);
        for item in scan {
            let (key, value) = item.map_err(|e| StateError::db("scan", &source_dir, e))?;
            let group = StateKey::decode(&key)?.key_group;
            if !range.contains(&group) {
                break;
            }
            entries += 1;
            bytes += (key.len() + value.len()) as u64;
            batch.put(&key, &value);
            if batch.size_in_bytes() >= COPY_BATCH_BYTES {
                let full = std::mem::take(&mut batch);
                db.write_opt(full, &write_options)
                    .map_err(|e| StateError::db("write batch", scratch, e))?;
            }
        }
    }
    if !batch.is_empty() {
        db.write_opt(batch, &write_options)
            .map_err(|e| StateError::db("write batch", scratch, e))?;
    }
    Ok((entries, bytes))
}
