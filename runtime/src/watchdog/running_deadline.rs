//! `RunningDeadline`: a deadline on the time this process ran, for a waiter that looks
//! at it in steps. A waiter that wakes more than [`PAUSE_AFTER`](super::PAUSE_AFTER) later than it planned
//! was not run meanwhile (SIGSTOP, a frozen VM, a starved host): nothing it waits for
//! could have happened on this side, so that time is added to the deadline, and a wait
//! a pause cut through gets its bound anew, as the guarantees promise.
//!
//! Invariants:
//! - The deadline only moves later, and only by the lateness of a wake the waiter
//!   planned ([`RunningDeadline::wait_for`] plans it, [`RunningDeadline::woke`] notes it).
//! - A lateness of at most [`PAUSE_AFTER`](super::PAUSE_AFTER) is ordinary scheduling and moves nothing.
//! - A waiter that sleeps at most [`STEP`] at a time sees every pause longer than that.

use std::time::{Duration, Instant};

use super::pauses::pause_in;

/// The longest a waiter sleeps between two looks.
pub const STEP: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, Copy)]
pub struct RunningDeadline {
    at: Instant,
    /// When the waiter planned to wake, while it sleeps.
    planned: Option<Instant>,
}

impl RunningDeadline {
    pub fn new(at: Instant) -> Self {
        RunningDeadline { at, planned: None }
    }

    /// The deadline as it stands (moved by the pauses seen so far).
    pub fn at(&self) -> Instant {
        self.at
    }

    /// How long to sleep from `now`: until the deadline, at most [`STEP`] and at most
    /// `at_most`; the wake is planned for then.
    pub fn wait_for(&mut self, now: Instant, at_most: Duration) -> Duration {
        let wait = self
            .at
            .saturating_duration_since(now)
            .min(STEP)
            .min(at_most);
        self.planned = Some(now + wait);
        wait
    }

    /// Notes that the waiter woke at `now`: one that came over [`PAUSE_AFTER`](super::PAUSE_AFTER) after
    /// the planned wake moves the deadline by its lateness.
    pub fn woke(&mut self, now: Instant) {
        if let Some(pause) = self
            .planned
            .take()
            .and_then(|planned| pause_in(planned, now))
        {
            self.at += pause;
        }
    }

    /// Sleeps until the deadline, at most [`STEP`] and at most `at_most`, with nothing
    /// to wake it early; notes the wake.
    pub fn sleep(&mut self, at_most: Duration) {
        std::thread::sleep(self.wait_for(Instant::now(), at_most));
        self.woke(Instant::now());
    }

    pub fn passed(&self, now: Instant) -> bool {
        now >= self.at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a pause the deadline stays where it was; a wake 25 s late (the process
    /// stopped) moves it by 25 s; one a second late (scheduling) moves nothing.
    #[test]
    fn a_pause_moves_the_deadline_by_its_length_and_scheduling_does_not() {
        let t0 = Instant::now();
        let mut deadline = RunningDeadline::new(t0 + Duration::from_secs(2));
        assert_eq!(deadline.wait_for(t0, Duration::MAX), STEP);
        deadline.woke(t0 + STEP);
        assert_eq!(deadline.at(), t0 + Duration::from_secs(2));
        assert!(!deadline.passed(t0 + STEP));

        let planned = t0 + STEP + STEP;
        assert_eq!(deadline.wait_for(t0 + STEP, Duration::MAX), STEP);
        deadline.woke(planned + Duration::from_secs(25));
        assert_eq!(deadline.at(), t0 + Duration::from_secs(27));
        assert!(!deadline.passed(planned + Duration::from_secs(25)));

        deadline.wait_for(t0 + Duration::from_secs(26), Duration::from_millis(50));
        deadline.woke(t0 + Duration::from_secs(26) + Duration::from_millis(1_050));
        assert_eq!(deadline.at(), t0 + Duration::from_secs(27));
        assert!(deadline.passed(t0 + Duration::from_secs(27)));
    }

    /// A wake by an event, before the planned one, moves nothing; nor does a `woke`
    /// without a planned wake.
    #[test]
    fn an_early_or_unplanned_wake_moves_nothing() {
        let t0 = Instant::now();
        let mut deadline = RunningDeadline::new(t0 + Duration::from_secs(1));
        deadline.wait_for(t0, Duration::MAX);
        deadline.woke(t0 + Duration::from_millis(10));
        deadline.woke(t0 + Duration::from_secs(30));
        assert_eq!(deadline.at(), t0 + Duration::from_secs(1));
        assert_eq!(
            deadline.wait_for(t0 + Duration::from_secs(2), Duration::MAX),
            Duration::ZERO
        );
    }
}
