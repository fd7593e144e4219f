//! `Chain` tests: operators that log every call to one shared log and emit a tagged
//! record at each watermark and barrier, so the order in which a chain hands records,
//! watermarks and barriers to its operators and sinks can be asserted exactly.

use std::sync::{Arc, Mutex};

use super::*;
use crate::dataflow::sink::Sink;
use crate::record::CheckpointId;

type Log = Arc<Mutex<Vec<String>>>;

/// Passes every record on, refuses those whose value starts with `bad` (one late), and
/// emits `<id>@wm<w>` at a watermark and `<id>@snapshot<n>` at a barrier.
struct Recorder {
    id: String,
    log: Log,
}

impl Recorder {
    fn new(id: &str, log: &Log) -> Recorder {
        Recorder {
            id: id.to_owned(),
            log: log.clone(),
        }
    }

    fn boxed(id: &str, log: &Log) -> Box<dyn Operator> {
        Box::new(Recorder::new(id, log))
    }

    fn note(&self, what: String) {
        self.log
            .lock()
            .expect("log")
            .push(format!("{} {what}", self.id));
    }
}

fn values(batch: &RecordBatch) -> String {
    batch
        .iter()
        .map(|r| String::from_utf8_lossy(r.value).into_owned())
        .collect::<Vec<_>>()
        .join(",")
}

fn one(value: &str) -> RecordBatch {
    let mut b = RecordBatch::default();
    b.push(b"k", value.as_bytes(), 0);
    b
}

impl Operator for Recorder {
    fn id(&self) -> &str {
        &self.id
    }

    fn handle_batch(&mut self, batch: RecordBatch, out: &mut Output) -> Result<(), OperatorError> {
        self.note(format!("batch {}", values(&batch)));
        let mut kept = RecordBatch::default();
        for r in batch.iter() {
            if r.value.starts_with(b"bad") {
                out.late_records += 1;
                out.reject(&self.id, "bad", r.key, r.value, r.timestamp);
            } else {
                kept.push_ref(r);
            }
        }
        out.emit(kept);
        Ok(())
    }

    fn handle_watermark(&mut self, w: Watermark, out: &mut Output) -> Result<(), OperatorError> {
        self.note(format!("wm {}", w.0));
        out.emit(one(&format!("{}@wm{}", self.id, w.0)));
        Ok(())
    }

    fn handle_barrier(
        &mut self,
        barrier: Barrier,
        out: &mut Output,
    ) -> Result<Option<crate::dataflow::operator::Snapshot>, OperatorError> {
        self.note(format!("snapshot {}", barrier.id));
        out.emit(one(&format!("{}@snapshot{}", self.id, barrier.id)));
        Ok(Some(
            OperatorSnapshot::new(serde_json::json!(self.id)).into(),
        ))
    }

    fn on_close(&mut self) -> Result<(), OperatorError> {
        self.note("close".into());
        Ok(())
    }
}

/// As a sink: logs the same calls and snapshots its id.
impl Sink for Recorder {
    fn id(&self) -> &str {
        &self.id
    }

    fn write(&mut self, _: CheckpointId, batch: &RecordBatch) -> Result<(), OperatorError> {
        self.note(format!("batch {}", values(batch)));
        Ok(())
    }

    fn watermark(&mut self, w: Watermark) -> Result<(), OperatorError> {
        self.note(format!("wm {}", w.0));
        Ok(())
    }

    fn barrier(&mut self, barrier: Barrier) -> Result<Option<OperatorSnapshot>, OperatorError> {
        self.note(format!("snapshot {}", barrier.id));
        Ok(Some(OperatorSnapshot::new(serde_json::json!(self.id))))
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        self.note("close".into());
        Ok(())
    }
}

/// `step-0`, `step-1` and the sinks `sink-0`, `sink-1`, all logging to one log; the
/// sinks write checkpoint 3 first.
fn chain(log: &Log, sinks: bool) -> Chain {
    let sinks: Vec<Box<dyn Sink>> = if sinks {
        vec![
            Box::new(Recorder::new("sink-0", log)),
            Box::new(Recorder::new("sink-1", log)),
        ]
    } else {
        Vec::new()
    };
    let sinks = SinkSet::new(sinks, CheckpointId(2));
    Chain::new(
        vec![
            Recorder::boxed("step-0", log),
            Recorder::boxed("step-1", log),
        ],
        sinks,
    )
}

