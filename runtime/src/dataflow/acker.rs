//! `Acker`: the thread that acknowledges a task's checkpoints once every deferred part of
//! their snapshots has finished, so the task thread goes on processing meanwhile.
//!
//! Invariants:
//! - Acknowledgements leave in the order the task passed the barriers: from the first
//!   deferred snapshot on, every acknowledgement of the task goes through this thread
//!   (see `Pipe::barrier`).
//! - Ack n carries every snapshot of n, the deferred ones finished: the coordinator never
//!   hears of a snapshot whose files are not durable, so "complete" keeps its meaning.
//! - A deferred part that fails is the task's failure (`TaskEvent::Failed`, naming the
//!   operator) unless the pipeline is already cancelled; nothing of that or a later
//!   checkpoint is acknowledged.
//! - `close` (and drop) waits until every acknowledgement handed over has been sent.

use std::collections::BTreeMap;
use std::thread::JoinHandle;

use crossbeam_channel::Sender;

use crate::dataflow::error::TaskError;
use crate::dataflow::operator::DeferredSnapshot;
use crate::dataflow::task::{TaskContext, TaskEvent};
use crate::record::{CheckpointId, OperatorSnapshot};

/// One checkpoint's acknowledgement, waiting for its deferred snapshots.
#[derive(Debug)]
pub(crate) struct PendingAck {
    pub checkpoint: CheckpointId,
    pub snapshots: BTreeMap<String, OperatorSnapshot>,
    pub deferred: Vec<(String, DeferredSnapshot)>,
}

#[derive(Debug)]
pub(crate) struct Acker {
    acks: Option<Sender<PendingAck>>,
    thread: Option<JoinHandle<()>>,
}

impl Acker {
    pub(crate) fn start(ctx: &TaskContext) -> Result<Self, TaskError> {
        let (acks, pending) = crossbeam_channel::unbounded::<PendingAck>();
        let thread_ctx = ctx.clone();
        let thread = std::thread::Builder::new()
            .name(format!("weir-ack-{}", ctx.task))
            .spawn(move || {
                for ack in pending {
                    if !finish(&thread_ctx, ack) {
                        return;
                    }
                }
            })
            .map_err(|e| TaskError::operator(ctx, "acknowledger", Box::new(e)))?;
        Ok(Self {
            acks: Some(acks),
            thread: Some(thread),
        })
    }

    /// Hands over checkpoint n's acknowledgement; `Cancelled` if the thread has stopped
    /// (it reported why).
    pub(crate) fn send(&self, ack: PendingAck) -> Result<(), TaskError> {
        let acks = self.acks.as_ref().ok_or(TaskError::Cancelled)?;
        acks.send(ack).map_err(|_| TaskError::Cancelled)
    }

    /// Waits until every acknowledgement handed over has been sent.
    pub(crate) fn close(&mut self) {
        self.acks = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Acker {
    fn drop(&mut self) {
        self.close();
    }
}

/// Waits for `ack`'s deferred snapshots and sends it; false if one failed (reported).
fn finish(ctx: &TaskContext, mut ack: PendingAck) -> bool {
    for (operator, deferred) in ack.deferred {
        match deferred.wait() {
            Ok(snapshot) => {
                ack.snapshots.insert(operator, snapshot);
            }
            Err(source) => {
                if !ctx.cancelled() {
                    let error = TaskError::operator(ctx, &operator, source);
                    let _ = ctx.events.send(TaskEvent::Failed {
                        task: ctx.task.clone(),
                        error,
                    });
                }
                return false;
            }
        }
    }
    ctx.events
        .send(TaskEvent::Ack {
            task: ctx.task.clone(),
            checkpoint: ack.checkpoint,
            snapshots: ack.snapshots,
        })
        .is_ok()
}
