//! `AggregatorInstance`: one running instance of an `aggregator` guest, and the plain
//! Rust mirrors of the WIT `group-batch`, `update-output` and `emit-batch`.
//!
//! Invariants:
//! - One guest call per batch: `update` folds every group of a batch at once, `emit`
//!   turns every firing (key, window) into records at once. A guest that exports the
//!   optional fused `update-and-emit` does both for an unwindowed batch in one call
//!   ([`AggregatorInstance::update_and_emit`]); its output is checked as the two calls'
//!   would be, against the one call's input.
//! - Inputs are built by the runtime and trusted to be well framed (see each struct);
//!   outputs come from the guest and are checked before they leave: `update` returns
//!   exactly one accumulator per input group with valid framing and rejection indices
//!   inside `groups.records`, each at most once; `emit` returns a valid `RecordBatch`;
//!   both stay within `output_limits`' multiple of their input. Otherwise
//!   `BadOutput` (which, not being a trap, does not poison the instance).
//! - Accumulators are opaque bytes here; an empty accumulator means "none yet".

use std::collections::BTreeMap;
use std::sync::Arc;

use wasmtime::component::{ComponentExportIndex, TypedFunc};

use crate::record::Window;
use crate::record::batch::{RecordBatch, check_ends};

use super::bindings::aggregator::exports::weir::transform::aggregate as wit_aggregate;
use super::bindings::aggregator::{Aggregator, AggregatorPre};
use super::bindings::{WitUpdateAndEmitOutput, wit_types};
use super::code_tier::InstanceTier;
use super::epoch_ticker::EpochTicker;
use super::error::EngineError;
use super::guest_instance::GuestInstance;
use super::guest_store::GuestStore;
use super::host::HostState;
use super::limits::GuestLimits;
use super::output_limits::{Rejection, check_output_size, check_rejections, reason_bytes};

/// The groups of one batch: group `g` is one (key, window) with its current accumulator
/// `accumulators[accumulator_ends[g-1]..accumulator_ends[g]]` (empty = none yet) and
/// its records `records[record_ends[g-1]..record_ends[g]]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupBatch {
    pub accumulator_ends: Vec<u32>,
    pub accumulators: Vec<u8>,
    /// Exclusive end index of each group's records in `records`; ends at `records.len()`.
    pub record_ends: Vec<u32>,
    pub records: RecordBatch,
}

/// The new accumulators of one `update`, one per input group, same framing and order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdateOutput {
    pub accumulator_ends: Vec<u32>,
    pub accumulators: Vec<u8>,
    /// Records refused (index into `groups.records`); they did not change the accumulator.
    pub rejections: Vec<Rejection>,
}

/// What to emit: entry `i` is a key, its window (`None` for unwindowed aggregates) and
/// its accumulator, framed like `GroupBatch`'s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmitBatch {
    pub key_ends: Vec<u32>,
    pub keys: Vec<u8>,
    pub windows: Vec<Option<Window>>,
    pub accumulator_ends: Vec<u32>,
    pub accumulators: Vec<u8>,
}

impl From<GroupBatch> for wit_aggregate::GroupBatch {
    fn from(g: GroupBatch) -> Self {
        let GroupBatch {
            accumulator_ends,
            accumulators,
            record_ends,
            records,
        } = g;
        Self {
            accumulator_ends,
            accumulators,
            record_ends,
            records: records.into(),
        }
    }
}

impl From<EmitBatch> for wit_aggregate::EmitBatch {
    fn from(e: EmitBatch) -> Self {
        let EmitBatch {
            key_ends,
            keys,
            windows,
            accumulator_ends,
            accumulators,
        } = e;
        // Same layout on both sides: the collect reuses the allocation in place.
        let windows = windows
            .into_iter()
            .map(|w| w.map(|Window { start, end }| wit_types::Window { start, end }))
            .collect();
        Self {
            key_ends,
            keys,
            windows,
            accumulator_ends,
            accumulators,
        }
    }
}

/// The guest's fused `update-and-emit`.
type UpdateAndEmitFunc = TypedFunc<(wit_aggregate::GroupBatch,), (WitUpdateAndEmitOutput,)>;

/// A live aggregator guest. Not `Sync`: one thread calls it at a time.
pub struct AggregatorInstance {
    guest: GuestStore,
    bindings: Aggregator,
    /// The fused call, if the guest exports it.
    update_and_emit: Option<UpdateAndEmitFunc>,
}

impl std::fmt::Debug for AggregatorInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AggregatorInstance")
            .field("module", &self.guest.module())
            .field("update_and_emit", &self.update_and_emit.is_some())
            .finish_non_exhaustive()
    }
}

impl AggregatorInstance {
    pub(crate) fn instantiate(
        module: Arc<str>,
        ticker: Arc<EpochTicker>,
        tier: InstanceTier,
        pre: &AggregatorPre<HostState>,
        update_and_emit: Option<&ComponentExportIndex>,
        limits: &GuestLimits,
        config: BTreeMap<String, String>,
    ) -> Result<Self, EngineError> {
        let mut guest = GuestStore::new(pre.engine(), module, ticker, tier, limits, config);
        let (bindings, update_and_emit) = guest.call(|store| {
            let instance = pre.instance_pre().instantiate(&mut *store)?;
            let bindings = Aggregator::new(&mut *store, &instance)?;
            let fused = update_and_emit
                .map(|index| instance.get_typed_func(&mut *store, index))
                .transpose()?;
            Ok((bindings, fused))
        })?;
        Ok(Self {
            guest,
            bindings,
            update_and_emit,
        })
    }

