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
use crate::dataflow::task_context::{TaskContext, TaskEvent};
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use crossbeam_channel::Receiver;

    use super::*;
    use crate::metrics::PipelineMetrics;

    fn context() -> (TaskContext, Receiver<TaskEvent>) {
        let (events, received) = crossbeam_channel::unbounded();
        let ctx = TaskContext {
            pipeline: "p".into(),
            task: "stage-0".into(),
            events,
            cancel: Arc::new(AtomicBool::new(false)),
            metrics: Arc::new(PipelineMetrics::default()),
        };
        (ctx, received)
    }

    /// Checkpoint `n`'s ack with one taken snapshot and `deferred`.
    fn ack(n: u64, deferred: Vec<(String, DeferredSnapshot)>) -> PendingAck {
        let mut snapshots = BTreeMap::new();
        snapshots.insert(
            "sink-0".to_owned(),
            OperatorSnapshot::new(serde_json::json!(n)),
        );
        PendingAck {
            checkpoint: CheckpointId(n),
            snapshots,
            deferred,
        }
    }

    /// A deferred snapshot that finishes (with `n`, or failing) when `release` is sent.
    fn deferred_until(n: u64, fail: bool) -> (crossbeam_channel::Sender<()>, DeferredSnapshot) {
        let (release, wait) = crossbeam_channel::bounded::<()>(1);
        let deferred = DeferredSnapshot::new(move || {
            let _ = wait.recv();
            if fail {
                Err("upload failed: disk full".into())
            } else {
                Ok(OperatorSnapshot::new(serde_json::json!(n)))
            }
        });
        (release, deferred)
    }

    fn render(event: TaskEvent) -> String {
        match event {
            TaskEvent::Ack {
                checkpoint,
                snapshots,
                ..
            } => format!(
                "ack {checkpoint}: {:?}",
                snapshots.keys().collect::<Vec<_>>()
            ),
            TaskEvent::Failed { error, .. } => format!("failed: {error}"),
            TaskEvent::Drained { .. } => "drained".into(),
        }
    }

    #[test]
    fn acks_leave_in_checkpoint_order_with_their_deferred_snapshots_finished() {
        let (ctx, events) = context();
        let mut acker = Acker::start(&ctx).expect("start");
        let (release, deferred) = deferred_until(1, false);
        acker
            .send(ack(1, vec![("step-1".into(), deferred)]))
            .expect("send");
        acker.send(ack(2, Vec::new())).expect("send");
        // Checkpoint 2 has nothing deferred, but waits for 1.
        assert!(
            events.recv_timeout(Duration::from_millis(100)).is_err(),
            "nothing is acknowledged before checkpoint 1's upload finishes"
        );
        release.send(()).expect("release");
        acker.close();
        let got: Vec<String> = events.try_iter().map(render).collect();
        assert_eq!(
            got,
            [r#"ack 1: ["sink-0", "step-1"]"#, r#"ack 2: ["sink-0"]"#]
        );
    }

    #[test]
    fn a_failed_deferred_snapshot_fails_the_task_naming_the_operator_and_acks_nothing_more() {
        let (ctx, events) = context();
        let mut acker = Acker::start(&ctx).expect("start");
        let (release, deferred) = deferred_until(1, true);
        release.send(()).expect("release");
        acker
            .send(ack(1, vec![("step-1".into(), deferred)]))
            .expect("send");
        let _ = acker.send(ack(2, Vec::new()));
        acker.close();
        let got: Vec<String> = events.try_iter().map(render).collect();
        assert_eq!(
            got,
            ["failed: pipeline p, task stage-0, operator step-1: upload failed: disk full"]
        );
    }

    #[test]
    fn a_failure_after_cancellation_is_not_reported() {
        let (ctx, events) = context();
        let mut acker = Acker::start(&ctx).expect("start");
        ctx.cancel.store(true, Ordering::Relaxed);
        let (release, deferred) = deferred_until(1, true);
        release.send(()).expect("release");
        acker
            .send(ack(1, vec![("step-1".into(), deferred)]))
            .expect("send");
        acker.close();
        assert_eq!(events.try_iter().count(), 0);
    }
}
