//! `AggregateOperator`: a keyed, optionally windowed aggregate whose fold and emit
//! functions run in an `aggregator` guest and whose accumulators live in RocksDB.
//!
//! Invariants:
//! - Every record of a batch reaching this subtask belongs to one of its key groups
//!   (the shuffle guarantees it). The batch is grouped by (key, window) and the guest is
//!   called ONCE with every group's accumulator and records, never per key.
//! - Accumulators are opaque bytes, stored under `key group | key | window end` (see
//!   `state::key`); an empty accumulator means "none yet".
//! - Windows fire when the watermark reaches their last timestamp (see `window`), in
//!   one emit call per `batch_size` keys, in key order; their records get timestamp
//!   `end - 1`. Every state key of a window is in the window index (`window_index`),
//!   `pending` until the window fires, then `fired` while its lateness lasts; a key is
//!   filed when its first accumulator is stored (a group whose accumulator the state
//!   held is filed already), so keys that come back cost the index nothing.
//!   Unwindowed aggregates emit the updated keys after each update call, in the same
//!   call when the guest exports the fused `update-and-emit` (one guest call per
//!   `batch_size` groups instead of two; the output is the same).
//! - The operator's watermark is part of its snapshot and never goes back after a
//!   restore: a window fired before checkpoint n is not fired again after restoring n.
//! - Records for a window past its allowed lateness go to the dead-letter output and
//!   are counted as late.
//! - A failed update call (a trap, a panic, the memory limit, bad output; the call
//!   deadline too under `on_error = "dead-letter"`) stores nothing; its (record,
//!   window) pairs are then folded one at a time, each alone with its accumulator, a
//!   fresh instance after each failure (`retry_alone`): under `"fail"` the operator
//!   fails naming the first record that fails alone (its index in this subtask's input
//!   and its key), under `"dead-letter"` each such record goes to the dead-letter
//!   output once, with the error as its reason, and counts in none of the windows it
//!   failed in (a hopping window's record may still count in the others). The groups
//!   of earlier calls of the batch stay folded: a record is never folded twice. Under
//!   `"dead-letter"` a (record, window) whose call alone ran out of its deadline is
//!   folded once more, in a fresh instance, before it is refused (`second_try`): the
//!   deadline is wall-clock, and a starved or paused host can spend it.
//! - No accumulator longer than `max_accumulator_bytes` is stored: the guest call that
//!   returns one fails the operator with [`AccumulatorTooLarge`], naming the module and
//!   the key. The accumulator cache holds at most `cache.entries` entries and
//!   `cache.bytes` bytes (see `state::cache`).
//! - Per record, the host does no heap allocation of its own on the unwindowed path:
//!   grouping reuses the operator's `Groups` buffers (state keys end to end, a hash
//!   table of group indices); per group, one state `get` and one `put` (the put's
//!   accumulator copy is the one allocation), and the emit input is built straight from
//!   the guest's output. A state key is hashed once (the state's hash files the group
//!   and serves its get and put; the put first tries the cache slot its get found), and
//!   the groups a call needs are first prefetched from RocksDB in one batched read
//!   (`KeyedState::prefetch`, a no-op while they are cached). The call's input records
//!   are copied in runs of consecutive input records, column by column.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use hashbrown::HashTable;
use serde::{Deserialize, Serialize};

use crate::dataflow::operator::{DeferredSnapshot, Operator, OperatorError, Output, Snapshot};
use crate::dataflow::operators::OnError;
use crate::dataflow::operators::guest_call::{
    GuestCallError, MAX_FAILED_ALONE, SECOND_CALL_NOTE, calls_again, display_key, fail_alone,
    memory_note, sample_and_recycle,
};
use crate::dataflow::operators::window_index::WindowIndex;
use crate::dataflow::partition::key_group;
use crate::dataflow::window::{self, WindowAssigner};
use crate::engine::{
    self, AggregatorInstance, EmitBatch, GroupBatch, GuestLimits, GuestModule, Rejection,
    UpdateOutput,
};
use crate::metrics::guest_memory::GuestMemoryGauge;
use crate::record::OperatorSnapshot;
use crate::record::Window;
use crate::record::batch::RecordBatch;
use crate::record::message::{Barrier, Watermark};
use crate::record::snapshot::{self, SnapshotState};
use crate::state::{
    CacheBounds, DbSnapshot, KeyGroupSource, KeyHash, KeyedState, SlotId, StateKey,
};
use crate::storage::CheckpointStorage;

/// A guest returned an accumulator longer than the step's `max_accumulator_bytes`.
#[derive(Debug, thiserror::Error)]
#[error(
    "module {module}: the accumulator of key {key}{window} is {bytes} bytes, more than \
     max_accumulator_bytes ({max} bytes): raise max_accumulator_bytes or keep less per key"
)]
pub struct AccumulatorTooLarge {
    pub module: String,
    /// The key, escaped onto one line and cut (see [`display_key`]).
    pub key: String,
    /// `" (window ending at <ms>)"` or empty.
    pub window: String,
    pub bytes: usize,
    pub max: usize,
}

