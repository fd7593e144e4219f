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
//!   one emit call per `batch_size` windows; their records get timestamp `end - 1`.
//!   Unwindowed aggregates emit the updated keys after each update call.
//! - The operator's watermark is part of its snapshot and never goes back after a
//!   restore: a window fired before checkpoint n is not fired again after restoring n.
//! - Records for a window past its allowed lateness go to the dead-letter output and
//!   are counted as late.
//! - No accumulator longer than `max_accumulator_bytes` is stored: the guest call that
//!   returns one fails the operator with [`AccumulatorTooLarge`], naming the module and
//!   the key. The accumulator cache holds at most `cache.entries` entries and
//!   `cache.bytes` bytes (see `state::cache`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::dataflow::operator::{DeferredSnapshot, Operator, OperatorError, Output, Snapshot};
use crate::dataflow::operators::map::{GuestCallError, memory_note};
use crate::dataflow::partition::key_group;
use crate::dataflow::window::{self, WindowAssigner};
use crate::engine::{
    self, AggregatorInstance, EmitBatch, GroupBatch, GuestLimits, GuestModule, Rejection,
    UpdateOutput,
};
use crate::record::OperatorSnapshot;
use crate::record::Window;
use crate::record::batch::RecordBatch;
use crate::record::message::{Barrier, Watermark};
use crate::record::snapshot::{self, SnapshotState};
use crate::state::{CacheBounds, DbSnapshot, KeyedState, StateKey};
use crate::storage::CheckpointStorage;

/// Bytes of a key shown in an error before it is cut ("..." and the full length follow).
const KEY_SHOWN_BYTES: usize = 64;

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

