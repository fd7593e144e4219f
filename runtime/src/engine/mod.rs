//! The only module that touches wasmtime: loading, checking and running guest
//! components under memory and CPU limits.
//!
//! Invariants of the layer (each file states its own):
//! - One [`WasmEngine`] per process; a [`GuestModule`] per loaded component (checked at
//!   load: a component, one weir world, weir and WASI 0.2 imports only, and WASI
//!   granting nothing: no file, environment or network); one instance per subtask
//!   ([`MapperInstance`], [`AggregatorInstance`]), reused across batches until it traps
//!   or has used half its memory headroom ([`GuestInstance::wants_recycling`]), when
//!   its operator replaces it with a fresh one, or its module has faster code
//!   ([`GuestInstance::code_outdated`]: a large module may start on baseline code and
//!   move to optimized code, see `code_tier.rs`).
//! - Every guest call is bounded in memory ([`GuestLimits::memory_bytes`]) and time
//!   ([`GuestLimits::call_timeout`] plus one epoch tick), time blocked in host calls
//!   included (a sleeping guest is stopped at the deadline like a looping one). No
//!   guest behaviour panics the host; it becomes an [`EngineError`] naming the module,
//!   and a trap poisons the instance.

mod aggregator_instance;
mod bindings;
mod call_deadline;
mod code_tier;
mod compile_isolation;
mod compiled_cache;
mod compiler;
mod component_imports;
mod epoch_ticker;
mod error;
mod guest_instance;
mod guest_log_budget;
mod guest_module;
mod guest_output;
mod guest_store;
mod guest_text;
mod host;
mod host_poll;
mod import_policy;
mod limits;
mod linker;
mod mapper_instance;
mod output_limits;
mod wasm_engine;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tier_tests;

pub use aggregator_instance::{AggregatorInstance, EmitBatch, GroupBatch, UpdateOutput};
pub use code_tier::{CodeTier, TIER_UP_MIN_BYTES};
pub use compile_isolation::{
    CHILD_SUBCOMMAND, CompileIsolation, CompileLimits, DEFAULT_COMPILE_CPU, DEFAULT_COMPILE_MEMORY,
    lower_limits,
};
pub use compiled_cache::CompiledCache;
pub use epoch_ticker::EPOCH_TICK;
pub use error::EngineError;
pub use guest_instance::GuestInstance;
pub use guest_log_budget::{DEFAULT_GUEST_LOG_RATE, GuestLogBudget};
pub use guest_module::{GuestModule, World};
pub use import_policy::ALLOWED_IMPORTS;
pub use limits::{DEFAULT_CALL_TIMEOUT, DEFAULT_GUEST_MEMORY, GuestLimits};
pub use mapper_instance::{MapFailure, MapOutput, MapperInstance};
pub use output_limits::Rejection;
pub use wasm_engine::{MAX_MODULE_BYTES, WasmEngine};
