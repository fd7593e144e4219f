//! `InputGate`: barrier alignment and watermark merging for a task with several inputs.
//!
//! Alignment invariant (docs/src/architecture.md, "Checkpoints: aligned barriers"): after
//! barrier n arrives on input i, input i is not read until every input has delivered
//! barrier n; then the gate yields `Aligned(n)` exactly once, the task snapshots and
//! forwards the barrier, and only then are the blocked inputs read again. A blocked input
//! is not drained into a buffer: it is simply not selected, so its bounded channel fills
//! and backpressure reaches its sender, exactly as Flink's aligned checkpoints behave.
//!
//! Watermarks: the gate's watermark is the minimum over its inputs' latest
//! watermarks (an input that has ended counts as `Watermark::END`); it is yielded only
//! when it advances.

use std::time::Duration;

use crossbeam_channel::{Receiver, Select};

use crate::record::batch::RecordBatch;
use crate::record::message::{Barrier, Message, Watermark};

/// What the task should do next.
#[derive(Debug)]
pub enum GateEvent {
    Batch(RecordBatch),
    /// The merged watermark advanced to this value.
    Watermark(Watermark),
    /// Every input delivered this barrier: snapshot, then forward it.
    Aligned(Barrier),
    /// Every input has ended.
    End,
    /// Nothing arrived within the poll timeout (lets the task check for cancellation).
    Timeout,
}

#[derive(Debug)]
struct Input {
    rx: Receiver<Message>,
    watermark: Watermark,
    /// Delivered the barrier being aligned; not read until alignment completes.
    blocked: bool,
    ended: bool,
}

#[derive(Debug)]
pub struct InputGate {
    inputs: Vec<Input>,
    /// The barrier being aligned, if any input has delivered one.
    pending: Option<Barrier>,
    watermark: Watermark,
}

/// An error in the barrier protocol: a bug upstream, reported instead of mis-snapshotting.
#[derive(Debug, thiserror::Error)]
#[error("barrier protocol violated: {0}")]
pub struct AlignmentError(String);

impl InputGate {
    pub fn new(inputs: Vec<Receiver<Message>>) -> Self {
        Self {
            inputs: inputs
                .into_iter()
                .map(|rx| Input {
                    rx,
                    watermark: Watermark::START,
                    blocked: false,
                    ended: false,
                })
                .collect(),
            pending: None,
            watermark: Watermark::START,
        }
    }

    /// The next event, waiting at most `timeout` for a message.
    pub fn next(&mut self, timeout: Duration) -> Result<GateEvent, AlignmentError> {
        loop {
            if let Some(event) = self.check_alignment() {
                return Ok(event);
            }
            if self.inputs.iter().all(|i| i.ended) {
                return Ok(GateEvent::End);
            }
            let (index, received) = {
                let mut select = Select::new();
                let mut readable = Vec::with_capacity(self.inputs.len());
                for (i, input) in self.inputs.iter().enumerate() {
                    if !input.blocked && !input.ended {
                        select.recv(&input.rx);
                        readable.push(i);
                    }
                }
                let op = match select.select_timeout(timeout) {
                    Ok(op) => op,
                    Err(_) => return Ok(GateEvent::Timeout),
                };
                let index = readable[op.index()];
                (index, op.recv(&self.inputs[index].rx))
            };
            match received {
                Ok(Message::Batch(batch)) => return Ok(GateEvent::Batch(batch)),
                Ok(Message::Watermark(w)) => {
                    let input = &mut self.inputs[index];
                    input.watermark = input.watermark.max(w);
                    if let Some(advanced) = self.advance_watermark() {
                        return Ok(GateEvent::Watermark(advanced));
                    }
                }
                Ok(Message::Barrier(barrier)) => self.on_barrier(index, barrier)?,
                Err(_) => {
                    let input = &mut self.inputs[index];
                    input.ended = true;
                    input.watermark = Watermark::END;
                    if let Some(advanced) = self.advance_watermark() {
                        return Ok(GateEvent::Watermark(advanced));
                    }
                }
            }
        }
    }

    fn on_barrier(&mut self, index: usize, barrier: Barrier) -> Result<(), AlignmentError> {
        match self.pending {
            None => self.pending = Some(barrier),
            Some(p) if p.id == barrier.id => {}
            Some(p) => {
                return Err(AlignmentError(format!(
                    "input {index} delivered barrier {} while barrier {} is being aligned",
                    barrier.id, p.id
                )));
            }
        }
        self.inputs[index].blocked = true;
        Ok(())
    }

    /// `Aligned` once every live input is blocked on the pending barrier.
    fn check_alignment(&mut self) -> Option<GateEvent> {
        let barrier = self.pending?;
        if self.inputs.iter().all(|i| i.blocked || i.ended) {
            self.pending = None;
            for input in &mut self.inputs {
                input.blocked = false;
            }
            return Some(GateEvent::Aligned(barrier));
        }
        None
    }

