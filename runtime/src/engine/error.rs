//! `EngineError`: everything that can go wrong loading or running a guest.
//!
//! Invariants:
//! - Every variant except `Setup` names the module it is about (the name given at load,
//!   usually the file name), so a caller can wrap it with pipeline/operator context and
//!   the user still learns which `.wasm` misbehaved.
//! - Every message is one line: guest-provided text in it is escaped and multi-line
//!   text from wasmtime joined (`guest_text.rs`), so nothing a guest writes can add a
//!   line to Weir's output.
//! - No guest behaviour becomes a host panic: traps, timeouts, memory exhaustion, bad
//!   output and refused imports all arrive here as values.

use std::time::Duration;

/// An error from the WebAssembly engine layer.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The engine itself could not be set up (wasmtime configuration, cache directory).
    #[error("cannot set up the WebAssembly engine: {0}")]
    Setup(String),

    /// The module file could not be read.
    #[error("{module}: cannot read the module file: {source}")]
    Io {
        module: String,
        #[source]
        source: std::io::Error,
    },

    /// The bytes are not something Weir can run: not wasm, a core module instead of a
    /// component, not a weir world, a forbidden import, or a failed compilation.
    #[error("{module}: {reason}")]
    Invalid { module: String, reason: String },

    /// A call (or instantiation) ran past its CPU deadline and was interrupted.
    #[error("{module}: guest call exceeded its time limit of {timeout:?} and was stopped")]
    CpuDeadline { module: String, timeout: Duration },

    /// The guest tried to grow its memory past the limit and then trapped.
    #[error("{module}: guest exceeded its memory limit of {limit_bytes} bytes")]
    MemoryLimit { module: String, limit_bytes: usize },

    /// The guest passed more data to the host in one host call or one call result than
    /// wasmtime's hostcall fuel allows (`output_limits::MAX_GUEST_TRANSFER_BYTES`).
    #[error(
        "{module}: guest passed more than {limit_bytes} bytes to the host in one call and was stopped"
    )]
    TransferLimit { module: String, limit_bytes: usize },

    /// The guest panicked; `message` is its panic message from its stderr, on one line.
    #[error("{module}: guest panicked: {message}")]
    GuestPanic { module: String, message: String },

    /// An exception escaped an interpreted guest's export (a Python SDK guest reports it
    /// on its stderr before the interpreter traps); `message` is its class and message.
    #[error("{module}: guest raised an uncaught exception: {message}")]
    GuestException { module: String, message: String },

    /// Any other trap (or a failure lifting the guest's results).
    #[error("{module}: guest trapped: {message}")]
    Trap { module: String, message: String },

    /// The guest returned a result that breaks the contract (framing, counts, indices).
    #[error("{module}: guest returned malformed output: {reason}")]
    BadOutput { module: String, reason: String },

    /// The instance trapped earlier and may not be called again; instantiate a new one
    /// from the `GuestModule`.
    #[error("{module}: instance is unusable after an earlier failure ({cause}); re-instantiate it")]
    Poisoned { module: String, cause: String },
}

impl EngineError {
    /// The module this error is about, if any.
    pub fn module(&self) -> Option<&str> {
        match self {
            EngineError::Setup(_) => None,
            EngineError::Io { module, .. }
            | EngineError::Invalid { module, .. }
            | EngineError::CpuDeadline { module, .. }
            | EngineError::MemoryLimit { module, .. }
            | EngineError::TransferLimit { module, .. }
            | EngineError::GuestPanic { module, .. }
            | EngineError::GuestException { module, .. }
            | EngineError::Trap { module, .. }
            | EngineError::BadOutput { module, .. }
            | EngineError::Poisoned { module, .. } => Some(module),
        }
    }
}