fn take(log: &Log) -> Vec<String> {
    std::mem::take(&mut *log.lock().expect("log"))
}

/// What operator i emits while snapshotting reaches operators i+1.. and the sinks
/// before they snapshot; every operator and sink snapshots exactly once, in chain
/// order, under its id.
#[test]
fn output_at_a_barrier_travels_down_the_chain_before_the_barrier() {
    let log = Log::default();
    let mut chain = chain(&log, true);
    let mut snapshots = BTreeMap::new();
    let barrier = Barrier {
        id: CheckpointId(3),
        is_final: false,
    };
    let out = chain
        .process_barrier(barrier, &mut snapshots)
        .expect("barrier");
    assert_eq!(
        take(&log),
        [
            "step-0 snapshot 3",
            "step-1 batch step-0@snapshot3",
            "sink-0 batch step-0@snapshot3",
            "sink-1 batch step-0@snapshot3",
            "step-1 snapshot 3",
            "sink-0 batch step-1@snapshot3",
            "sink-1 batch step-1@snapshot3",
            "sink-0 snapshot 3",
            "sink-1 snapshot 3",
        ]
    );
    assert_eq!(
        snapshots,
        ["sink-0", "sink-1", "step-0", "step-1"]
            .map(|id| (id.to_owned(), OperatorSnapshot::new(serde_json::json!(id))))
            .into()
    );
    assert_eq!(out.records_to_sinks, 2);
    assert!(out.batches.is_empty());
}

/// A window fired by watermark w reaches the next operators and the sinks before w
/// does, and the sinks get w last (a repartition sink carries it on behind those
/// records); without sinks, what the last operator emits is the
/// chain's output, in order.
#[test]
fn output_at_a_watermark_travels_down_the_chain_before_the_watermark() {
    let log = Log::default();
    let mut chain = chain(&log, true);
    let out = chain.process_watermark(Watermark(42)).expect("watermark");
    assert_eq!(
        take(&log),
        [
            "step-0 wm 42",
            "step-1 batch step-0@wm42",
            "sink-0 batch step-0@wm42",
            "sink-1 batch step-0@wm42",
            "step-1 wm 42",
            "sink-0 batch step-1@wm42",
            "sink-1 batch step-1@wm42",
            "sink-0 wm 42",
            "sink-1 wm 42",
        ]
    );
    assert_eq!(out.records_to_sinks, 2);

    let mut chain = self::chain(&log, false);
    let out = chain.process_watermark(Watermark(7)).expect("watermark");
    assert_eq!(
        out.batches.iter().map(values).collect::<Vec<_>>(),
        ["step-0@wm7", "step-1@wm7"]
    );
    assert_eq!(out.records_to_sinks, 0);
}

/// A batch goes through every operator, then to every sink; what any operator refuses
/// (and counts late) is collected once, with the operator that refused it.
#[test]
fn a_batch_runs_through_the_chain_and_refusals_are_collected() {
    let log = Log::default();
    let mut chain = chain(&log, true);
    let mut batch = one("x");
    batch.push(b"k", b"bad-1", 5);
    batch.push(b"k", b"y", 6);
    let out = chain.process_batch(batch).expect("batch");
    assert_eq!(
        take(&log),
        [
            "step-0 batch x,bad-1,y",
            "step-1 batch x,y",
            "sink-0 batch x,y",
            "sink-1 batch x,y",
        ]
    );
    assert_eq!(out.records_to_sinks, 2);
    assert_eq!(out.late_records, 1);
    assert_eq!(
        out.dead_letters,
        [DeadLetter {
            operator: "step-0".into(),
            reason: "bad".into(),
            key: b"k".to_vec(),
            value: b"bad-1".to_vec(),
            timestamp: 5,
        }]
    );

    chain.close().expect("close");
    assert_eq!(
        take(&log),
        [
            "step-0 close",
            "step-1 close",
            "sink-0 close",
            "sink-1 close"
        ]
    );
}
