//! A task thread's panic becomes a pipeline failure, on one line.
//!
//! Invariants:
//! - Every task runs its body under [`catch`] (see `task`): a panic there unwinds no
//!   further than the task's run wrapper, which reports it as `TaskEvent::Failed` with
//!   the task's name and the panic's message, so the pipeline fails at once, never by a
//!   checkpoint timeout or "every task stopped".
//! - The message [`catch`] returns is one line: control characters in it (a newline in
//!   a panic message) are escaped.
//! - With [`install_hook`] (the `weir` binary installs it), a panic inside [`catch`]
//!   prints nothing of its own: its location joins the message, and it is logged at
//!   debug level (with a backtrace when `RUST_BACKTRACE` asks for one). A panic on any
//!   other thread goes to the hook that was there before, as it always did.

use std::any::Any;
use std::backtrace::{Backtrace, BacktraceStatus};
use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// Whether this thread is inside `catch`.
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    /// Where the last caught panic of this thread happened (set by the hook).
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs the process's panic hook (once; later calls do nothing).
pub fn install_hook() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !CATCHING.with(Cell::get) {
                return previous(info);
            }
            let location = info.location().map(ToString::to_string);
            let backtrace = Backtrace::capture();
            let thread = std::thread::current();
            let thread = thread.name().unwrap_or("unnamed");
            let message = payload_message(info.payload());
            if backtrace.status() == BacktraceStatus::Captured {
                tracing::debug!(thread, ?location, "task panicked: {message}\n{backtrace}");
            } else {
                tracing::debug!(thread, ?location, "task panicked: {message}");
            }
            LOCATION.with(|l| *l.borrow_mut() = location);
        }));
    });
}

/// Runs `f`; a panic in it becomes `Err` with its message (and, with the hook
/// installed, its location), on one line.
pub fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    let outer = CATCHING.with(|c| c.replace(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(outer));
    result.map_err(|payload| {
        let message = payload_message(payload.as_ref());
        let text = match LOCATION.with(|l| l.borrow_mut().take()) {
            Some(at) => format!("{message} (at {at})"),
            None => message,
        };
        one_line(&text)
    })
}

/// The text of a panic payload (`panic!` gives a `&str` or a `String`).
fn payload_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

/// `text` with control characters escaped (`\n` becomes the two characters `\` `n`).
fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_one_line_with_its_location() {
        install_hook();
        let line = line!() + 1;
        let e = catch(|| panic!("first\nsecond {}", 2)).expect_err("panicked");
        let expected = format!("first\\nsecond 2 (at {}:{line}:", file!());
        assert!(e.starts_with(&expected) && e.ends_with(')'), "{e}");
        assert_eq!(catch(|| 7), Ok(7));
        let e = catch(|| std::panic::panic_any(3u8)).expect_err("panicked");
        assert!(e.starts_with("a panic without a message (at "), "{e}");
    }
}
