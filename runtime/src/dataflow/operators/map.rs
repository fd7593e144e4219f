//! `MapOperator`: a stateless step that hands each batch to a `mapper` guest.
//!
//! Invariants: one guest call per batch, never per record. The guest's rejections go
//! to the dead-letter output with the guest's reason; everything else it returns is
//! emitted in order. A guest trap (CPU deadline, memory limit, panic) fails the
//! operator with an error naming the module and the input records being mapped; the
//! failed checkpoint is never committed, so no partial output of the failed run leaks.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::dataflow::operator::{Operator, OperatorError, Output};
use crate::engine::{EngineError, GuestInstance, GuestLimits, GuestModule, MapperInstance};
use crate::metrics::guest_memory::GuestMemoryGauge;
use crate::record::batch::RecordBatch;

/// A guest call failed; says which records were being processed.
#[derive(Debug, thiserror::Error)]
#[error("on input records {first}..{end} of this subtask: {source}{note}")]
pub struct GuestCallError {
    pub module: String,
    pub first: u64,
    pub end: u64,
    #[source]
    pub source: EngineError,
    /// Whose memory it was, for a memory-limit error (see [`memory_note`]); else empty.
    pub note: String,
}

/// For a guest that hit its memory limit, says whether the runtime's input alone was the
/// problem: the input of a call is copied into the guest's memory whole and its output
/// is built there too, so an input over half the limit cannot be processed by any
/// guest, while a smaller one means the guest itself used the memory.
pub fn memory_note(source: &EngineError, input_bytes: usize) -> String {
    let EngineError::MemoryLimit { limit_bytes, .. } = source else {
        return String::new();
    };
    if input_bytes.saturating_mul(2) > *limit_bytes {
        format!(
            " (the runtime's input to this call, {input_bytes} bytes, is more than half of it: \
             lower batch_bytes or batch_size, or raise [limits] memory)"
        )
    } else {
        format!(
            " (the runtime's input to this call was only {input_bytes} bytes: the guest used the rest: raise [limits] memory if it needs more)"
        )
    }
}

/// After a guest call: samples `instance`'s linear memory into `memory` (0 without an
/// instance), and drops the instance if it used half its memory headroom (its owner
/// instantiates a fresh one at its next call; counted in `memory`), or if its module now
/// has faster code (not counted: see `code_tier.rs`).
pub fn sample_and_recycle<T: GuestInstance>(
    id: &str,
    instance: &mut Option<T>,
    memory: &GuestMemoryGauge,
) {
    memory.set(instance.as_ref().map_or(0, T::memory_bytes));
    if let Some(old) = instance.take_if(|i| i.wants_recycling()) {
        tracing::debug!(
            operator = id,
            module = old.module_name(),
            memory_bytes = old.memory_bytes(),
            "recycling a guest instance that used half its memory headroom"
        );
        memory.recycled();
    } else if let Some(old) = instance.take_if(|i| i.code_outdated()) {
        tracing::debug!(
            operator = id,
            module = old.module_name(),
            "moving a guest instance to its module's optimized code"
        );
    }
}

pub struct MapOperator {
    id: String,
    module: Arc<GuestModule>,
    limits: GuestLimits,
    config: BTreeMap<String, String>,
    instance: Option<MapperInstance>,
    /// Records this operator has been given so far (for error messages).
    records_seen: u64,
    /// The instance's linear memory, sampled after each call.
    memory: GuestMemoryGauge,
}

impl MapOperator {
    pub fn new(
        id: String,
        module: Arc<GuestModule>,
        limits: GuestLimits,
        config: BTreeMap<String, String>,
    ) -> Self {
        Self {
            id,
            module,
            limits,
            config,
            instance: None,
            records_seen: 0,
            memory: GuestMemoryGauge::detached(),
        }
    }

    /// Reports the instance's linear memory to `gauge` (a pipeline's per-step figure).
    pub fn with_memory_gauge(mut self, gauge: GuestMemoryGauge) -> Self {
        self.memory = gauge;
        self
    }

    fn instance(&mut self) -> Result<&mut MapperInstance, EngineError> {
        if self.instance.is_none() {
            self.instance = Some(
                self.module
                    .instantiate_mapper(&self.limits, self.config.clone())?,
            );
        }
        Ok(self.instance.as_mut().expect("just instantiated"))
    }
}

impl Operator for MapOperator {
    fn id(&self) -> &str {
        &self.id
    }

    fn handle_batch(&mut self, batch: RecordBatch, out: &mut Output) -> Result<(), OperatorError> {
        let input_bytes = batch.byte_len();
        let first = self.records_seen;
        let end = first + batch.len() as u64;
        self.records_seen = end;
        let result = match self.instance() {
            Ok(instance) => instance.map(batch),
            Err(e) => Err(e),
        };
        let output = result.map_err(|source| {
            // A trapped instance is unusable; a restarted pipeline instantiates anew.
            self.instance = None;
            sample_and_recycle(&self.id, &mut self.instance, &self.memory);
            GuestCallError {
                module: self.module.name().to_owned(),
                first,
                end,
                note: memory_note(&source, input_bytes),
                source,
            }
        })?;
        sample_and_recycle(&self.id, &mut self.instance, &self.memory);
        for rejection in &output.rejections {
            let r = output.input.get(rejection.index as usize);
            out.reject(
                &self.id,
                rejection.reason.clone(),
                r.key,
                r.value,
                r.timestamp,
            );
        }
        out.emit(output.records);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Instance {
        memory_bytes: usize,
        wants_recycling: bool,
        code_outdated: bool,
    }

    impl GuestInstance for Instance {
        fn module_name(&self) -> &str {
            "m.wasm"
        }
        fn memory_bytes(&self) -> usize {
            self.memory_bytes
        }
        fn wants_recycling(&self) -> bool {
            self.wants_recycling
        }
        fn code_outdated(&self) -> bool {
            self.code_outdated
        }
    }

    fn after_a_call(wants_recycling: bool, code_outdated: bool) -> (bool, u64, u64) {
        let gauge = GuestMemoryGauge::detached();
        let mut instance = Some(Instance {
            memory_bytes: 5 << 20,
            wants_recycling,
            code_outdated,
        });
        sample_and_recycle("op", &mut instance, &gauge);
        (instance.is_some(), gauge.get(), gauge.recycled_count())
    }

    /// The instance is kept unless it used half its headroom (a recycle, counted) or
    /// its module has faster code (replaced, not counted); its memory is sampled first.
    #[test]
    fn an_instance_is_dropped_when_it_wants_recycling_or_its_code_is_outdated() {
        let sampled = 5 << 20;
        assert_eq!(after_a_call(false, false), (true, sampled, 0));
        assert_eq!(after_a_call(true, false), (false, sampled, 1));
        assert_eq!(after_a_call(false, true), (false, sampled, 0));
        assert_eq!(after_a_call(true, true), (false, sampled, 1));
    }
}