/// How an aggregate step is configured.
#[derive(Debug, Clone)]
pub struct AggregateConfig {
    pub id: String,
    pub module: Arc<GuestModule>,
    pub limits: GuestLimits,
    pub guest_config: BTreeMap<String, String>,
    pub windows: WindowAssigner,
    pub allowed_lateness_ms: i64,
    pub max_parallelism: u16,
    /// Most groups or windows handed to the guest in one call.
    pub batch_size: usize,
    /// Bounds of the accumulator cache of each subtask.
    pub cache: CacheBounds,
    /// Largest accumulator the guest may return.
    pub max_accumulator_bytes: usize,
    /// Use the guest's fused `update-and-emit` for unwindowed batches when it exports
    /// one (always, except where a test or benchmark compares it with the two calls).
    pub update_and_emit: bool,
    /// Appended to a guest failure's message: which module wrote the state restored
    /// into this step, when another one runs it now (`ModuleChange::state_note`); empty
    /// otherwise.
    pub state_note: String,
    /// What a (record, window) whose update call fails on its own does.
    pub on_error: OnError,
}

/// Where this subtask keeps and checkpoints its state.
#[derive(Debug, Clone)]
pub struct StateLocation {
    /// The working RocksDB directory of this operator subtask (wiped on start).
    pub work_dir: PathBuf,
    pub storage: Arc<CheckpointStorage>,
    /// Name of this operator subtask in checkpoint storage, e.g. `stage1-0.step-2`.
    pub storage_task: String,
}

/// Key groups of an old subtask's snapshot that a rescale gives this subtask.
#[derive(Debug, Clone)]
pub struct RescaledState<'a> {
    /// The checkpoint storage holding the snapshot's files (the old worker's).
    pub storage: &'a CheckpointStorage,
    /// The old subtask's snapshot of this operator.
    pub snapshot: &'a OperatorSnapshot,
    /// The key groups to take from it: ascending, non-adjacent ranges.
    pub key_groups: Vec<Range<u16>>,
}

/// What the operator stores in a checkpoint: `{"v": 1, "watermark": w, "db": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AggregateSnapshot {
    pub watermark: i64,
    pub db: DbSnapshot,
}

impl SnapshotState for AggregateSnapshot {
    const VERSION: u32 = 1;
}

/// How errors name the aggregate operator `id`'s snapshot.
fn snapshot_name(id: &str) -> String {
    format!("aggregate operator {id} state")
}

pub struct AggregateOperator {
    config: AggregateConfig,
    location: StateLocation,
    state: KeyedState,
    instance: Option<AggregatorInstance>,
    /// The instance's linear memory, sampled after each call.
    memory: GuestMemoryGauge,
    watermark: Watermark,
    /// Windows not fired yet: window end -> state keys.
    pending: WindowIndex,
    /// Fired windows kept for late records: window end -> state keys (only with
    /// allowed lateness > 0).
    fired: WindowIndex,
    records_seen: u64,
    /// Records of the current input batch that failed alone (see `retry_alone`).
    failed_alone: usize,
    /// The current batch's groups; kept between batches for its buffers.
    groups: Groups,
    /// How each group of the current guest call was read from the state (its `get`).
    reads: Vec<GroupRead>,
    /// Where the state's prefetch found each group of the current guest call.
    slot_hints: Vec<Option<SlotId>>,
}

/// A group's accumulator as the state gave it before a guest call.
#[derive(Debug, Clone, Copy)]
struct GroupRead {
    /// The cache slot it was read from: the hint of the group's `put` (see
    /// `KeyedState::put_at`).
    slot: SlotId,
    /// Whether the state held one. Then the window index has the group's key already
    /// (every state key of a window is in `pending` or `fired`), so storing the new one
    /// leaves the index alone.
    existed: bool,
}

/// Whether the updated unwindowed groups still need an emit call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Emit {
    Now,
    /// The guest's fused `update-and-emit` returned their records already.
    Done,
}

/// Appends one entry to an emit call's input.
fn push_emit_entry(input: &mut EmitBatch, user_key: &[u8], window: Option<Window>, acc: &[u8]) {
    input.keys.extend_from_slice(user_key);
    input.key_ends.push(input.keys.len() as u32);
    input.windows.push(window);
    input.accumulators.extend_from_slice(acc);
    input.accumulator_ends.push(input.accumulators.len() as u32);
}

/// The (key, window) groups of one input batch, built without an allocation per record:
/// their state keys end to end, found again by a hash table of group indices, and each
/// group's records (indices into the batch, in batch order), group after group. Groups
/// are numbered in order of first appearance. A state key is hashed once per record, by
/// the state's own hasher, and that hash serves the group's state get and put too.
#[derive(Default)]
struct Groups {
    /// Group `g`'s state key is `keys[key_ends[g-1]..key_ends[g]]`.
    keys: Vec<u8>,
    key_ends: Vec<u32>,
    /// Window end of each group; `None`: the global window.
    window_ends: Vec<Option<i64>>,
    /// Each group's state key hashed by the state (the index below files groups by it).
    hashes: Vec<KeyHash>,
    /// (group, record) in the order `add` saw them.
    assigned: Vec<(u32, u32)>,
    /// After `finish`: group `g`'s records are `members[member_ends[g-1]..member_ends[g]]`.
    members: Vec<u32>,
    member_ends: Vec<u32>,
    /// Group indices, filed under `hashes`.
    index: HashTable<u32>,
    /// The state key being added.
    scratch: Vec<u8>,
}

