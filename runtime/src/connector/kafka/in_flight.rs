//! `InFlight`: the records one sink subtask has handed to a producer and the broker has
//! not acknowledged yet.
//!
//! Why: checkpoint n's records go to producer `n mod 2`, n + 1's to the other one. Two
//! producers batch and retry independently, so a record of n + 1 sent while records of
//! n are still in flight can be appended to a partition before them: a key's update
//! would go backwards in the log, and a compacted topic would keep the stale one. A sink
//! subtask therefore waits, before its first record of n + 1, until `InFlight` is zero:
//! then every record it sent for n is in the log (each producer is idempotent, so its
//! own records keep their order). Records of different subtasks carry different keys
//! (the key-by upstream), so per-subtask order is per-key order.
//!
//! Invariant: `add` is called before the records are handed to librdkafka, and the
//! producer's delivery callback calls `done` once per record, success or failure.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub struct InFlight {
    count: AtomicU64,
    lock: Mutex<()>,
    drained: Condvar,
}

impl InFlight {
    /// `n` records are about to be sent.
    pub fn add(&self, n: u64) {
        self.count.fetch_add(n, Ordering::SeqCst);
    }

    /// One record was delivered (or failed for good).
    pub fn done(&self) {
        if self.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            // Taking the lock orders this notify after a waiter's check of the count.
            let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.drained.notify_all();
        }
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// Waits until no record is in flight; `false` if `timeout` passed first.
    pub fn wait_drained(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        while self.count() > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            guard = self
                .drained
                .wait_timeout(guard, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn waits_for_the_last_acknowledgement_and_times_out_without_it() {
        let in_flight = Arc::new(InFlight::default());
        assert!(in_flight.wait_drained(Duration::ZERO), "nothing sent");
        in_flight.add(3);
        assert!(!in_flight.wait_drained(Duration::from_millis(20)));
        let acks = {
            let in_flight = in_flight.clone();
            std::thread::spawn(move || {
                for _ in 0..3 {
                    std::thread::sleep(Duration::from_millis(5));
                    in_flight.done();
                }
            })
        };
        assert!(in_flight.wait_drained(Duration::from_secs(30)));
        assert_eq!(in_flight.count(), 0);
        acks.join().expect("acks");
    }
}
