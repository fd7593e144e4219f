//! `BlockingRuntime`: runs the object store client's async calls for the synchronous
//! checkpoint storage API.
//!
//! Checkpoint storage is called from plain threads (task threads at a barrier, state
//! uploader threads, the coordinator, recovery on the main thread, `weir checkpoints`),
//! and possibly from a thread that is inside a tokio runtime. `Handle::block_on` and
//! `Runtime::block_on` panic there ("cannot block within a runtime"), and
//! `block_in_place` panics on a current-thread runtime. So this owns a small
//! multi-thread runtime of its own and never enters it from the caller's thread:
//!
//! Invariants:
//! - [`BlockingRuntime::run`] spawns the future onto the owned runtime and waits for its
//!   result on a std channel. That works from any thread, in a runtime or not, and cannot
//!   deadlock on the caller's runtime: the work never needs the caller's threads.
//! - Every connection pool and timer the client makes lives on the owned runtime (all
//!   its futures run there), so they outlive no runtime they depend on.
//! - Dropping it never panics, even inside an async context: the runtime is shut down
//!   in the background (`shutdown_background`), not joined.
//! - A future that panics, or a runtime that is gone, is an error for the caller
//!   ([`Interrupted`]), not a panic on the caller's thread.
//! - Every call has a deadline: [`BlockingRuntime::run`] returns
//!   [`Interrupted::DeadlineExceeded`] once it passes, and the future is dropped (its
//!   requests cancelled) on the owned runtime. A store that accepts connections and
//!   never answers cannot hold a caller (a task thread, teardown) longer than that.

use std::future::Future;
use std::io;
use std::sync::mpsc;
use std::time::Duration;

/// Worker threads of the owned runtime: object store calls are I/O-bound (and signing
/// is cheap); two keep one slow upload from holding up a metadata write.
const WORKER_THREADS: usize = 2;

/// A small tokio runtime owned by one checkpoint storage (and its clones).
#[derive(Debug)]
pub struct BlockingRuntime {
    /// `Some` until dropped.
    runtime: Option<tokio::runtime::Runtime>,
}

/// Why a call gave no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupted {
    /// The owned runtime stopped, or the call's future panicked.
    Stopped,
    /// The call's deadline passed first; its future was dropped.
    DeadlineExceeded(Duration),
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Stopped => f.write_str("the object store client stopped before answering"),
            Self::DeadlineExceeded(deadline) => {
                write!(
                    f,
                    "no answer within {}s (the call's deadline)",
                    deadline.as_secs()
                )
            }
        }
    }
}

impl BlockingRuntime {
    /// Starts the runtime (threads named `weir-object-store`).
    pub fn new() -> io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKER_THREADS)
            .thread_name("weir-object-store")
            .enable_all()
            .build()?;
        Ok(Self {
            runtime: Some(runtime),
        })
    }

    /// Runs `future` on the owned runtime and blocks the calling thread until it is done,
    /// or until `deadline` has passed (then the future is dropped, there).
    pub fn run<F>(&self, future: F, deadline: Duration) -> Result<F::Output, Interrupted>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let runtime = self.runtime.as_ref().ok_or(Interrupted::Stopped)?;
        let (tx, rx) = mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(tokio::time::timeout(deadline, future).await);
        });
        // A panicking future drops `tx` unsent: recv fails instead of hanging.
        match rx.recv() {
            Ok(Ok(output)) => Ok(output),
            Ok(Err(_elapsed)) => Err(Interrupted::DeadlineExceeded(deadline)),
            Err(_) => Err(Interrupted::Stopped),
        }
    }
}

impl Drop for BlockingRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(60);

    #[test]
    fn runs_from_a_plain_thread_and_from_inside_another_runtime() {
        let blocking = BlockingRuntime::new().expect("runtime");
        assert_eq!(blocking.run(async { 1 + 1 }, LONG), Ok(2));

        // Inside a current-thread runtime, where block_on and block_in_place panic.
        let outer = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("outer");
        let got = outer.block_on(async {
            let sleep = async {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                7
            };
            let got = blocking.run(sleep, LONG);
            // Dropping one inside an async context must not panic either.
            drop(BlockingRuntime::new().expect("runtime"));
            got
        });
        assert_eq!(got, Ok(7));
    }

    #[test]
    fn a_panicking_future_is_an_error_not_a_panic_here() {
        let blocking = BlockingRuntime::new().expect("runtime");
        let got = blocking.run(
            async {
                if true {
                    panic!("deliberate, in a test");
                }
            },
            LONG,
        );
        assert_eq!(got, Err(Interrupted::Stopped));
        assert_eq!(blocking.run(async { 3 }, LONG), Ok(3));
    }

    #[test]
    fn a_call_that_never_answers_ends_at_its_deadline() {
        let blocking = BlockingRuntime::new().expect("runtime");
        let deadline = Duration::from_millis(200);
        let started = std::time::Instant::now();
        let got = blocking.run(std::future::pending::<()>(), deadline);
        assert_eq!(got, Err(Interrupted::DeadlineExceeded(deadline)));
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(blocking.run(async { 4 }, LONG), Ok(4));
    }
}