impl Groups {
    fn clear(&mut self) {
        self.keys.clear();
        self.key_ends.clear();
        self.window_ends.clear();
        self.hashes.clear();
        self.assigned.clear();
        self.members.clear();
        self.member_ends.clear();
        self.index.clear();
    }

    fn len(&self) -> usize {
        self.key_ends.len()
    }

    fn key(&self, g: usize) -> &[u8] {
        group_key(&self.keys, &self.key_ends, g)
    }

    fn hash(&self, g: usize) -> KeyHash {
        self.hashes[g]
    }

    /// Adds record `record` to the group of (`key_group`, `user_key`, `window_end`) in
    /// `state`.
    fn add(
        &mut self,
        state: &KeyedState,
        key_group: u16,
        user_key: &[u8],
        window_end: Option<i64>,
        record: u32,
    ) {
        StateKey::encode_into(&mut self.scratch, key_group, user_key, window_end);
        let key_hash = state.key_hash(&self.scratch);
        let hash = key_hash.value();
        let (keys, key_ends, scratch) = (&self.keys, &self.key_ends, &self.scratch);
        let found = self
            .index
            .find(hash, |&g| {
                group_key(keys, key_ends, g as usize) == scratch.as_slice()
            })
            .copied();
        let g = match found {
            Some(g) => g,
            None => {
                let g = self.key_ends.len() as u32;
                self.keys.extend_from_slice(&self.scratch);
                self.key_ends.push(self.keys.len() as u32);
                self.window_ends.push(window_end);
                self.hashes.push(key_hash);
                let hashes = &self.hashes;
                self.index
                    .insert_unique(hash, g, |&g| hashes[g as usize].value());
                g
            }
        };
        self.assigned.push((g, record));
    }

    /// Lays out each group's records (a counting sort of `assigned` by group).
    fn finish(&mut self) {
        self.member_ends.clear();
        self.member_ends.resize(self.len(), 0);
        for &(g, _) in &self.assigned {
            self.member_ends[g as usize] += 1;
        }
        // Counts -> exclusive ends; a cursor per group from its start fills `members`.
        let mut end = 0u32;
        for e in &mut self.member_ends {
            end += *e;
            *e = end;
        }
        let mut cursor: Vec<u32> = std::iter::once(0)
            .chain(self.member_ends.iter().copied())
            .take(self.len())
            .collect();
        self.members.clear();
        self.members.resize(self.assigned.len(), 0);
        for &(g, record) in &self.assigned {
            let c = &mut cursor[g as usize];
            self.members[*c as usize] = record;
            *c += 1;
        }
    }

    /// The records of the groups `range`, group after group.
    fn members_of(&self, range: Range<usize>) -> &[u32] {
        &self.members
            [self.members_start(range.start) as usize..self.members_start(range.end) as usize]
    }

    /// Group `g` with its record `record` only: a call's (record, window) retried alone.
    fn one_member(&self, g: usize, record: u32) -> Groups {
        let mut one = Groups::default();
        one.keys.extend_from_slice(self.key(g));
        one.key_ends.push(one.keys.len() as u32);
        one.window_ends.push(self.window_ends[g]);
        one.hashes.push(self.hashes[g]);
        one.members.push(record);
        one.member_ends.push(1);
        one
    }

    /// Where group `g`'s records start in `members` (`members.len()` for `g == len()`).
    fn members_start(&self, g: usize) -> u32 {
        match g {
            0 => 0,
            g => self.member_ends[g - 1],
        }
    }
}

/// A guest update call that failed: the engine's error and the bytes of the call's
/// input (for the memory note), and whether it was a second try.
struct FailedCall {
    source: engine::EngineError,
    input_bytes: usize,
    /// The second call over its record (`second_try`).
    second: bool,
}

/// `indices` as ranges of consecutive values, in order: `[3, 4, 5, 9, 2]` is `3..6`,
/// `9..10`, `2..3`.
fn consecutive_runs(indices: &[u32]) -> impl Iterator<Item = Range<usize>> + '_ {
    let mut rest = indices;
    std::iter::from_fn(move || {
        let (&first, _) = rest.split_first()?;
        let len = rest
            .iter()
            .zip(first..)
            .take_while(|&(&i, expected)| i == expected)
            .count();
        rest = &rest[len..];
        Some(first as usize..first as usize + len)
    })
}

fn group_key<'a>(keys: &'a [u8], key_ends: &[u32], g: usize) -> &'a [u8] {
    let start = match g {
        0 => 0,
        g => key_ends[g - 1] as usize,
    };
    &keys[start..key_ends[g] as usize]
}

impl AggregateOperator {
    /// Opens the operator with empty state, or restored from `restored`.
    pub fn open(
        config: AggregateConfig,
        location: StateLocation,
        restored: Option<&OperatorSnapshot>,
    ) -> Result<Self, OperatorError> {
        let (state, watermark) = match restored {
            None => (
                KeyedState::open_fresh(&location.work_dir, config.cache)?,
                Watermark::START,
            ),
            Some(snapshot) => {
                let s: AggregateSnapshot =
                    snapshot::decode(&snapshot_name(&config.id), &snapshot.state)?;
                let state = KeyedState::restore(
                    &location.work_dir,
                    &location.storage,
                    &s.db,
                    config.cache,
                )?;
                (state, Watermark(s.watermark))
            }
        };
        Self::with_state(config, location, state, watermark)
    }

