//! Weir: a stream processor whose user logic runs as WebAssembly components.
//!
//! The crate is laid out in floors (the design: `docs/src/architecture.md`); a module
//! imports only modules below it, never one above, and no two import each other:
//! - [`cli`]: the `weir` command line; [`server`]: `weir serve`, the multi-tenant host;
//! - [`pipeline`]: recovery, the physical plan built into tasks, its sources and sinks
//!   opened, and the run of one pipeline;
//! - [`spec`]: the pipeline spec (TOML) as the user wrote it, parsed and validated
//!   (what one worker of N runs, derived from it, is `pipeline::WorkerPlan`);
//! - [`connector`]: sources and sinks (file, stdin/stdout, generator, Kafka), each with
//!   its own config; they never see the spec;
//! - [`checkpoint`]: the checkpoint coordinator, its metadata, retention and commits;
//! - [`dataflow`]: tasks, channels, operators, chaining, barrier alignment, windows;
//! - [`engine`]: the only module that touches wasmtime: loading, validating and
//!   running guest components under memory and CPU limits; [`state`]: the RocksDB
//!   keyed-state backend;
//! - [`field`]: a spec's or config's values (durations, sizes, names) and their limits;
//!   [`storage`]: checkpoint storage and the fence of an instance that lost ownership;
//! - [`cluster`]: which worker of N a process is, and what each worker owns;
//!   [`record`]: the data every layer shares (batches, messages, checkpoint ids,
//!   windows, dead letters, snapshots).
//!
//! Beside the floors, imported from anywhere: [`metrics`], counters and terminal
//! progress; [`fault`], crash injection for tests (the `fault-injection` feature);
//! [`watchdog`], which turns a worker stuck on its broker into a failed one;
//! [`child_process`], a child process run to its end within a deadline; [`periodic`], a
//! background thread that runs a task every period and stops at once when dropped.

pub mod checkpoint;
pub mod child_process;
pub mod cli;
pub mod cluster;
pub mod connector;
pub mod dataflow;
pub mod engine;
pub mod fault;
pub mod field;
pub mod metrics;
pub mod periodic;
pub mod pipeline;
pub mod record;
pub mod server;
pub mod spec;
pub mod state;
pub mod storage;
pub mod watchdog;

#[cfg(test)]
mod test_support;