/// A record key for an error message: quoted, every byte outside printable ASCII
/// escaped (`\n`, `\xff`), cut after [`KEY_SHOWN_BYTES`] bytes with the full length.
pub fn display_key(key: &[u8]) -> String {
    let shown = &key[..key.len().min(KEY_SHOWN_BYTES)];
    // `escape_ascii` also escapes `"` and `\\`, so the quotes below are unambiguous.
    let escaped = shown.escape_ascii().to_string();
    if key.len() > KEY_SHOWN_BYTES {
        format!("\"{escaped}\"... ({} bytes)", key.len())
    } else {
        format!("\"{escaped}\"")
    }
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
    watermark: Watermark,
    /// Windows not fired yet: window end -> state keys.
    pending: BTreeMap<i64, BTreeSet<Vec<u8>>>,
    /// Fired windows kept for late records: window end -> state keys (only with
    /// allowed lateness > 0).
    fired: BTreeMap<i64, BTreeSet<Vec<u8>>>,
    records_seen: u64,
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
        let mut op = Self {
            config,
            location,
            state,
            instance: None,
            watermark,
            pending: BTreeMap::new(),
            fired: BTreeMap::new(),
            records_seen: 0,
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
            if !window::has_fired(w, self.watermark.0) {
                self.pending.entry(end).or_default().insert(key);
            } else if !window::is_late(w, self.config.allowed_lateness_ms, self.watermark.0) {
                self.fired.entry(end).or_default().insert(key);
            } else {
                expired.push(key);
            }
        }
        for key in expired {
            self.state.delete(&key)?;
        }
        Ok(())
    }

    fn guest_error(
        &self,
        first: u64,
        end: u64,
        input_bytes: usize,
        source: engine::EngineError,
    ) -> OperatorError {
        Box::new(GuestCallError {
            module: self.config.module.name().to_owned(),
            first,
            end,
            note: memory_note(&source, input_bytes),
            source,
        })
    }

    fn instance(&mut self) -> Result<&mut AggregatorInstance, engine::EngineError> {
        if self.instance.is_none() {
            self.instance =
                Some(self.config.module.instantiate_aggregator(
                    &self.config.limits,
                    self.config.guest_config.clone(),
                )?);
        }
        Ok(self.instance.as_mut().expect("just instantiated"))
    }

    /// Folds one chunk of groups into their accumulators in state with one guest call.
    /// Records the guest refuses go to `out` as dead letters; a group whose window has
    /// fired already (a late firing, within its allowed lateness) or that has no window
    /// is emitted at once, the others wait in `pending` for the watermark.
    fn update_groups(
        &mut self,
        batch: &RecordBatch,
        groups: &[(Vec<u8>, Vec<u32>)],
        out: &mut Output,
    ) -> Result<(), OperatorError> {
        let (input, origin) = self.guest_input(batch, groups)?;
        let first = self.records_seen;
        let input_bytes = input
            .records
            .byte_len()
            .saturating_add(input.accumulators.len());
        let result = match self.instance() {
            Ok(instance) => instance.update(input),
            Err(e) => Err(e),
        };
        let output = result.map_err(|e| {
            self.instance = None;
            self.guest_error(first, first + batch.len() as u64, input_bytes, e)
        })?;
        self.reject_refused(batch, &origin, &output.rejections, out);
        let to_emit = self.store_accumulators(groups, &output)?;
        self.emit(to_emit, out)
    }

    /// The guest's input for `groups`: each group's accumulator from state (none yet:
    /// empty) and its records, copied from `batch`; with, per guest record, the index of
    /// the input record it copies (for rejections).
    fn guest_input(
        &mut self,
        batch: &RecordBatch,
        groups: &[(Vec<u8>, Vec<u32>)],
    ) -> Result<(GroupBatch, Vec<u32>), OperatorError> {
        let mut input = GroupBatch::default();
        // group-batch record index -> input record index, for rejections
        let mut origin = Vec::new();
        for (state_key, members) in groups {
            if let Some(acc) = self.state.get(state_key)? {
                input.accumulators.extend_from_slice(&acc);
            }
            input.accumulator_ends.push(input.accumulators.len() as u32);
            for &i in members {
                // A record is copied once per window: the copies may pass what one
                // batch addresses even when the input batch did not.
                input
                    .records
                    .try_push(batch.get(i as usize))
                    .map_err(|e| format!("the input of one guest call: {e}: lower batch_size"))?;
                origin.push(i);
            }
            input.record_ends.push(input.records.len() as u32);
        }
        Ok((input, origin))
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

    /// Puts the guest's new accumulators in state (skipping groups whose every record
    /// was refused), refusing one past `max_accumulator_bytes`. Returns the entries to
    /// emit at once (unwindowed, or a late firing); the rest wait in `pending`.
    fn store_accumulators(
        &mut self,
        groups: &[(Vec<u8>, Vec<u32>)],
        output: &UpdateOutput,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, OperatorError> {
        let mut start = 0usize;
        let mut to_emit = Vec::new();
        for ((state_key, _), &end) in groups.iter().zip(&output.accumulator_ends) {
            let acc = output.accumulators[start..end as usize].to_vec();
            start = end as usize;
            if acc.is_empty() {
                // Still "none yet": every record of the group was refused.
                continue;
            }
            let decoded = StateKey::decode(state_key)?;
            if acc.len() > self.config.max_accumulator_bytes {
                self.instance = None;
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
            match decoded.window_end {
                None => to_emit.push((state_key.clone(), acc.clone())),
                Some(end) => {
                    if window::has_fired(self.window_ending_at(end), self.watermark.0) {
                        // A late firing: the window fired already, its lateness is not over.
                        to_emit.push((state_key.clone(), acc.clone()));
                    } else {
                        self.pending
                            .entry(end)
                            .or_default()
                            .insert(state_key.clone());
                    }
                }
            }
            self.state.put(state_key, acc)?;
        }
        Ok(to_emit)
    }

    /// Turns (state key, accumulator) pairs into output records: one guest call per
    /// window end and `batch_size` entries, so every record of a call can carry its
    /// window's last timestamp (Flink's convention: a downstream window of the same size
    /// sees a window's result in the same window).
    fn emit(
        &mut self,
        mut entries: Vec<(Vec<u8>, Vec<u8>)>,
        out: &mut Output,
    ) -> Result<(), OperatorError> {
        let window_end = |state_key: &[u8]| StateKey::decode(state_key).map(|k| k.window_end);
        let mut ends = Vec::with_capacity(entries.len());
        for (state_key, _) in &entries {
            ends.push(window_end(state_key)?);
        }
        let mut order: Vec<usize> = (0..entries.len()).collect();
        order.sort_by_key(|&i| ends[i]);
        let mut sorted: Vec<(Option<i64>, (Vec<u8>, Vec<u8>))> = order
            .into_iter()
            .map(|i| (ends[i], std::mem::take(&mut entries[i])))
            .collect();
        let chunk_size = self.config.batch_size.max(1);
        while !sorted.is_empty() {
            let end = sorted[0].0;
            let same = sorted
                .iter()
                .take(chunk_size)
                .take_while(|(e, _)| *e == end)
                .count();
            let chunk: Vec<_> = sorted.drain(..same).collect();
            let mut input = EmitBatch::default();
            for (_, (state_key, acc)) in &chunk {
                let key = StateKey::decode(state_key)?;
                input.keys.extend_from_slice(key.user_key);
                input.key_ends.push(input.keys.len() as u32);
                let window = key.window_end.map(|end| self.window_ending_at(end));
                input.windows.push(window);
                input.accumulators.extend_from_slice(acc);
                input.accumulator_ends.push(input.accumulators.len() as u32);
            }
            let first = self.records_seen;
            let input_bytes = input.keys.len().saturating_add(input.accumulators.len());
            let result = match self.instance() {
                Ok(instance) => instance.emit(input),
                Err(e) => Err(e),
            };
            let mut records = result.map_err(|e| {
                self.instance = None;
                self.guest_error(first, first, input_bytes, e)
            })?;
            if let Some(end) = end {
                records
                    .timestamps
                    .iter_mut()
                    .for_each(|ts| *ts = end.saturating_sub(1));
            }
            out.emit(records);
        }
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
            .keys()
            .copied()
            .take_while(|&end| window::has_fired(self.window_ending_at(end), wm))
            .collect();
        let mut entries = Vec::new();
        for end in due {
            let keys = self.pending.remove(&end).unwrap_or_default();
            for key in &keys {
                if let Some(acc) = self.state.get(key)? {
                    entries.push((key.clone(), acc.to_vec()));
                }
            }
            if self.config.allowed_lateness_ms > 0 {
                self.fired.entry(end).or_default().extend(keys);
            } else {
                for key in &keys {
                    self.state.delete(key)?;
                }
            }
        }
        self.emit(entries, out)?;
        let lateness = self.config.allowed_lateness_ms;
        let expired: Vec<i64> = self
            .fired
            .keys()
            .copied()
            .take_while(|&end| window::is_late(self.window_ending_at(end), lateness, wm))
            .collect();
        for end in expired {
            for key in self.fired.remove(&end).unwrap_or_default() {
                self.state.delete(&key)?;
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
        let mut index: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut groups: Vec<(Vec<u8>, Vec<u32>)> = Vec::new();
        let mut windows = Vec::new();
        for (i, r) in batch.iter().enumerate() {
            let group = key_group(r.key, max_parallelism);
            windows.clear();
            self.config.windows.assign(r.timestamp, &mut windows);
            if self.config.windows.is_global() {
                let state_key = StateKey::encode(group, r.key, None);
                let g = *index.entry(state_key.clone()).or_insert_with(|| {
                    groups.push((state_key, Vec::new()));
                    groups.len() - 1
                });
                groups[g].1.push(i as u32);
                continue;
            }
            let live: Vec<Window> = windows
                .iter()
                .copied()
                .filter(|w| !window::is_late(*w, self.config.allowed_lateness_ms, self.watermark.0))
                .collect();
            if live.is_empty() {
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
            for w in live {
                let state_key = StateKey::encode(group, r.key, Some(w.end));
                let g = *index.entry(state_key.clone()).or_insert_with(|| {
                    groups.push((state_key, Vec::new()));
                    groups.len() - 1
                });
                groups[g].1.push(i as u32);
            }
        }
        for chunk in groups.chunks(self.config.batch_size.max(1)) {
            self.update_groups(&batch, chunk, out)?;
        }
        self.records_seen += batch.len() as u64;
        Ok(())
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
