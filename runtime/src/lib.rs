//! Weir: a stream processor whose user logic runs as WebAssembly components.
//!
//! The crate is laid out along the architecture (see DESIGN.md):
//! - [`spec`]: the pipeline spec (TOML), parsed and validated;
//! - [`engine`]: the only module that touches wasmtime: loading, validating and
//!   running guest components under memory and CPU limits;
//! - [`dataflow`]: batches, channels, operators, chaining and barrier alignment;
//! - [`state`]: the RocksDB keyed-state backend;
//! - [`checkpoint`]: the checkpoint coordinator, its storage, metadata and restore;
//! - [`connector`]: sources and sinks (file, stdin/stdout, generator, Kafka);
//! - [`pipeline`]: the physical plan, recovery and the run of one pipeline;
//! - [`metrics`]: counters and terminal progress; [`fault`]: crash injection for tests;
//! - [`cli`]: the `weir` command line.

pub mod checkpoint;
pub mod cli;
pub mod connector;
pub mod dataflow;
pub mod engine;
pub mod fault;
pub mod metrics;
pub mod pipeline;
pub mod spec;
pub mod state;
