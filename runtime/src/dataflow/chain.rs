//! `Chain`: consecutive operators with the same partitioning, run in one thread.
//!
//! Invariants: a batch leaves operator i and is fully processed by operators i+1.. (and
//! the sinks) before operator i sees anything else, so chaining preserves stream order
//! exactly as a channel would. On a watermark or barrier, what operator i emits in
//! response travels down the chain BEFORE the watermark or barrier reaches operator
//! i + 1: a window fired by watermark w reaches the sink before w does, and output
//! emitted while snapshotting checkpoint n belongs to n; the sinks take barrier n only
//! after every operator has snapshotted and its output has reached them. Records refused
//! anywhere in the chain are collected as dead letters for the task's dead-letter sink.

use std::collections::BTreeMap;

use crate::dataflow::operator::{DeferredSnapshot, Operator, OperatorError, Output, Snapshot};
use crate::dataflow::sink::{SinkError, SinkSet};
use crate::record::DeadLetter;
use crate::record::OperatorSnapshot;
use crate::record::batch::RecordBatch;
use crate::record::message::{Barrier, Watermark};

/// An operator failed; names which.
#[derive(Debug, thiserror::Error)]
#[error("operator {operator}: {source}")]
pub struct ChainError {
    pub operator: String,
    #[source]
    pub source: OperatorError,
}

/// What a chain produced for the task to deliver.
#[derive(Debug, Default)]
pub struct ChainOutput {
    /// Batches for the task's output (empty when the chain ends in sinks).
    pub batches: Vec<RecordBatch>,
    pub dead_letters: Vec<DeadLetter>,
    pub late_records: u64,
    /// Records handed to the sinks.
    pub records_to_sinks: u64,
    /// Snapshots of this barrier still being finished off the task thread, by operator.
    pub deferred: Vec<(String, DeferredSnapshot)>,
}

pub struct Chain {
    operators: Vec<Box<dyn Operator>>,
    /// Each receives every record the last operator emits; empty when the chain's
    /// output goes to the next stage.
    sinks: SinkSet,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self
            .operators
            .iter()
            .map(|o| o.id())
            .chain(self.sinks.ids())
            .collect();
        f.debug_struct("Chain").field("operators", &ids).finish()
    }
}

impl Chain {
    pub fn new(operators: Vec<Box<dyn Operator>>, sinks: SinkSet) -> Self {
        Self { operators, sinks }
    }

    pub fn process_batch(&mut self, batch: RecordBatch) -> Result<ChainOutput, ChainError> {
        let mut out = ChainOutput::default();
        self.feed(0, vec![batch], &mut out)?;
        Ok(out)
    }

    pub fn process_watermark(&mut self, watermark: Watermark) -> Result<ChainOutput, ChainError> {
        let mut out = ChainOutput::default();
        for i in 0..self.operators.len() {
            let mut emitted = Output::default();
            let op = &mut self.operators[i];
            op.handle_watermark(watermark, &mut emitted)
                .map_err(|e| fail(op.as_ref(), e))?;
            self.absorb(i + 1, emitted, &mut out)?;
        }
        // Behind everything the watermark fired, as a channel would carry it.
        self.sinks.watermark(watermark).map_err(sink_failed)?;
        Ok(out)
    }

    /// Snapshots every operator for `barrier`, in chain order. Output emitted while
    /// snapshotting operator i is processed by i+1.. before they snapshot.
    pub fn process_barrier(
        &mut self,
        barrier: Barrier,
        snapshots: &mut BTreeMap<String, OperatorSnapshot>,
    ) -> Result<ChainOutput, ChainError> {
        let mut out = ChainOutput::default();
        for i in 0..self.operators.len() {
            let mut emitted = Output::default();
            let op = &mut self.operators[i];
            match op
                .handle_barrier(barrier, &mut emitted)
                .map_err(|e| fail(op.as_ref(), e))?
            {
                Some(Snapshot::Taken(s)) => {
                    snapshots.insert(op.id().to_owned(), s);
                }
                Some(Snapshot::Deferred(d)) => out.deferred.push((op.id().to_owned(), d)),
                None => {}
            }
            self.absorb(i + 1, emitted, &mut out)?;
        }
        self.sinks
            .barrier(barrier, snapshots)
            .map_err(sink_failed)?;
        Ok(out)
    }

    /// Tells every operator the input is quiet (see `Operator::on_idle`).
    pub fn idle(&mut self) -> Result<(), ChainError> {
        for op in &mut self.operators {
            op.on_idle().map_err(|e| fail(op.as_ref(), e))?;
        }
        Ok(())
    }

    pub fn close(&mut self) -> Result<(), ChainError> {
        for op in &mut self.operators {
            op.on_close().map_err(|e| fail(op.as_ref(), e))?;
        }
        self.sinks.close().map_err(sink_failed)
    }

    /// Takes what operator `from - 1` emitted and pushes it through the rest.
    fn absorb(
        &mut self,
        from: usize,
        emitted: Output,
        out: &mut ChainOutput,
    ) -> Result<(), ChainError> {
        out.dead_letters.extend(emitted.dead_letters);
        out.late_records += emitted.late_records;
        self.feed(from, emitted.batches, out)
    }

    /// Pushes `batches` through operators `from..` and then to the sinks or `out`.
    fn feed(
        &mut self,
        from: usize,
        mut batches: Vec<RecordBatch>,
        out: &mut ChainOutput,
    ) -> Result<(), ChainError> {
        for op in &mut self.operators[from..] {
            if batches.is_empty() {
                return Ok(());
            }
            let mut emitted = Output::default();
            for batch in batches {
                op.handle_batch(batch, &mut emitted)
                    .map_err(|e| fail(op.as_ref(), e))?;
            }
            out.dead_letters.extend(emitted.dead_letters);
            out.late_records += emitted.late_records;
            batches = emitted.batches;
        }
        if self.sinks.is_empty() {
            out.batches.extend(batches);
            return Ok(());
        }
        for batch in batches {
            out.records_to_sinks += batch.len() as u64;
            self.sinks.write(&batch).map_err(sink_failed)?;
        }
        Ok(())
    }
}

fn fail(op: &dyn Operator, source: OperatorError) -> ChainError {
    ChainError {
        operator: op.id().to_owned(),
        source,
    }
}

fn sink_failed(e: SinkError) -> ChainError {
    ChainError {
        operator: e.sink,
        source: e.source,
    }
}

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;
