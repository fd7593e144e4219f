//! `GuestOutput`: where a guest's stdout and stderr go.
//!
//! Invariants:
//! - Every complete line a guest writes to stdout or stderr becomes one `tracing` event
//!   whose text starts with the module's name and the stream (stdout at INFO, stderr at
//!   WARN). Once a Rust panic starts on stderr (`thread '...' panicked at`), the rest
//!   of that call's stderr goes to DEBUG: the panic is reported by the call's error,
//!   on its one line, and is not printed twice. A line longer than
//!   [`MAX_LINE`] is cut into several events; a trailing partial line is emitted when
//!   the call that wrote it ends ([`GuestOutput::flush`]). Nothing reaches the host's own
//!   stdout/stderr, and every event's text is escaped onto one line (`guest_text`).
//! - The last [`STDERR_TAIL`] bytes of stderr written during the current call are kept,
//!   so that a trap can be explained by the guest's own words (a Rust guest prints its
//!   panic message to stderr and then executes `unreachable`).
//! - Lines shown (stdout, and stderr outside a panic report) spend the run's
//!   `GuestLogBudget`: past its rate a line is dropped whole and counted, so a guest
//!   that writes without pause cannot flood the log (the stderr tail is kept anyway).
//! - Memory held per instance is bounded (`MAX_LINE` per stream + `STDERR_TAIL`) whatever
//!   the guest writes; writes never fail and never block.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use super::guest_log_budget::GuestLogBudget;
use super::guest_text::escape;
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Longest line kept before it is emitted anyway.
const MAX_LINE: usize = 4 << 10; // 4 KiB
/// How much of the current call's stderr is kept to explain a trap.
const STDERR_TAIL: usize = 8 << 10; // 8 KiB
/// The permit `check-write` grants: how much a guest may hand over in one write.
const WRITE_PERMIT: usize = 64 << 10; // 64 KiB

/// Which of the guest's output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stdio {
    Stdout,
    Stderr,
}

/// The shared sink behind every stdout/stderr handle of one instance.
#[derive(Debug, Clone)]
pub(crate) struct GuestOutput(Arc<Mutex<Inner>>);

#[derive(Debug)]
struct Inner {
    module: Arc<str>,
    budget: GuestLogBudget,
    stdout_line: Vec<u8>,
    stderr_line: Vec<u8>,
    stderr_tail: VecDeque<u8>,
    /// The current call's stderr has begun a panic report.
    panicking: bool,
}