    /// Whether the guest exports the fused `update-and-emit`.
    pub fn has_update_and_emit(&self) -> bool {
        self.update_and_emit.is_some()
    }

    /// Forgets the guest's fused call: this instance then runs `update` and `emit`
    /// separately, as for a guest without it (benchmarks and tests compare the two).
    #[doc(hidden)]
    pub fn without_update_and_emit(mut self) -> Self {
        self.update_and_emit = None;
        self
    }

    /// The module this instance runs.
    pub fn module(&self) -> &str {
        self.guest.module()
    }

    /// Folds each group's records into its accumulator.
    pub fn update(&mut self, groups: GroupBatch) -> Result<UpdateOutput, EngineError> {
        let shape = InputShape::of(&groups);
        let input = wit_aggregate::GroupBatch::from(groups);
        let Self {
            guest, bindings, ..
        } = self;
        let out = guest.call(|store| {
            bindings
                .weir_transform_aggregate()
                .call_update(store, &input)
        })?;
        let output = UpdateOutput {
            accumulator_ends: out.accumulator_ends,
            accumulators: out.accumulators,
            rejections: out.rejections.into_iter().map(Rejection::from).collect(),
        };
        self.check_update(&output, &shape, 0, 0)?;
        Ok(output)
    }

    /// `update`, then `emit` of every group whose new accumulator is not empty (no
    /// window), in one call: the guest's fused `update-and-emit`.
    ///
    /// # Panics
    /// If the guest does not export it ([`Self::has_update_and_emit`]).
    pub fn update_and_emit(
        &mut self,
        groups: GroupBatch,
    ) -> Result<(UpdateOutput, RecordBatch), EngineError> {
        let shape = InputShape::of(&groups);
        let input = wit_aggregate::GroupBatch::from(groups);
        let func = self
            .update_and_emit
            .expect("update_and_emit is called only on a guest that exports it");
        let (out,) = self.guest.call(|store| func.call(store, (input,)))?;
        let output = UpdateOutput {
            accumulator_ends: out.accumulator_ends,
            accumulators: out.accumulators,
            rejections: out.rejections.into_iter().map(Rejection::from).collect(),
        };
        let records = RecordBatch::from(out.records);
        records
            .validate()
            .map_err(|e| self.bad_output(e.to_string()))?;
        self.check_update(&output, &shape, records.len(), records.byte_size())?;
        Ok((output, records))
    }

    fn bad_output(&self, reason: String) -> EngineError {
        EngineError::BadOutput {
            module: self.guest.module().to_owned(),
            reason,
        }
    }

    /// Checks an update's output (and the `records_out` records of `bytes_out` bytes
    /// emitted with it) against its input.
    fn check_update(
        &self,
        output: &UpdateOutput,
        input: &InputShape,
        records_out: usize,
        bytes_out: usize,
    ) -> Result<(), EngineError> {
        let bad = |reason: String| self.bad_output(reason);
        if output.accumulator_ends.len() != input.groups {
            return Err(bad(format!(
                "update returned {} accumulators for {} groups",
                output.accumulator_ends.len(),
                input.groups
            )));
        }
        check_ends(
            &output.accumulator_ends,
            output.accumulators.len(),
            "accumulator-ends",
        )
        .map_err(|e| bad(e.to_string()))?;
        check_rejections(&output.rejections, input.records).map_err(&bad)?;
        let bytes_out = bytes_out
            .saturating_add(output.accumulators.len())
            .saturating_add(reason_bytes(&output.rejections));
        check_output_size(records_out, bytes_out, input.records, input.bytes).map_err(bad)
    }

    /// Turns accumulators into output records.
    pub fn emit(&mut self, entries: EmitBatch) -> Result<RecordBatch, EngineError> {
        let input_len = entries.key_ends.len();
        let input_bytes = entries
            .keys
            .len()
            .saturating_add(entries.accumulators.len());
        let input = wit_aggregate::EmitBatch::from(entries);
        let Self {
            guest, bindings, ..
        } = self;
        let out =
            guest.call(|store| bindings.weir_transform_aggregate().call_emit(store, &input))?;
        let records = RecordBatch::from(out);
        let bad = |reason: String| self.bad_output(reason);
        records.validate().map_err(|e| bad(e.to_string()))?;
        check_output_size(records.len(), records.byte_size(), input_len, input_bytes)
            .map_err(bad)?;
        Ok(records)
    }
}

/// What an update's output is checked against: its input's groups, records and bytes.
struct InputShape {
    groups: usize,
    records: usize,
    bytes: usize,
}

impl InputShape {
    fn of(groups: &GroupBatch) -> Self {
        Self {
            groups: groups.record_ends.len(),
            records: groups.records.len(),
            bytes: groups
                .records
                .byte_size()
                .saturating_add(groups.accumulators.len()),
        }
    }
}

impl GuestInstance for AggregatorInstance {
    fn module_name(&self) -> &str {
        self.guest.module()
    }

    fn memory_bytes(&self) -> usize {
        self.guest.memory_bytes()
    }

    fn wants_recycling(&self) -> bool {
        self.guest.wants_recycling()
    }

    fn code_outdated(&self) -> bool {
        self.guest.code_outdated()
    }
}
