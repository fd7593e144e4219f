//! `AggregatorInstance`: one running instance of an `aggregator` guest, and the plain
//! Rust mirrors of the WIT `group-batch`, `update-output` and `emit-batch`.
//!
//! Invariants:
//! - One guest call per batch: `update` folds every group of a batch at once, `emit`
//!   turns every firing (key, window) into records at once.
//! - Inputs are built by the runtime and trusted to be well framed (see each struct);
//!   outputs come from the guest and are checked before they leave: `update` returns
//!   exactly one accumulator per input group with valid framing and rejection indices
//!   inside `groups.records`, each at most once; `emit` returns a valid `RecordBatch`;
//!   both stay within `output_limits`' multiple of their input. Otherwise
//!   `BadOutput` (which, not being a trap, does not poison the instance).
//! - Accumulators are opaque bytes here; an empty accumulator means "none yet".

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::record::Window;
use crate::record::batch::{RecordBatch, check_ends};

use super::bindings::aggregator::exports::weir::transform::aggregate as wit_aggregate;
use super::bindings::aggregator::{Aggregator, AggregatorPre};
use super::bindings::wit_types;
use super::epoch_ticker::EpochTicker;
use super::error::EngineError;
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

/// A live aggregator guest. Not `Sync`: one thread calls it at a time.
pub struct AggregatorInstance {
    guest: GuestStore,
    bindings: Aggregator,
}

impl std::fmt::Debug for AggregatorInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AggregatorInstance")
            .field("module", &self.guest.module())
            .finish_non_exhaustive()
    }
}

impl AggregatorInstance {
    pub(crate) fn instantiate(
        module: Arc<str>,
        ticker: Arc<EpochTicker>,
        pre: &AggregatorPre<HostState>,
        limits: &GuestLimits,
        config: BTreeMap<String, String>,
    ) -> Result<Self, EngineError> {
        let mut guest = GuestStore::new(pre.engine(), module, ticker, limits, config);
        let bindings = guest.call(|store| pre.instantiate(store))?;
        Ok(Self { guest, bindings })
    }

    /// The module this instance runs.
    pub fn module(&self) -> &str {
        self.guest.module()
    }

    /// Folds each group's records into its accumulator.
    pub fn update(&mut self, groups: GroupBatch) -> Result<UpdateOutput, EngineError> {
        let group_count = groups.record_ends.len();
        let record_count = groups.records.len();
        let input_bytes = groups
            .records
            .byte_size()
            .saturating_add(groups.accumulators.len());
        let input = wit_aggregate::GroupBatch::from(groups);
        let Self { guest, bindings } = self;
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
        let bad = |reason: String| EngineError::BadOutput {
            module: self.guest.module().to_owned(),
            reason,
        };
        if output.accumulator_ends.len() != group_count {
            return Err(bad(format!(
                "update returned {} accumulators for {group_count} groups",
                output.accumulator_ends.len()
            )));
        }
        check_ends(
            &output.accumulator_ends,
            output.accumulators.len(),
            "accumulator-ends",
        )
        .map_err(|e| bad(e.to_string()))?;
        check_rejections(&output.rejections, record_count).map_err(&bad)?;
        let bytes_out = output
            .accumulators
            .len()
            .saturating_add(reason_bytes(&output.rejections));
        check_output_size(0, bytes_out, record_count, input_bytes).map_err(bad)?;
        Ok(output)
    }

    /// Turns accumulators into output records.
    pub fn emit(&mut self, entries: EmitBatch) -> Result<RecordBatch, EngineError> {
        let input_len = entries.key_ends.len();
        let input_bytes = entries
            .keys
            .len()
            .saturating_add(entries.accumulators.len());
        let input = wit_aggregate::EmitBatch::from(entries);
        let Self { guest, bindings } = self;
        let out =
            guest.call(|store| bindings.weir_transform_aggregate().call_emit(store, &input))?;
        let records = RecordBatch::from(out);
        let bad = |reason: String| EngineError::BadOutput {
            module: self.guest.module().to_owned(),
            reason,
        };
        records.validate().map_err(|e| bad(e.to_string()))?;
        check_output_size(records.len(), records.byte_size(), input_len, input_bytes)
            .map_err(bad)?;
        Ok(records)
    }
}
