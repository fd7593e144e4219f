//! Weir: a stream processor whose user logic runs as WebAssembly components.
//!
//! The crate is laid out along the architecture (see DESIGN.md), from the top floor
//! down; a module imports only modules below it:
//! - [`cli`]: the `weir` command line;
//! - [`pipeline`]: the physical plan, recovery and the run of one pipeline;
//! - [`connector`]: sources and sinks (file, stdin/stdout, generator, Kafka);
//!   [`checkpoint`]: the checkpoint coordinator, its metadata, retention and commits;
//! - [`dataflow`]: tasks, channels, operators, chaining, barrier alignment, windows;
//! - [`engine`]: the only module that touches wasmtime: loading, validating and
//!   running guest components under memory and CPU limits; [`state`]: the RocksDB
//!   keyed-state backend;
//! - [`storage`]: checkpoint storage and the fence of an instance that lost ownership;
//! - [`cluster`]: which worker of N a process is, and what each worker owns;
//! - [`record`]: the data every layer shares (batches, messages, checkpoint ids,
//!   windows, dead letters, snapshots).
//!
//! Beside the floors: [`spec`], the pipeline spec (TOML), parsed and validated;
//! [`metrics`], counters and terminal progress; [`fault`], crash injection for tests;
//! [`watchdog`], which turns a worker stuck on its broker into a failed one.

pub mod checkpoint;
pub mod child_process;
pub mod cli;
pub mod cluster;
pub mod connector;
pub mod dataflow;
pub mod engine;
pub mod fault;
pub mod metrics;
pub mod pipeline;
pub mod record;
pub mod server;
pub mod spec;
pub mod state;
pub mod storage;
pub mod watchdog;

#[cfg(test)]
mod test_support;
