//! `MapOperator`: a stateless step that hands each batch to a `mapper` guest.
//!
//! Invariants: one guest call per batch, never per record. The guest's rejections go
//! to the dead-letter output with the guest's reason; everything else it returns is
//! emitted in order. A guest trap (CPU deadline, memory limit, panic) fails the
//! operator with an error naming the module and the input records being mapped; the
//! failed checkpoint is never committed, so no partial output of the failed run leaks.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::dataflow::batch::RecordBatch;
use crate::dataflow::operator::{Operator, OperatorError, Output};
use crate::engine::{EngineError, GuestLimits, GuestModule, MapperInstance};

/// A guest call failed; says which records were being processed.
#[derive(Debug, thiserror::Error)]
#[error("on input records {first}..{end} of this subtask: {source}")]
pub struct GuestCallError {
    pub module: String,
    pub first: u64,
    pub end: u64,
    #[source]
    pub source: EngineError,
}

pub struct MapOperator {
    id: String,
    module: Arc<GuestModule>,
    limits: GuestLimits,
    config: BTreeMap<String, String>,
    instance: Option<MapperInstance>,
    /// Records this operator has been given so far (for error messages).
    records_seen: u64,
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
        }
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
            GuestCallError {
                module: self.module.name().to_owned(),
                first,
                end,
                source,
            }
        })?;
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
