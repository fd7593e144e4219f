//! `GuestLogBudget`: how much guest text a run passes on to its log, whatever its
//! guests write.
//!
//! Invariants:
//! - One budget per run (one process, one worker), shared by every instance of every
//!   step: a token bucket refilled at `rate` bytes per second and holding at most one
//!   second of it. Every line a guest writes to stdout or stderr and every
//!   `weir:transform/log` message takes its length from it; a line the bucket cannot
//!   pay for is dropped whole (never cut), and counted (`dropped_lines`, exported as
//!   `weir_guest_log_dropped_lines_total`).
//! - The first drop of a run is said once, as one WARN line naming the module and the
//!   setting (`[limits] guest_log_rate`); later drops are only counted.
//! - What a dropped line would have said is not lost for a failed call: the stderr
//!   tail that explains a trap is kept apart (`guest_output`), not from the budget.
//! - Admitting a line never blocks and never fails the guest.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Default guest text per second per run: ample for diagnostics (a few hundred lines a
/// second), a few GB a day at most for a guest that writes without pause.
pub const DEFAULT_GUEST_LOG_RATE: usize = 64 << 10; // 64 KiB/s

/// The shared budget of one run (see the module invariants).
#[derive(Debug, Clone)]
pub struct GuestLogBudget {
    rate: u64,
    bucket: Arc<Mutex<Bucket>>,
    said: Arc<AtomicBool>,
    dropped_lines: Arc<AtomicU64>,
}

#[derive(Debug)]
struct Bucket {
    /// Bytes that may be written now.
    tokens: f64,
    refilled: Instant,
}

impl GuestLogBudget {
    /// A budget of `rate` bytes per second (at least 1), counting dropped lines in
    /// `dropped_lines`.
    pub fn new(rate: usize, dropped_lines: Arc<AtomicU64>) -> Self {
        let rate = rate.max(1) as u64;
        GuestLogBudget {
            rate,
            bucket: Arc::new(Mutex::new(Bucket {
                tokens: rate as f64,
                refilled: Instant::now(),
            })),
            said: Arc::new(AtomicBool::new(false)),
            dropped_lines,
        }
    }

    /// Bytes per second.
    pub fn rate(&self) -> usize {
        self.rate as usize
    }

    /// Lines dropped so far.
    pub fn dropped_lines(&self) -> u64 {
        self.dropped_lines.load(Ordering::Relaxed)
    }

    /// Whether a line of `bytes` from `module` may be written now; if not, it is
    /// counted as dropped (and the first drop said).
    pub(crate) fn admit(&self, module: &str, bytes: usize) -> bool {
        if self.take(bytes as f64) {
            return true;
        }
        self.dropped_lines.fetch_add(1, Ordering::Relaxed);
        if !self.said.swap(true, Ordering::Relaxed) {
            tracing::warn!(target: "weir::guest",
                "{module}: the guests of this run write more than [limits] guest_log_rate = {} bytes a second; lines over it are dropped and counted (weir_guest_log_dropped_lines_total), not shown",
                self.rate);
        }
        false
    }

    fn take(&self, bytes: f64) -> bool {
        // A poisoned lock only means a panic while holding two plain numbers.
        let mut bucket = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let elapsed = now.duration_since(bucket.refilled).as_secs_f64();
        bucket.refilled = now;
        bucket.tokens = (bucket.tokens + elapsed * self.rate as f64).min(self.rate as f64);
        if bucket.tokens >= bytes {
            bucket.tokens -= bytes;
            true
        } else {
            false
        }
    }
}

impl Default for GuestLogBudget {
    fn default() -> Self {
        GuestLogBudget::new(DEFAULT_GUEST_LOG_RATE, Arc::default())
    }
}

impl PartialEq for GuestLogBudget {
    /// Budgets are alike when their rates are: what a `GuestLimits` comparison means.
    fn eq(&self, other: &Self) -> bool {
        self.rate == other.rate
    }
}

impl Eq for GuestLogBudget {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_cut_to_the_rate_and_counted() {
        let dropped = Arc::new(AtomicU64::new(0));
        let budget = GuestLogBudget::new(1000, dropped.clone());
        let start = Instant::now();
        let admitted = (0..10_000).filter(|_| budget.admit("m", 100)).count();
        let seconds = start.elapsed().as_secs_f64();
        // One second's burst, plus what refilled while the loop ran.
        let most = 10 + (seconds * 10.0).ceil() as usize;
        assert!((10..=most).contains(&admitted), "{admitted} admitted");
        assert_eq!(dropped.load(Ordering::Relaxed), 10_000 - admitted as u64);
        assert_eq!(budget.dropped_lines(), 10_000 - admitted as u64);
    }

    #[test]
    fn the_budget_refills_and_is_shared_by_clones() {
        let budget = GuestLogBudget::new(1000, Arc::default());
        let other = budget.clone();
        assert!(budget.admit("m", 1000));
        assert!(!other.admit("m", 500), "a clone spends the same bucket");
        std::thread::sleep(std::time::Duration::from_millis(600));
        assert!(other.admit("m", 500));
        assert!(
            !budget.admit("m", 2000),
            "never more than one second's worth"
        );
    }
}
