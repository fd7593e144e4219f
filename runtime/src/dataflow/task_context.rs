//! `TaskContext`: what every task shares with its pipeline (the pipeline's and the
//! task's names, the coordinator's event channel, the cancel flag, the metrics), and
//! `TaskEvent`, what a task tells the coordinator.
//!
//! Invariants: a task reports at most one `Failed`, and never for a cancellation (the
//! coordinator cancelled it); every task error names its pipeline and task, and the
//! operator where there is one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::Sender;

use crate::dataflow::chain::ChainError;
use crate::dataflow::error::TaskError;
use crate::dataflow::operator::OperatorError;
use crate::dataflow::sink::SinkError;
use crate::metrics::PipelineMetrics;
use crate::record::{CheckpointId, OperatorSnapshot};

/// What tasks tell the checkpoint coordinator.
#[derive(Debug)]
pub enum TaskEvent {
    /// The task passed barrier `checkpoint` and took these snapshots.
    Ack {
        task: String,
        checkpoint: CheckpointId,
        snapshots: BTreeMap<String, OperatorSnapshot>,
    },
    /// A source task has read all its input (bounded sources).
    Drained {
        task: String,
    },
    Failed {
        task: String,
        error: TaskError,
    },
}

/// What every task shares with the pipeline.
#[derive(Debug, Clone)]
pub struct TaskContext {
    pub pipeline: String,
    pub task: String,
    pub events: Sender<TaskEvent>,
    pub cancel: Arc<AtomicBool>,
    pub metrics: Arc<PipelineMetrics>,
}

impl TaskContext {
    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    pub(crate) fn report(&self, result: Result<(), TaskError>) {
        if let Err(error) = result
            && !matches!(error, TaskError::Cancelled)
        {
            let _ = self.events.send(TaskEvent::Failed {
                task: self.task.clone(),
                error,
            });
        }
    }
}

/// Task errors named after the task's context.
impl TaskError {
    pub(crate) fn chain(ctx: &TaskContext, e: ChainError) -> Self {
        Self::operator(ctx, &e.operator, e.source)
    }

    pub(crate) fn panicked(ctx: &TaskContext, message: String) -> Self {
        TaskError::Panicked {
            pipeline: ctx.pipeline.clone(),
            task: ctx.task.clone(),
            message,
        }
    }

    pub(crate) fn sink(ctx: &TaskContext, e: SinkError) -> Self {
        Self::operator(ctx, &e.sink, e.source)
    }

    pub(crate) fn operator(ctx: &TaskContext, operator: &str, source: OperatorError) -> Self {
        TaskError::Operator {
            pipeline: ctx.pipeline.clone(),
            task: ctx.task.clone(),
            operator: operator.to_owned(),
            source,
        }
    }
}
