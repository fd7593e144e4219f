//! `Periodic`: a named background thread that runs a task once at start and then once
//! every period, until the task ends it or its owner drops it.
//!
//! Invariant: dropping a `Periodic` wakes its thread at once, runs its `on_stop` there
//! and joins it. The thread waits on a channel, not in `sleep`, so a process never
//! waits out a period at exit: a watchdog that looks every 200 ms or a status file
//! written every 500 ms adds nothing to the end of a `weir run` (before, every run
//! ended up to one period late, and every benchmark's wall time with it).

use std::ops::ControlFlow;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// A periodic task's thread; stops it when dropped (see the module doc).
#[derive(Debug)]
pub struct Periodic {
    /// Dropped to stop the thread: its wait ends with `Disconnected`.
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Periodic {
    /// Starts a thread named `name` that calls `tick` at once and then every `period`
    /// until `tick` breaks (the thread ends, `on_stop` is not called) or the
    /// `Periodic` is dropped (`on_stop` runs on the thread, then it ends).
    pub fn start(
        name: &str,
        period: Duration,
        mut tick: impl FnMut() -> ControlFlow<()> + Send + 'static,
        on_stop: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<Periodic> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                loop {
                    if tick().is_break() {
                        return;
                    }
                    match stopped.recv_timeout(period) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                on_stop();
            })?;
        Ok(Periodic {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A `Periodic` counting its ticks and its `on_stop` calls; its `n`th tick breaks
    /// when `break_at` is `Some(n)`.
    fn counting(
        period: Duration,
        break_at: Option<u32>,
    ) -> (Periodic, Arc<AtomicU32>, Arc<AtomicU32>) {
        let ticks = Arc::new(AtomicU32::new(0));
        let stops = Arc::new(AtomicU32::new(0));
        let (t, s) = (ticks.clone(), stops.clone());
        let tick = move || {
            let n = t.fetch_add(1, Ordering::SeqCst) + 1;
            if break_at == Some(n) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        };
        let on_stop = move || {
            s.fetch_add(1, Ordering::SeqCst);
        };
        let periodic = Periodic::start("test-periodic", period, tick, on_stop).expect("start");
        (periodic, ticks, stops)
    }

    /// Catches: a drop that waits out the period (a `sleep` in the loop), which would
    /// hold this test for an hour instead of returning; `on_stop` not run, or run twice.
    #[test]
    fn drop_stops_the_thread_at_once_and_runs_on_stop() {
        let (periodic, ticks, stops) = counting(Duration::from_secs(3600), None);
        // The first tick runs at start: wait for it, so the drop lands in the wait.
        while ticks.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let (done, dropped) = mpsc::channel();
        std::thread::spawn(move || {
            drop(periodic);
            let _ = done.send(());
        });
        // A minute is far past any scheduling delay and far short of the period.
        dropped
            .recv_timeout(Duration::from_secs(60))
            .expect("dropping a Periodic waited out its period");
        assert_eq!(ticks.load(Ordering::SeqCst), 1);
        assert_eq!(stops.load(Ordering::SeqCst), 1);
    }

    /// Catches: a tick that breaks not ending the thread, or `on_stop` run after it.
    #[test]
    fn a_tick_that_breaks_ends_the_thread_without_on_stop() {
        let (periodic, ticks, stops) = counting(Duration::from_millis(1), Some(3));
        // The third tick breaks; the thread ends with it, so the drop finds it ended.
        while ticks.load(Ordering::SeqCst) < 3 {
            std::thread::yield_now();
        }
        drop(periodic);
        assert_eq!(ticks.load(Ordering::SeqCst), 3);
        assert_eq!(stops.load(Ordering::SeqCst), 0);
    }
}
