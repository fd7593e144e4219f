//! `TaskError`: why a task stopped, with the pipeline, task and operator it concerns.

use crate::dataflow::chain::ChainError;
use crate::dataflow::operator::OperatorError;
use crate::dataflow::sink::SinkError;
use crate::dataflow::source::SourceError;
use crate::dataflow::task::TaskContext;
use crate::record::batch::BatchTooLarge;

#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("pipeline {pipeline}, task {task}, operator {operator}: {source}")]
    Operator {
        pipeline: String,
        task: String,
        operator: String,
        #[source]
        source: OperatorError,
    },
    #[error("pipeline {pipeline}, task {task}: source: {source}")]
    Source {
        pipeline: String,
        task: String,
        #[source]
        source: SourceError,
    },
    /// A source's poll filled a batch past what its offsets address.
    #[error("pipeline {pipeline}, task {task}: source: {source}: lower batch_size")]
    SourceBatch {
        pipeline: String,
        task: String,
        #[source]
        source: BatchTooLarge,
    },
    /// The task's thread panicked: a bug, reported like any failure (see `task_panic`).
    #[error("pipeline {pipeline}, task {task}: panicked: {message}")]
    Panicked {
        pipeline: String,
        task: String,
        /// One line: the panic's message and, where known, its location.
        message: String,
    },
    #[error("pipeline {pipeline}, task {task}: {message}")]
    Protocol {
        pipeline: String,
        task: String,
        message: String,
    },
    /// The pipeline is shutting down because something else failed.
    #[error("cancelled")]
    Cancelled,
}

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
