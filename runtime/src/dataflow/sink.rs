//! `Sink`: where records leave the pipeline (a file, a Kafka topic, stdout, the
//! dead-letter output), and `SinkSet`, a task's sinks together with the checkpoint
//! their writes belong to.
//!
//! Invariants:
//! - Every record written between barrier n-1 and barrier n belongs to checkpoint n.
//!   The `SinkSet` says which checkpoint that is, on every write: it is the one place
//!   a task counts checkpoints for its sinks (first `base.next()`, then the id after
//!   each barrier), so no sink keeps a counter of its own that could drift.
//! - At barrier n, each sink makes what it wrote for n durable but invisible (phase one
//!   of its two-phase commit) before `barrier` returns, and returns the snapshot its
//!   committer needs to make it visible once checkpoint n is complete (phase two, see
//!   `checkpoint::commit`). A sink with nothing to commit (stdout) returns `None`.
//! - A barrier whose id is not the open checkpoint is a protocol error: output would be
//!   staged under the wrong checkpoint.
//! - A sink sees the watermarks its chain passes on (`watermark`), in band with the
//!   records: a sink that carries records on to another process (the repartition
//!   topic) carries event time with them; the others ignore it.
//! - `close` comes after the final barrier; nothing is written after it.

use std::collections::BTreeMap;

use crate::dataflow::operator::OperatorError;
use crate::record::batch::RecordBatch;
use crate::record::message::{Barrier, Watermark};
use crate::record::{CheckpointId, OperatorSnapshot};

pub trait Sink: Send {
    /// A stable id, unique in the pipeline (`sink-0`, `dead-letter`): its snapshots are
    /// stored and committed under it.
    fn id(&self) -> &str;

    /// Writes `batch` as part of checkpoint `checkpoint`'s output.
    fn write(&mut self, checkpoint: CheckpointId, batch: &RecordBatch)
    -> Result<(), OperatorError>;

    /// The chain's watermark advanced to `watermark`: every record at or before it
    /// that will ever reach this sink has been written. Most sinks ignore it.
    fn watermark(&mut self, _watermark: Watermark) -> Result<(), OperatorError> {
        Ok(())
    }

    /// Barrier `barrier.id`: what was written for it is made durable but invisible;
    /// returns what the committer needs to make it visible (`None`: nothing to commit).
    fn barrier(&mut self, barrier: Barrier) -> Result<Option<OperatorSnapshot>, OperatorError>;

    /// The task is shutting down after its final barrier.
    fn close(&mut self) -> Result<(), OperatorError> {
        Ok(())
    }
}

/// A sink failed; names which.
#[derive(Debug, thiserror::Error)]
#[error("sink {sink}: {source}")]
pub struct SinkError {
    pub sink: String,
    #[source]
    pub source: OperatorError,
}

/// A task's sinks, and the checkpoint whose output they are writing.
pub struct SinkSet {
    sinks: Vec<Box<dyn Sink>>,
    /// The checkpoint the records written now belong to.
    open: CheckpointId,
}

impl std::fmt::Debug for SinkSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkSet")
            .field("sinks", &self.ids())
            .field("open", &self.open)
            .finish()
    }
}

impl SinkSet {
    /// `base`: the id this run's checkpoints are numbered after (`NONE` from scratch),
    /// so the first records belong to `base.next()`.
    pub fn new(sinks: Vec<Box<dyn Sink>>, base: CheckpointId) -> SinkSet {
        SinkSet {
            sinks,
            open: base.next(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.sinks.is_empty()
    }

    pub fn ids(&self) -> Vec<&str> {
        self.sinks.iter().map(|s| s.id()).collect()
    }

    /// Writes `batch` to every sink, as part of the open checkpoint.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        if batch.is_empty() {
            return Ok(());
        }
        let open = self.open;
        for sink in &mut self.sinks {
            sink.write(open, batch)
                .map_err(|e| fail(sink.as_ref(), e))?;
        }
        Ok(())
    }

    /// Passes the chain's watermark to every sink.
    pub fn watermark(&mut self, watermark: Watermark) -> Result<(), SinkError> {
        for sink in &mut self.sinks {
            sink.watermark(watermark)
                .map_err(|e| fail(sink.as_ref(), e))?;
        }
        Ok(())
    }

