//! The dataflow: batches, messages, operators, chaining, shuffles and barrier alignment.
pub mod alignment;
pub mod chain;
pub mod error;
pub mod operator;
pub mod operators;
pub mod partition;
pub mod source;
pub mod task;
pub mod task_panic;
pub mod window;
