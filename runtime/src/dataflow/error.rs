//! `TaskError`: why a task stopped, with the pipeline, task and operator it concerns
//! (the constructors that take them from a task's context live beside `TaskContext`).

use crate::dataflow::operator::OperatorError;
use crate::dataflow::source::SourceError;
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