    /// Opens the operator with the key groups a rescale gives this subtask, each from
    /// the snapshot of the old subtask that held it (`sources`, see
    /// `state::KeyedState::restore_key_groups`). Its watermark is the lowest of theirs,
    /// so that no window any of them had not fired yet is skipped; none: the start.
    pub fn open_rescaled(
        config: AggregateConfig,
        location: StateLocation,
        sources: &[RescaledState<'_>],
    ) -> Result<Self, OperatorError> {
        let decoded = sources
            .iter()
            .map(|s| {
                snapshot::decode::<AggregateSnapshot>(&snapshot_name(&config.id), &s.snapshot.state)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let key_group_sources: Vec<KeyGroupSource<'_>> = sources
            .iter()
            .zip(&decoded)
            .map(|(s, d)| KeyGroupSource {
                storage: s.storage,
                snapshot: &d.db,
                key_groups: &s.key_groups,
            })
            .collect();
        let (state, stats) =
            KeyedState::restore_key_groups(&location.work_dir, &key_group_sources, config.cache)?;
        tracing::debug!(operator = %config.id, task = %location.storage_task, sources = stats.sources, entries = stats.entries, bytes = stats.bytes, "state restored by key groups");
        let watermark = decoded
            .iter()
            .map(|d| d.watermark)
            .min()
            .map_or(Watermark::START, Watermark);
        Self::with_state(config, location, state, watermark)
    }

    /// The operator around its opened `state`, at `watermark`, with the index of the
    /// windows the state holds rebuilt.
    fn with_state(
        config: AggregateConfig,
        location: StateLocation,
        state: KeyedState,
        watermark: Watermark,
    ) -> Result<Self, OperatorError> {
        let mut op = Self {
            config,
            location,
            state,
            instance: None,
            memory: GuestMemoryGauge::detached(),
            watermark,
            pending: WindowIndex::default(),
            fired: WindowIndex::default(),
            records_seen: 0,
            failed_alone: 0,
            groups: Groups::default(),
            reads: Vec::new(),
            slot_hints: Vec::new(),
        };
        op.rebuild_window_index()?;
        Ok(op)
    }

    /// After a restore, finds every window still held in state.
    fn rebuild_window_index(&mut self) -> Result<(), OperatorError> {
        if self.config.windows.is_global() {
            return Ok(());
        }
        let mut expired = Vec::new();
        for key in self.state.keys()? {
            let Some(end) = StateKey::decode(&key)?.window_end else {
                continue;
            };
            let w = self.window_ending_at(end);
            let hash = self.state.key_hash(&key);
            if !window::has_fired(w, self.watermark.0) {
                self.pending.insert(end, hash, &key, None);
            } else if !window::is_late(w, self.config.allowed_lateness_ms, self.watermark.0) {
                self.fired.insert(end, hash, &key, None);
            } else {
                expired.push(key);
            }
        }
        for key in expired {
            self.state.delete(&key)?;
        }
        Ok(())
    }

    /// The error of a failed update call: over the whole `batch`, or over its record
    /// `alone` (the call's only record), naming its index in this subtask's input and
    /// its key.
    fn guest_error(
        &self,
        batch: &RecordBatch,
        alone: Option<u32>,
        failed: FailedCall,
    ) -> GuestCallError {
        let (first, end, key) = match alone {
            Some(i) => {
                let first = self.records_seen + u64::from(i);
                (first, first + 1, Some(batch.get(i as usize).key.to_vec()))
            }
            None => (
                self.records_seen,
                self.records_seen + batch.len() as u64,
                None,
            ),
        };
        self.call_error(first..end, key, failed)
    }

    /// A failed call's error over the input records `records` (`key`: of its one record).
    fn call_error(
        &self,
        records: Range<u64>,
        key: Option<Vec<u8>>,
        failed: FailedCall,
    ) -> GuestCallError {
        let Range { start: first, end } = records;
        GuestCallError {
            module: self.config.module.name().to_owned(),
            first,
            end,
            key,
            note: memory_note(&failed.source, failed.input_bytes)
                + &self.config.state_note
                + if failed.second { SECOND_CALL_NOTE } else { "" },
            source: failed.source,
        }
    }

    /// Reports the instance's linear memory to `gauge` (a pipeline's per-step figure).
    pub fn with_memory_gauge(mut self, gauge: GuestMemoryGauge) -> Self {
        self.memory = gauge;
        self
    }

    /// After a guest call, or after dropping the instance: see `sample_and_recycle`.
    fn after_call(&mut self) {
        sample_and_recycle(&self.config.id, &mut self.instance, &self.memory);
    }

    fn instance(&mut self) -> Result<&mut AggregatorInstance, engine::EngineError> {
        if self.instance.is_none() {
            let instance = self
                .config
                .module
                .instantiate_aggregator(&self.config.limits, self.config.guest_config.clone())?;
            self.instance = Some(if self.config.update_and_emit {
                instance
            } else {
                instance.without_update_and_emit()
            });
        }
        Ok(self.instance.as_mut().expect("just instantiated"))
    }

    /// Folds every group of `groups` into its accumulator, `batch_size` groups per guest
    /// call.
    fn update_all(
        &mut self,
        batch: &RecordBatch,
        groups: &Groups,
        out: &mut Output,
    ) -> Result<(), OperatorError> {
        let chunk = self.config.batch_size.max(1);
        let mut lo = 0;
        while lo < groups.len() {
            let hi = groups.len().min(lo + chunk);
            self.update_groups(batch, groups, lo..hi, out)?;
            lo = hi;
        }
        Ok(())
    }

    /// Folds the groups `range` of `groups` into their accumulators in state with one
    /// guest call; when it fails, retries each (record, window) of it alone (see
    /// `retry_alone`), or fails at once on a call deadline under `on_error = "fail"`.
    fn update_groups(
        &mut self,
        batch: &RecordBatch,
        groups: &Groups,
        range: Range<usize>,
        out: &mut Output,
    ) -> Result<(), OperatorError> {
        let Err(failed) = self.try_update(batch, groups, range.clone(), out)? else {
            return Ok(());
        };
        if let &[record] = groups.members_of(range.clone()) {
            return match self.second_try(batch, groups, range, failed, out)? {
                Ok(()) => Ok(()),
                Err(failed) => self.failed_alone(batch, record, failed, out),
            };
        }
        let deadline = matches!(failed.source, engine::EngineError::CpuDeadline { .. });
        let batch_error = self.guest_error(batch, None, failed);
        if deadline && self.config.on_error == OnError::Fail {
            return Err(batch_error.into());
        }
        self.retry_alone(batch, groups, range, batch_error, out)
    }

    /// The call over the groups `range` failed with `batch_error`: each of their
    /// (record, window) pairs is folded alone, in a fresh instance after each failure,
    /// in input order within each group. Under `"fail"` the step fails naming the first
    /// record that fails alone, or with `batch_error` when none does; under
    /// `"dead-letter"` each such record is refused once, with that error as its reason
    /// (at most [`MAX_FAILED_ALONE`] per input batch, else the step fails).
    fn retry_alone(
        &mut self,
        batch: &RecordBatch,
        groups: &Groups,
        range: Range<usize>,
        batch_error: GuestCallError,
        out: &mut Output,
    ) -> Result<(), OperatorError> {
        let mut failures = 0;
        let mut refused = BTreeSet::new();
        for g in range {
            for &record in groups.members_of(g..g + 1) {
                let one = groups.one_member(g, record);
                let tried = match self.try_update(batch, &one, 0..1, out)? {
                    Err(failed) => self.second_try(batch, &one, 0..1, failed, out)?,
                    folded => folded,
                };
                if let Err(failed) = tried {
                    failures += 1;
                    if refused.insert(record) || self.config.on_error == OnError::Fail {
                        self.failed_alone(batch, record, failed, out)?;
                    }
                }
            }
        }
        if failures == 0 && self.config.on_error == OnError::Fail {
            return Err(batch_error.into());
        }
        Ok(())
    }

    /// The call over one (record, window), the groups `range` of `groups`, failed:
    /// under `"dead-letter"`, if it ran out of its deadline, it is made once more in a
    /// fresh instance (see the module doc), a second failure saying so.
    fn second_try(
        &mut self,
        batch: &RecordBatch,
        groups: &Groups,
        range: Range<usize>,
        failed: FailedCall,
        out: &mut Output,
    ) -> Result<Result<(), FailedCall>, OperatorError> {
        if !calls_again(&self.config.id, &failed.source, self.config.on_error) {
            return Ok(Err(failed));
        }
        Ok(self
            .try_update(batch, groups, range, out)?
            .map_err(|again| FailedCall {
                second: true,
                ..again
            }))
    }

    /// Record `record` failed alone: refused under `"dead-letter"` (up to
    /// [`MAX_FAILED_ALONE`] per input batch), else the step fails naming it.
    fn failed_alone(
        &mut self,
        batch: &RecordBatch,
        record: u32,
        failed: FailedCall,
        out: &mut Output,
    ) -> Result<(), OperatorError> {
        self.failed_alone += 1;
        let error = self.guest_error(batch, Some(record), failed);
        if self.config.on_error == OnError::Fail || self.failed_alone > MAX_FAILED_ALONE {
            return Err(fail_alone(error, self.failed_alone).into());
        }
        let r = batch.get(record as usize);
        out.reject(
            &self.config.id,
            error.to_string(),
            r.key,
            r.value,
            r.timestamp,
        );
        Ok(())
    }

    /// One guest call over the groups `range`: records the guest refuses go to `out` as
    /// dead letters; a group whose window has fired already (a late firing, within its
    /// allowed lateness) or that has no window is emitted at once (by the same call for
    /// an unwindowed aggregate whose guest has the fused `update-and-emit`), the others
    /// wait in `pending` for the watermark. A failed call changes nothing (the instance
    /// is dropped) and is handed back.
    fn try_update(
        &mut self,
        batch: &RecordBatch,
        groups: &Groups,
        range: Range<usize>,
        out: &mut Output,
    ) -> Result<Result<(), FailedCall>, OperatorError> {
        let input = self.guest_input(batch, groups, range.clone())?;
        // group-batch record index -> input record index, for rejections
        let origin = groups.members_of(range.clone());
        let input_bytes = input
            .records
            .byte_len()
            .saturating_add(input.accumulators.len());
        let global = self.config.windows.is_global();
        let result = match self.instance() {
            Ok(instance) if global && instance.has_update_and_emit() => instance
                .update_and_emit(input)
                .map(|(output, records)| (output, Some(records))),
            Ok(instance) => instance.update(input).map(|output| (output, None)),
            Err(e) => Err(e),
        };
        let (output, emitted) = match result {
            Ok(result) => result,
            Err(source) => {
                self.instance = None;
                self.after_call();
                return Ok(Err(FailedCall {
                    source,
                    input_bytes,
                    second: false,
                }));
            }
        };
        self.after_call();
        self.reject_refused(batch, origin, &output.rejections, out);
        let emit = if emitted.is_some() {
            Emit::Done
        } else {
            Emit::Now
        };
        self.store_accumulators(groups, range, &output, emit, out)?;
        if let Some(records) = emitted {
            out.emit(records);
        }
        Ok(Ok(()))
    }

    /// The guest's input for the groups `range`: each group's accumulator from state (none
    /// yet: empty) and its records, copied from `batch`.
    fn guest_input(
        &mut self,
        batch: &RecordBatch,
        groups: &Groups,
        range: Range<usize>,
    ) -> Result<GroupBatch, OperatorError> {
        let members = groups.members_of(range.clone());
        let hashed_keys = range.clone().map(|g| (groups.hash(g), groups.key(g)));
        self.state.prefetch(hashed_keys, &mut self.slot_hints)?;
        let mut input = GroupBatch {
            accumulator_ends: Vec::with_capacity(range.len()),
            accumulators: Vec::new(),
            record_ends: Vec::with_capacity(range.len()),
            records: RecordBatch::with_capacity(members.len(), batch.byte_size()),
        };
        let first_member = groups.members_start(range.start);
        self.reads.clear();
        for (n, g) in range.enumerate() {
            let hint = self.slot_hints.get(n).copied().flatten();
            let (acc, slot) = self
                .state
                .get_with_slot(hint, groups.hash(g), groups.key(g))?;
            if let Some(acc) = acc {
                input.accumulators.extend_from_slice(acc);
            }
            let existed = acc.is_some();
            self.reads.push(GroupRead { slot, existed });
            input.accumulator_ends.push(input.accumulators.len() as u32);
            input.record_ends.push(groups.member_ends[g] - first_member);
        }
        // The groups' records, group after group, are `members`: runs of consecutive
        // input records among them (in a batch whose keys each come once, all of it) are
        // copied column by column. A record is copied once per window: the copies may
        // pass what one batch addresses even when the input batch did not.
        for run in consecutive_runs(members) {
            input
                .records
                .try_extend_from(batch, run)
                .map_err(|e| format!("the input of one guest call: {e}: lower batch_size"))?;
        }
        Ok(input)
    }

    /// Sends each input record the guest refused to the dead letters, once even when
    /// the guest refused several of its copies (one per window).
    fn reject_refused(
        &self,
        batch: &RecordBatch,
        origin: &[u32],
        rejections: &[Rejection],
        out: &mut Output,
    ) {
        if rejections.is_empty() {
            return;
        }
        let mut refused = BTreeSet::new();
        for rejection in rejections {
            let i = origin[rejection.index as usize];
            if refused.insert(i) {
                let r = batch.get(i as usize);
                out.reject(
                    &self.config.id,
                    rejection.reason.clone(),
                    r.key,
                    r.value,
                    r.timestamp,
                );
            }
        }
    }

    /// Puts the guest's new accumulators of the groups `range` in state (skipping groups
    /// whose every record was refused), refusing one past `max_accumulator_bytes`; emits
    /// the unwindowed ones (unless `emit` says the guest did already) and the late
    /// firings at once, straight from the guest's output; the rest wait in `pending`.
    fn store_accumulators(
        &mut self,
        groups: &Groups,
        range: Range<usize>,
        output: &UpdateOutput,
        emit: Emit,
        out: &mut Output,
    ) -> Result<(), OperatorError> {
        let mut start = 0usize;
        // Sized for every group only when an emit call is still to come: after the
        // fused call it stays empty and allocates nothing.
        let (entries, bytes) = match emit {
            Emit::Now => (range.len(), output.accumulators.len()),
            Emit::Done => (0, 0),
        };
        let mut unwindowed = EmitBatch {
            key_ends: Vec::with_capacity(entries),
            keys: Vec::new(),
            windows: Vec::with_capacity(entries),
            accumulator_ends: Vec::with_capacity(entries),
            accumulators: Vec::with_capacity(bytes),
        };
        let mut late = Vec::new();
        let first = range.start;
        for (g, &end) in range.zip(&output.accumulator_ends) {
            let acc = &output.accumulators[start..end as usize];
            start = end as usize;
            if acc.is_empty() {
                // Still "none yet": every record of the group was refused.
                continue;
            }
            let state_key = groups.key(g);
            if acc.len() > self.config.max_accumulator_bytes {
                self.instance = None;
                self.after_call();
                let decoded = StateKey::decode(state_key)?;
                return Err(Box::new(AccumulatorTooLarge {
                    module: self.config.module.name().to_owned(),
                    key: display_key(decoded.user_key),
                    window: decoded
                        .window_end
                        .map(|end| format!(" (window ending at {end})"))
                        .unwrap_or_default(),
                    bytes: acc.len(),
                    max: self.config.max_accumulator_bytes,
                }));
            }
            let read = self.reads[g - first];
            match groups.window_ends[g] {
                None if emit == Emit::Done => {}
                None => push_emit_entry(&mut unwindowed, StateKey::user_key(state_key)?, None, acc),
                Some(end) => {
                    let fired = window::has_fired(self.window_ending_at(end), self.watermark.0);
                    if fired {
                        // A late firing: the window fired already, its lateness is not
                        // over; its state goes when the lateness is.
                        late.push((state_key.to_vec(), acc.to_vec()));
                    }
                    if !read.existed {
                        let index = if fired {
                            &mut self.fired
                        } else {
                            &mut self.pending
                        };
                        index.insert(end, groups.hash(g), state_key, Some(read.slot));
                    }
                }
            }
            self.state
                .put_at(read.slot, groups.hash(g), state_key, acc)?;
        }
        if !unwindowed.key_ends.is_empty() {
            self.emit_unwindowed(unwindowed, out)?;
        }
        self.emit(late, out)
    }

    /// Emits unwindowed entries, `batch_size` per guest call.
    fn emit_unwindowed(&mut self, input: EmitBatch, out: &mut Output) -> Result<(), OperatorError> {
        let chunk_size = self.config.batch_size.max(1);
        if input.key_ends.len() <= chunk_size {
            return self.emit_call(input, None, out);
        }
        let (mut key_start, mut acc_start) = (0usize, 0usize);
        for lo in (0..input.key_ends.len()).step_by(chunk_size) {
            let hi = input.key_ends.len().min(lo + chunk_size);
            let mut chunk = EmitBatch::default();
            for i in lo..hi {
                let (key_end, acc_end) = (
                    input.key_ends[i] as usize,
                    input.accumulator_ends[i] as usize,
                );
                push_emit_entry(
                    &mut chunk,
                    &input.keys[key_start..key_end],
                    None,
                    &input.accumulators[acc_start..acc_end],
                );
                (key_start, acc_start) = (key_end, acc_end);
            }
            self.emit_call(chunk, None, out)?;
        }
        Ok(())
    }

    /// Turns (state key, accumulator) pairs into output records: one guest call per
    /// window end and `batch_size` entries, so every record of a call can carry its
    /// window's last timestamp (Flink's convention: a downstream window of the same size
    /// sees a window's result in the same window).
    fn emit(
        &mut self,
        entries: Vec<(Vec<u8>, Vec<u8>)>,
        out: &mut Output,
    ) -> Result<(), OperatorError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut order = Vec::with_capacity(entries.len());
        for (i, (state_key, _)) in entries.iter().enumerate() {
            order.push((StateKey::decode(state_key)?.window_end, i));
        }
        // Stable: entries of one window keep their order.
        order.sort_by_key(|&(end, _)| end);
        let chunk_size = self.config.batch_size.max(1);
        let mut input = EmitBatch::default();
        let mut input_end = None;
        for (end, i) in order {
            if !input.key_ends.is_empty()
                && (end != input_end || input.key_ends.len() == chunk_size)
            {
                self.emit_call(std::mem::take(&mut input), input_end, out)?;
            }
            input_end = end;
            let (state_key, acc) = &entries[i];
            let window = end.map(|end| self.window_ending_at(end));
            push_emit_entry(&mut input, StateKey::user_key(state_key)?, window, acc);
        }
        if !input.key_ends.is_empty() {
            self.emit_call(input, input_end, out)?;
        }
        Ok(())
    }

    /// One guest emit call; the records get timestamp `end - 1` for a window ending at
    /// `end`.
    fn emit_call(
        &mut self,
        input: EmitBatch,
        end: Option<i64>,
        out: &mut Output,
    ) -> Result<(), OperatorError> {
        let first = self.records_seen;
        let input_bytes = input.keys.len().saturating_add(input.accumulators.len());
        let result = match self.instance() {
            Ok(instance) => instance.emit(input),
            Err(e) => Err(e),
        };
        let mut records = result.map_err(|source| {
            self.instance = None;
            self.after_call();
            let failed = FailedCall {
                source,
                input_bytes,
                second: false,
            };
            Box::new(self.call_error(first..first, None, failed))
        })?;
        self.after_call();
        if let Some(end) = end {
            records
                .timestamps
                .iter_mut()
                .for_each(|ts| *ts = end.saturating_sub(1));
        }
        out.emit(records);
        Ok(())
    }

    fn window_ending_at(&self, end: i64) -> Window {
        self.config.windows.window_ending_at(end)
    }

    /// Fires every pending window the watermark has reached and drops late state.
    fn fire(&mut self, out: &mut Output) -> Result<(), OperatorError> {
        let wm = self.watermark.0;
        let due: Vec<i64> = self
            .pending
            .ends()
            .take_while(|&end| window::has_fired(self.window_ending_at(end), wm))
            .collect();
        for end in due {
            let keys = self.pending.remove(end).unwrap_or_default();
            let keep = self.config.allowed_lateness_ms > 0;
            self.fire_window(end, &keys.sorted(), !keep, out)?;
            if keep {
                self.fired.extend(end, keys);
            }
        }
        let lateness = self.config.allowed_lateness_ms;
        let expired: Vec<i64> = self
            .fired
            .ends()
            .take_while(|&end| window::is_late(self.window_ending_at(end), lateness, wm))
            .collect();
        for end in expired {
            for (hash, slot, key) in self.fired.remove(end).unwrap_or_default().iter() {
                self.state.delete_at(slot, hash, key)?;
            }
        }
        Ok(())
    }

    /// Emits the accumulators of the window ending at `end` held under `keys` (in key
    /// order, see `WindowKeys::sorted`), `batch_size` per guest call, each read from
    /// the state straight into the call's input (at the slot the index kept, if the key
    /// is still there: no probe), and deleted at once if `delete` (at the slot the read
    /// found).
    fn fire_window(
        &mut self,
        end: i64,
        keys: &[(KeyHash, Option<SlotId>, &[u8])],
        delete: bool,
        out: &mut Output,
    ) -> Result<(), OperatorError> {
        let window = self.window_ending_at(end);
        let chunk_size = self.config.batch_size.max(1);
        for chunk in keys.chunks(chunk_size) {
            self.state
                .warm(chunk.iter().map(|&(_, hint, key)| (hint, key)));
            let mut input = EmitBatch::default();
            for &(hash, hint, key) in chunk {
                let (acc, slot) = self.state.get_with_slot(hint, hash, key)?;
                if let Some(acc) = acc {
                    push_emit_entry(&mut input, StateKey::user_key(key)?, Some(window), acc);
                }
                if delete {
                    self.state.delete_at(Some(slot), hash, key)?;
                }
            }
            if !input.key_ends.is_empty() {
                self.emit_call(input, Some(end), out)?;
            }
        }
        Ok(())
    }
}

impl Operator for AggregateOperator {
    fn id(&self) -> &str {
        &self.config.id
    }

    fn handle_batch(&mut self, batch: RecordBatch, out: &mut Output) -> Result<(), OperatorError> {
        let max_parallelism = self.config.max_parallelism;
        let mut groups = std::mem::take(&mut self.groups);
        groups.clear();
        self.failed_alone = 0;
        let mut windows = Vec::new();
        for (i, r) in batch.iter().enumerate() {
            let group = key_group(r.key, max_parallelism);
            if self.config.windows.is_global() {
                groups.add(&self.state, group, r.key, None, i as u32);
                continue;
            }
            windows.clear();
            self.config.windows.assign(r.timestamp, &mut windows);
            let (lateness, wm) = (self.config.allowed_lateness_ms, self.watermark.0);
            windows.retain(|w| !window::is_late(*w, lateness, wm));
            if windows.is_empty() {
                out.late_records += 1;
                out.reject(
                    &self.config.id,
                    format!("late record: event time {} is past its window's allowed lateness (watermark {})", r.timestamp, self.watermark.0),
                    r.key,
                    r.value,
                    r.timestamp,
                );
                continue;
            }
            for w in &windows {
                groups.add(&self.state, group, r.key, Some(w.end), i as u32);
            }
        }
        groups.finish();
        let result = self.update_all(&batch, &groups, out);
        // Keep the buffers for the next batch.
        self.groups = groups;
        result?;
        self.records_seen += batch.len() as u64;
        Ok(self.state.continue_snapshot_copy(batch.len())?)
    }

    fn handle_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut Output,
    ) -> Result<(), OperatorError> {
        if watermark <= self.watermark {
            return Ok(());
        }
        self.watermark = watermark;
        if self.config.windows.is_global() {
            return Ok(());
        }
        self.fire(out)
    }

    /// A snapshot's copy put off at the barrier (see `KeyedState::begin_snapshot`) is
    /// finished once the input is quiet, so its checkpoint does not wait for input.
    fn on_idle(&mut self) -> Result<(), OperatorError> {
        Ok(self.state.finish_snapshot_copy()?)
    }

    fn on_close(&mut self) -> Result<(), OperatorError> {
        Ok(self.state.finish_snapshot_copy()?)
    }

    /// The synchronous part (the dirty accumulators handed to the state writer) runs
    /// here; the RocksDB checkpoint and its upload finish off the task thread, and the
    /// snapshot is deferred until they are durable.
    fn handle_barrier(
        &mut self,
        barrier: Barrier,
        _out: &mut Output,
    ) -> Result<Option<Snapshot>, OperatorError> {
        let upload = self.state.begin_snapshot(
            self.location.storage.clone(),
            barrier.id,
            &self.location.storage_task,
        )?;
        let (id, watermark) = (self.config.id.clone(), self.watermark.0);
        Ok(Some(Snapshot::Deferred(DeferredSnapshot::new(move || {
            let db = upload.wait()?;
            snapshot_of(&id, watermark, db)
        }))))
    }
}

/// The operator's snapshot of checkpoint state `db`, at `watermark`.
fn snapshot_of(
    id: &str,
    watermark: i64,
    db: DbSnapshot,
) -> Result<OperatorSnapshot, OperatorError> {
    let (files_added, bytes_added) = (db.stats.files_added, db.stats.bytes_added);
    let state_bytes = db.total_bytes();
    let shared_files = db.shared_refs().collect();
    let state = snapshot::encode(&snapshot_name(id), &AggregateSnapshot { watermark, db })?;
    Ok(OperatorSnapshot {
        state,
        files_added,
        bytes_added,
        state_bytes,
        shared_files,
    })
}

#[cfg(test)]
#[path = "aggregate_tests.rs"]
mod tests;