    /// Stages the open checkpoint's output in every sink, collects their snapshots,
    /// and opens the next checkpoint.
    pub fn barrier(
        &mut self,
        barrier: Barrier,
        snapshots: &mut BTreeMap<String, OperatorSnapshot>,
    ) -> Result<(), SinkError> {
        if barrier.id != self.open {
            let open = self.open;
            return Err(SinkError {
                sink: self.ids().join(", "),
                source: format!(
                    "barrier {} arrived while checkpoint {open} was open: output would be \
                     staged under the wrong checkpoint",
                    barrier.id
                )
                .into(),
            });
        }
        for sink in &mut self.sinks {
            if let Some(snapshot) = sink.barrier(barrier).map_err(|e| fail(sink.as_ref(), e))? {
                snapshots.insert(sink.id().to_owned(), snapshot);
            }
        }
        self.open = barrier.id.next();
        Ok(())
    }

    pub fn close(&mut self) -> Result<(), SinkError> {
        for sink in &mut self.sinks {
            sink.close().map_err(|e| fail(sink.as_ref(), e))?;
        }
        Ok(())
    }
}

fn fail(sink: &dyn Sink, source: OperatorError) -> SinkError {
    SinkError {
        sink: sink.id().to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Logs every call as "<id> <call> <checkpoint>".
    struct Logged {
        id: &'static str,
        log: Arc<Mutex<Vec<String>>>,
    }

    impl Sink for Logged {
        fn id(&self) -> &str {
            self.id
        }

        fn write(
            &mut self,
            checkpoint: CheckpointId,
            batch: &RecordBatch,
        ) -> Result<(), OperatorError> {
            let mut log = self.log.lock().expect("log");
            log.push(format!("{} write {checkpoint} x{}", self.id, batch.len()));
            Ok(())
        }

        fn barrier(&mut self, barrier: Barrier) -> Result<Option<OperatorSnapshot>, OperatorError> {
            let mut log = self.log.lock().expect("log");
            log.push(format!("{} barrier {}", self.id, barrier.id));
            Ok(Some(OperatorSnapshot::new(serde_json::json!(barrier.id.0))))
        }
    }

    fn set(base: u64) -> (SinkSet, Arc<Mutex<Vec<String>>>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let sinks: Vec<Box<dyn Sink>> = vec![
            Box::new(Logged {
                id: "a",
                log: log.clone(),
            }),
            Box::new(Logged {
                id: "b",
                log: log.clone(),
            }),
        ];
        (SinkSet::new(sinks, CheckpointId(base)), log)
    }

    fn batch(n: usize) -> RecordBatch {
        let mut b = RecordBatch::default();
        for i in 0..n {
            b.push(b"", i.to_string().as_bytes(), 0);
        }
        b
    }

    fn barrier(id: u64) -> Barrier {
        Barrier {
            id: CheckpointId(id),
            is_final: false,
        }
    }

    #[test]
    fn writes_belong_to_the_checkpoint_after_the_base_then_after_each_barrier() {
        let (mut sinks, log) = set(7);
        let mut snapshots = BTreeMap::new();
        sinks.write(&batch(2)).expect("write");
        sinks.write(&batch(0)).expect("empty batches are skipped");
        sinks
            .barrier(barrier(8), &mut snapshots)
            .expect("barrier 8");
        sinks
            .barrier(barrier(9), &mut snapshots)
            .expect("barrier 9");
        sinks.write(&batch(1)).expect("write");
        assert_eq!(
            *log.lock().expect("log"),
            [
                "a write 8 x2",
                "b write 8 x2",
                "a barrier 8",
                "b barrier 8",
                "a barrier 9",
                "b barrier 9",
                "a write 10 x1",
                "b write 10 x1",
            ]
        );
        assert_eq!(snapshots["a"].state, serde_json::json!(9));
    }

    #[test]
    fn a_barrier_for_another_checkpoint_is_refused_before_any_sink_sees_it() {
        let (mut sinks, log) = set(0);
        let err = sinks
            .barrier(barrier(2), &mut BTreeMap::new())
            .expect_err("checkpoint 1 is open");
        assert_eq!(
            err.to_string(),
            "sink a, b: barrier 2 arrived while checkpoint 1 was open: output would be staged \
             under the wrong checkpoint"
        );
        assert!(log.lock().expect("log").is_empty());
    }
}
