//! Logging through the host: each call writes one line to the pipeline's log, tagged
//! with the module's name.
//!
//! Anything a guest prints to stdout or stderr (a panic message, say) also reaches the
//! log, but untagged by level. Outside wasm (unit tests of a guest function on the
//! host) these write `LEVEL message` to stderr instead.

/// The severity of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// Writes `message` to the pipeline's log at `level`.
pub fn log(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    crate::bindings::log(level, message);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("{level:?} {message}");
}

/// Logs at [`Level::Trace`].
pub fn trace(message: &str) {
    log(Level::Trace, message);
}

/// Logs at [`Level::Debug`].
pub fn debug(message: &str) {
    log(Level::Debug, message);
}

/// Logs at [`Level::Info`].
pub fn info(message: &str) {
    log(Level::Info, message);
}

/// Logs at [`Level::Warn`].
pub fn warn(message: &str) {
    log(Level::Warn, message);
}

/// Logs at [`Level::Error`].
pub fn error(message: &str) {
    log(Level::Error, message);
}
