//! `EpochTicker`: the thread that advances wasmtime's epoch, so CPU deadlines fire.
//!
//! Invariants:
//! - While the ticker lives, its engines' epochs (one engine per code tier) advance by
//!   one every [`EPOCH_TICK`].
//!   A store whose deadline is set to `n` ticks therefore traps after between
//!   `(n - 1) * EPOCH_TICK` and `n * EPOCH_TICK` of guest execution; callers add one tick
//!   to their budget so a call gets at least its full timeout and at most one tick more.
//! - The ticker is shared (`Arc`) by the engine, its modules and their instances, so it
//!   runs as long as anything that can call a guest is alive.
//! - Dropping the ticker stops the thread promptly (it waits on a channel, not a bare
//!   sleep) and joins it: no ticker thread outlives the last engine, module or instance.
//! - [`EpochClock`] counts the same ticks (incremented right after the engine's epoch),
//!   so host code can tell how far a store is from its epoch deadline without asking
//!   wasmtime (which does not expose the engine's epoch) or reading the wall clock.
//! - "Epoch" here means only wasmtime's interruption counter (see CONVENTIONS.md);
//!   checkpoints are `CheckpointId`s elsewhere.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the epoch advances: the granularity of every CPU deadline.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The number of ticks since the ticker started: the engine's epoch, readable by host
/// code. Cheap to clone and to read (one relaxed atomic load).
#[derive(Debug, Clone, Default)]
pub(crate) struct EpochClock(Arc<AtomicU64>);

impl EpochClock {
    /// Ticks so far.
    pub(crate) fn now(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn tick(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Owns the ticker thread; stops and joins it on drop.
#[derive(Debug)]
pub(crate) struct EpochTicker {
    clock: EpochClock,
    /// Dropping the sender wakes the thread and tells it to stop.
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub(crate) fn start(engines: Vec<wasmtime::Engine>) -> std::io::Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let clock = EpochClock::default();
        let ticks = clock.clone();
        let thread = std::thread::Builder::new()
            .name("weir-epoch-ticker".into())
            .spawn(move || {
                loop {
                    match stopped.recv_timeout(EPOCH_TICK) {
                        Err(RecvTimeoutError::Timeout) => {
                            for engine in &engines {
                                engine.increment_epoch();
                            }
                            ticks.tick();
                        }
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })?;
        Ok(Self {
            clock,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The clock this ticker advances.
    pub(crate) fn clock(&self) -> &EpochClock {
        &self.clock
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            // The loop body cannot panic; a join error would only mean it did anyway, and
            // there is nothing useful to do with that during drop.
            let _ = thread.join();
        }
    }
}