impl GuestOutput {
    pub(crate) fn new(module: Arc<str>, budget: GuestLogBudget) -> Self {
        Self(Arc::new(Mutex::new(Inner {
            module,
            budget,
            stdout_line: Vec::new(),
            stderr_line: Vec::new(),
            stderr_tail: VecDeque::new(),
            panicking: false,
        })))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A poisoned lock only means a tracing subscriber panicked mid-event; the
        // buffers are still consistent, so keep going.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A new handle on `stream`, for the guest's resource table.
    pub(crate) fn stream(&self, stream: Stdio) -> GuestStdioStream {
        GuestStdioStream {
            output: self.clone(),
            stream,
        }
    }

    /// Called before each call: forget the previous call's stderr.
    pub(crate) fn start_call(&self) {
        let mut inner = self.lock();
        inner.stderr_tail.clear();
        inner.panicking = false;
    }

    /// Called after each call: emit partial lines.
    pub(crate) fn flush(&self) {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let to = (&*inner.module, &inner.budget);
        emit(to, Stdio::Stdout, &mut inner.stdout_line, &mut false);
        emit(
            to,
            Stdio::Stderr,
            &mut inner.stderr_line,
            &mut inner.panicking,
        );
    }

    /// What the guest wrote to stderr during the current call (last [`STDERR_TAIL`] bytes).
    pub(crate) fn stderr_tail(&self) -> String {
        let inner = self.lock();
        let (a, b) = inner.stderr_tail.as_slices();
        let mut bytes = Vec::with_capacity(a.len() + b.len());
        bytes.extend_from_slice(a);
        bytes.extend_from_slice(b);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn write(&self, stream: Stdio, mut bytes: &[u8]) {
        let mut inner = self.lock();
        let inner = &mut *inner;
        if stream == Stdio::Stderr {
            let keep = bytes.len().min(STDERR_TAIL);
            let tail = &mut inner.stderr_tail;
            let overflow = (tail.len() + keep).saturating_sub(STDERR_TAIL);
            tail.drain(..overflow);
            tail.extend(&bytes[bytes.len() - keep..]);
        }
        let mut not_panicking = false;
        let to = (&*inner.module, &inner.budget);
        let (line, panicking) = match stream {
            Stdio::Stdout => (&mut inner.stdout_line, &mut not_panicking),
            Stdio::Stderr => (&mut inner.stderr_line, &mut inner.panicking),
        };
        while !bytes.is_empty() {
            match bytes.iter().position(|&b| b == b'\n') {
                Some(nl) => {
                    line.extend_from_slice(&bytes[..nl]);
                    emit(to, stream, line, panicking);
                    bytes = &bytes[nl + 1..];
                }
                None => {
                    let room = MAX_LINE - line.len();
                    let take = bytes.len().min(room);
                    line.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if line.len() >= MAX_LINE {
                        emit(to, stream, line, panicking);
                    }
                }
            }
        }
    }
}

/// Emits `line` (if not empty) as one tracing event, escaped and prefixed with the
/// module and stream, and clears it; a shown line spends the budget, and is dropped if
/// the budget cannot pay for it. A stderr line starting a Rust panic report sets
/// `panicking`; while it is set, stderr lines go to DEBUG (not shown, not charged).
fn emit(
    (module, budget): (&str, &GuestLogBudget),
    stream: Stdio,
    line: &mut Vec<u8>,
    panicking: &mut bool,
) {
    if line.is_empty() {
        return;
    }
    let raw = String::from_utf8_lossy(line);
    let raw = raw.strip_suffix('\r').unwrap_or(&raw);
    if stream == Stdio::Stderr && raw.starts_with("thread '") && raw.contains(" panicked at ") {
        *panicking = true;
    }
    let hidden = stream == Stdio::Stderr && *panicking;
    if hidden || budget.admit(module, raw.len()) {
        let text = escape(raw);
        match stream {
            Stdio::Stdout => tracing::info!(target: "weir::guest", "{module} stdout: {text}"),
            Stdio::Stderr if hidden => {
                tracing::debug!(target: "weir::guest", "{module} stderr: {text}");
            }
            Stdio::Stderr => tracing::warn!(target: "weir::guest", "{module} stderr: {text}"),
        }
    }
    line.clear();
}

/// One `wasi:io/streams.output-stream` handle on a guest's stdout or stderr.
#[derive(Debug)]
pub(crate) struct GuestStdioStream {
    output: GuestOutput,
    stream: Stdio,
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestStdioStream {
    /// Always ready: writes are buffered in memory, bounded, and never block.
    async fn ready(&mut self) {}
}

impl OutputStream for GuestStdioStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.output.write(self.stream, &bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_PERMIT)
    }
}

/// The panic message in a Rust guest's stderr, on one line: from the last "panicked
/// at" to the end, without the `RUST_BACKTRACE` hint; std's location line, then the
/// guest's message with its own line breaks escaped (so it cannot forge a line of
/// Weir's output). `None` if the guest did not panic.
pub(crate) fn panic_message(stderr: &str) -> Option<String> {
    let start = stderr.rfind("panicked at")?;
    let panic = stderr[start..].trim_end();
    let panic = panic
        .strip_suffix(
            "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
        )
        .unwrap_or(panic)
        .trim_end();
    Some(match panic.split_once('\n') {
        Some((location, message)) => format!("{} {}", escape(location), escape(message)),
        None => escape(panic),
    })
}

/// The line an SDK writes to stderr when an exception escapes an export (the Python
/// SDK's `weir_guest.component.UNCAUGHT_MARKER`), before the interpreter traps.
const UNCAUGHT_MARKER: &str = "weir-guest: uncaught exception: ";

/// The last uncaught-exception report in a guest's stderr, escaped, on one line: the
/// exception's class, its message and the export. `None` if there is none.
pub(crate) fn uncaught_exception(stderr: &str) -> Option<String> {
    let start = stderr.rfind(UNCAUGHT_MARKER)? + UNCAUGHT_MARKER.len();
    let report = stderr[start..].lines().next().unwrap_or_default();
    Some(escape(report.trim_end()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_tail_is_bounded_and_keeps_the_end() {
        let out = GuestOutput::new("m".into(), GuestLogBudget::default());
        let mut s = out.stream(Stdio::Stderr);
        for _ in 0..100 {
            s.write(Bytes::from(vec![b'x'; 1000])).ok();
        }
        s.write(Bytes::from_static(b"\nthe end\n")).ok();
        let tail = out.stderr_tail();
        assert_eq!(tail.len(), STDERR_TAIL);
        assert!(tail.ends_with("the end\n"));
        out.start_call();
        assert!(out.stderr_tail().is_empty());
    }

    #[test]
    fn a_panic_report_on_stderr_is_not_logged_at_warn() {
        let out = GuestOutput::new("m".into(), GuestLogBudget::default());
        let mut s = out.stream(Stdio::Stderr);
        s.write(Bytes::from_static(b"before\n")).ok();
        assert!(!out.lock().panicking);
        s.write(Bytes::from_static(
            b"thread '<unnamed>' (1) panicked at src/lib.rs:1:1:\nboom\n",
        ))
        .ok();
        assert!(out.lock().panicking);
        out.start_call();
        assert!(!out.lock().panicking);
    }

    #[test]
    fn uncaught_exception_is_the_last_report_line() {
        let stderr = "weir-guest: uncaught exception: KeyError (in map)\nlog\n\
                      weir-guest: uncaught exception: ValueError: bad \\n value (in emit)\n\
                      thread '<unnamed>' panicked at runtime/src/lib.rs:1280:25:\n\
                      Python function threw an unexpected exception\n";
        assert_eq!(
            uncaught_exception(stderr).as_deref(),
            Some("ValueError: bad \\n value (in emit)")
        );
        assert_eq!(uncaught_exception("panicked at x\n"), None);
    }

    #[test]
    fn panic_message_is_extracted() {
        let stderr = "log line\nthread '<unnamed>' panicked at src/lib.rs:5:5:\nweir-test: boom\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            panic_message(stderr).as_deref(),
            Some("panicked at src/lib.rs:5:5: weir-test: boom")
        );
        let forged = "thread 'main' panicked at src/lib.rs:1:1:\nboom\nweir: error: forged\n";
        assert_eq!(
            panic_message(forged).as_deref(),
            Some("panicked at src/lib.rs:1:1: boom\\nweir: error: forged")
        );
        assert_eq!(panic_message("all fine\n"), None);
    }
}
