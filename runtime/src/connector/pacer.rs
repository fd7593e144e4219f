//! `Pacer`: holds one source subtask to its share of a configured rate.
//!
//! Invariants: a subtask of a source paced at `rate` records/s over `parallelism`
//! subtasks may have released `1 + elapsed * rate / parallelism` records at any moment
//! since it was opened (one record is due at open, then one every 1/rate seconds), and
//! never more; a rate of 0 is unthrottled. Ahead of schedule, the source answers
//! `SourcePoll::Idle` rather than sleeping, so barriers are never held up by pacing.
//! The count saturates: any rate the spec accepts (up to `u64::MAX`) is safe.

use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Pacer {
    /// Records per second for this subtask; 0 = unthrottled.
    rate: f64,
    opened: Instant,
    released: u64,
}

impl Pacer {
    /// A pacer for one of `parallelism` subtasks sharing `rate` records/s (0: none).
    pub fn new(rate: u64, parallelism: usize) -> Self {
        Self {
            rate: rate as f64 / parallelism.max(1) as f64,
            opened: Instant::now(),
            released: 0,
        }
    }

    /// How many of `max` records may be released now; 0 means ahead of schedule.
    pub fn allowance(&self, max: usize) -> usize {
        if self.rate <= 0.0 {
            return max;
        }
        let allowed = self
            .due(self.opened.elapsed())
            .saturating_sub(self.released);
        max.min(usize::try_from(allowed).unwrap_or(usize::MAX))
    }

    /// Records due `elapsed` after opening (`as` saturates a float past `u64::MAX`).
    fn due(&self, elapsed: Duration) -> u64 {
        ((elapsed.as_secs_f64() * self.rate) as u64).saturating_add(1)
    }

    /// Counts `n` records as released.
    pub fn released(&mut self, n: usize) {
        self.released = self.released.saturating_add(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unthrottled_allows_everything() {
        assert_eq!(Pacer::new(0, 2).allowance(1024), 1024);
    }

    #[test]
    fn the_largest_rate_saturates_instead_of_overflowing() {
        let mut pacer = Pacer::new(u64::MAX, 1);
        assert_eq!(pacer.due(Duration::from_secs(2)), u64::MAX);
        pacer.released(usize::MAX);
        pacer.released(usize::MAX);
        assert_eq!(pacer.allowance(8), 0);
    }

    #[test]
    fn paced_allows_one_at_open_then_nothing_ahead_of_schedule() {
        let mut pacer = Pacer::new(1, 1);
        assert_eq!(pacer.allowance(1024), 1);
        pacer.released(1);
        assert_eq!(pacer.allowance(1024), 0);
    }
}