    fn advance_watermark(&mut self) -> Option<Watermark> {
        let min = self.inputs.iter().map(|i| i.watermark).min()?;
        if min > self.watermark {
            self.watermark = min;
            return Some(min);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::CheckpointId;
    use crossbeam_channel::bounded;

    fn batch(tag: &str) -> Message {
        let mut b = RecordBatch::default();
        b.push(b"", tag.as_bytes(), 0);
        Message::Batch(b)
    }

    fn barrier(n: u64) -> Message {
        Message::Barrier(Barrier {
            id: CheckpointId(n),
            is_final: false,
        })
    }

    fn drain(gate: &mut InputGate) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            match gate.next(Duration::from_millis(50)).expect("protocol") {
                GateEvent::Batch(b) => {
                    seen.push(String::from_utf8_lossy(b.get(0).value).into_owned())
                }
                GateEvent::Aligned(b) => seen.push(format!("snapshot {}", b.id)),
                GateEvent::Watermark(w) => seen.push(format!("wm {}", w.0)),
                GateEvent::End => return seen,
                GateEvent::Timeout => panic!("gate stalled after {seen:?}"),
            }
        }
    }

    /// Barrier 1 arrives early on input 0; the records behind it on input 0 must not be
    /// processed before the snapshot of 1, while input 1 is read up to its barrier.
    #[test]
    fn records_behind_an_early_barrier_wait_for_the_snapshot() {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        tx0.send(barrier(1)).expect("send");
        tx0.send(batch("a-after-1")).expect("send");
        tx0.send(batch("a-after-1-bis")).expect("send");
        tx1.send(batch("b-before-1")).expect("send");
        tx1.send(batch("b-before-1-bis")).expect("send");
        tx1.send(barrier(1)).expect("send");
        tx1.send(batch("b-after-1")).expect("send");
        drop((tx0, tx1));

        let seen = drain(&mut InputGate::new(vec![rx0, rx1]));
        let snapshot = seen
            .iter()
            .position(|s| s == "snapshot 1")
            .expect("snapshot taken");
        for before in ["b-before-1", "b-before-1-bis"] {
            assert!(
                seen.iter().position(|s| s == before).expect("seen") < snapshot,
                "{seen:?}"
            );
        }
        for after in ["a-after-1", "a-after-1-bis", "b-after-1"] {
            assert!(
                seen.iter().position(|s| s == after).expect("seen") > snapshot,
                "{seen:?}"
            );
        }
        assert_eq!(seen.iter().filter(|s| s.starts_with("snapshot")).count(), 1);
    }

    /// A blocked input is not read at all: what follows its barrier stays in its
    /// channel, so its sender feels backpressure.
    #[test]
    fn blocked_input_is_not_drained() {
        let (tx0, rx0) = bounded(2);
        let (tx1, rx1) = bounded(2);
        tx0.send(barrier(7)).expect("send");
        tx0.send(batch("x")).expect("send");
        let mut gate = InputGate::new(vec![rx0, rx1]);
        for _ in 0..3 {
            assert!(matches!(
                gate.next(Duration::from_millis(20)).expect("an event"),
                GateEvent::Timeout
            ));
            assert_eq!(
                tx0.len(),
                1,
                "the record behind the barrier was read before alignment"
            );
        }
        tx1.send(barrier(7)).expect("send");
        assert!(
            matches!(gate.next(Duration::from_millis(20)).expect("an event"), GateEvent::Aligned(b) if b.id == CheckpointId(7))
        );
        assert!(matches!(
            gate.next(Duration::from_millis(20)).expect("an event"),
            GateEvent::Batch(_)
        ));
        assert_eq!(tx0.len(), 0);
    }

    #[test]
    fn watermark_is_the_minimum_over_inputs() {
        let (tx0, rx0) = bounded(8);
        let (tx1, rx1) = bounded(8);
        let mut gate = InputGate::new(vec![rx0, rx1]);
        let next_watermark =
            |gate: &mut InputGate| match gate.next(Duration::from_millis(50)).expect("an event") {
                GateEvent::Watermark(w) => Some(w.0),
                GateEvent::Timeout => None,
                other => panic!("unexpected {other:?}"),
            };
        tx0.send(Message::Watermark(Watermark(10))).expect("send");
        tx1.send(Message::Watermark(Watermark(5))).expect("send");
        assert_eq!(next_watermark(&mut gate), Some(5));
        tx1.send(Message::Watermark(Watermark(20))).expect("send");
        assert_eq!(next_watermark(&mut gate), Some(10));
        drop(tx1); // an ended input no longer holds the watermark back
        assert_eq!(next_watermark(&mut gate), None);
        tx0.send(Message::Watermark(Watermark(30))).expect("send");
        assert_eq!(next_watermark(&mut gate), Some(30));
        drop(tx0);
        assert_eq!(next_watermark(&mut gate), Some(i64::MAX));
    }

    #[test]
    fn interleaved_barriers_are_a_protocol_error() {
        let (tx0, rx0) = bounded(8);
        let (tx1, rx1) = bounded(8);
        tx0.send(barrier(1)).expect("send");
        tx1.send(barrier(2)).expect("send");
        let mut gate = InputGate::new(vec![rx0, rx1]);
        let mut result = Ok(GateEvent::Timeout);
        for _ in 0..3 {
            result = gate.next(Duration::from_millis(10));
            if result.is_err() {
                break;
            }
        }
        assert!(result.is_err());
    }
}
