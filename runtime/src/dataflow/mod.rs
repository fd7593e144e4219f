//! The dataflow: tasks, operators, chaining, shuffles, barrier alignment, windows and the
//! `Source` trait connectors implement (the data they move lives in `record`).
mod acker;
pub mod alignment;
pub mod chain;
pub mod error;
pub mod operator;
pub mod operators;
pub mod partition;
pub mod sink;
pub mod source;
pub mod task;
pub mod task_context;
pub mod task_panic;
pub mod watermark_generator;
pub mod window;
