//! `MapperInstance`: one running instance of a `mapper` guest.
//!
//! Invariants:
//! - One guest call per batch (`map`), never per record; the instance is reused across
//!   calls (its memory and any guest-side caches persist between batches) until it
//!   traps or its owner recycles it (`wants_recycling`).
//! - The batch is moved into the call and the output moved out: no per-record copy on
//!   the host side of the boundary.
//! - Output leaving this type is well formed and bounded: `records` passes
//!   `RecordBatch::validate`, every rejection index is below the input's length and
//!   appears once, and records and bytes stay within `output_limits`' multiple of the
//!   input; otherwise `BadOutput`, one line naming the module.
//!   A `BadOutput` does not poison the instance (the guest did not trap), but a caller
//!   will normally fail the step anyway.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::record::batch::RecordBatch;

use super::bindings::mapper::{Mapper, MapperPre};
use super::bindings::wit_types;
use super::code_tier::InstanceTier;
use super::epoch_ticker::EpochTicker;
use super::error::EngineError;
use super::guest_instance::GuestInstance;
use super::guest_store::GuestStore;
use super::host::HostState;
use super::limits::GuestLimits;
use super::output_limits::{Rejection, check_output_size, check_rejections, reason_bytes};

/// What one `map` call produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MapOutput {
    /// Records to emit, in order: zero or more per input record.
    pub records: RecordBatch,
    pub rejections: Vec<Rejection>,
    /// The batch that was mapped, handed back (moved, not copied) so the caller can
    /// name the records `rejections` point at.
    pub input: RecordBatch,
}

/// A live mapper guest. Not `Sync`: one thread calls it at a time.
pub struct MapperInstance {
    guest: GuestStore,
    bindings: Mapper,
}

impl std::fmt::Debug for MapperInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapperInstance")
            .field("module", &self.guest.module())
            .finish_non_exhaustive()
    }
}

impl MapperInstance {
    pub(crate) fn instantiate(
        module: Arc<str>,
        ticker: Arc<EpochTicker>,
        tier: InstanceTier,
        pre: &MapperPre<HostState>,
        limits: &GuestLimits,
        config: BTreeMap<String, String>,
    ) -> Result<Self, EngineError> {
        let mut guest = GuestStore::new(pre.engine(), module, ticker, tier, limits, config);
        let bindings = guest.call(|store| pre.instantiate(store))?;
        Ok(Self { guest, bindings })
    }

    /// The module this instance runs.
    pub fn module(&self) -> &str {
        self.guest.module()
    }

    /// Maps one batch.
    pub fn map(&mut self, batch: RecordBatch) -> Result<MapOutput, EngineError> {
        self.map_or_hand_back(batch).map_err(|failed| failed.error)
    }

    /// Maps one batch; when the call fails, hands the batch back with the error (moved,
    /// not copied: the guest read it in place), so its owner can look at its records.
    #[allow(
        clippy::result_large_err,
        reason = "the error carries the batch it hands back, moved once per failed call, never on the record path"
    )]
    pub fn map_or_hand_back(&mut self, batch: RecordBatch) -> Result<MapOutput, MapFailure> {
        let input_len = batch.len();
        let input_bytes = batch.byte_size();
        let input = wit_types::RecordBatch::from(batch);
        let Self { guest, bindings } = self;
        let out = match guest.call(|store| bindings.weir_transform_map().call_map(store, &input)) {
            Ok(out) => out,
            Err(error) => {
                return Err(MapFailure {
                    error,
                    input: input.into(),
                });
            }
        };
        let output = MapOutput {
            records: out.records.into(),
            rejections: out.rejections.into_iter().map(Rejection::from).collect(),
            input: input.into(),
        };
        let bad = |reason: String| EngineError::BadOutput {
            module: self.guest.module().to_owned(),
            reason,
        };
        let checked = output
            .records
            .validate()
            .map_err(|e| bad(e.to_string()))
            .and_then(|()| check_rejections(&output.rejections, input_len).map_err(&bad))
            .and_then(|()| {
                let bytes_out = output
                    .records
                    .byte_size()
                    .saturating_add(reason_bytes(&output.rejections));
                check_output_size(output.records.len(), bytes_out, input_len, input_bytes)
                    .map_err(bad)
            });
        match checked {
            Ok(()) => Ok(output),
            Err(error) => Err(MapFailure {
                error,
                input: output.input,
            }),
        }
    }
}

/// A failed `map` call, with the batch it was given.
#[derive(Debug)]
pub struct MapFailure {
    pub error: EngineError,
    pub input: RecordBatch,
}

impl GuestInstance for MapperInstance {
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
