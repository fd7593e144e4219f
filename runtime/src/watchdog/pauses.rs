//! The times this process did not run, as the watchdog saw them: the watchdog looks
//! every `LOOK_EVERY`, so a look that comes much later than that means that nothing of
//! the process ran in between (SIGSTOP, a frozen virtual machine, a host that starved
//! it). The clock went on, but no wait could have returned and no checkpoint could have
//! completed meanwhile: the watchdog does not count that time against them.
//!
//! Invariants:
//! - A look that comes at most `PAUSE_AFTER` late is not a pause: ordinary scheduling
//!   delays on a loaded machine never excuse a wait.
//! - A pause is charged to what was in progress when it ended: a wait registered since,
//!   or progress made since, owes it nothing.
//! - The list holds only the pauses something still in progress may be excused by.

use std::time::{Duration, Instant};

/// How much later than planned a look must come to be taken for a pause.
pub const PAUSE_AFTER: Duration = Duration::from_secs(1);

/// The pause that a wake planned for `planned` and come at `now` ended: its lateness,
/// if over [`PAUSE_AFTER`] (less is ordinary scheduling).
pub fn pause_in(planned: Instant, now: Instant) -> Option<Duration> {
    let late = now.saturating_duration_since(planned);
    (late > PAUSE_AFTER).then_some(late)
}

#[derive(Debug, Clone, Copy)]
struct Pause {
    /// When the watchdog ran again.
    ended: Instant,
    lasted: Duration,
}

#[derive(Debug, Default)]
pub struct Pauses {
    list: Vec<Pause>,
}

impl Pauses {
    /// Notes a look at `now` that was planned for `planned`: one that came more than
    /// [`PAUSE_AFTER`] late ends a pause as long as its delay.
    pub fn look(&mut self, planned: Instant, now: Instant) {
        if let Some(lasted) = pause_in(planned, now) {
            self.list.push(Pause { ended: now, lasted });
        }
    }

    /// How long the process was paused since `since`.
    pub fn since(&self, since: Instant) -> Duration {
        self.list
            .iter()
            .filter(|p| p.ended > since)
            .map(|p| p.lasted)
            .sum()
    }

    /// Forgets the pauses that ended before `keep_after` (the oldest of the waits in
    /// progress and the pipeline's last progress): nothing can be excused by them any
    /// more.
    pub fn forget_before(&mut self, keep_after: Instant) {
        self.list.retain(|p| p.ended > keep_after);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_look_is_a_pause_only_past_the_allowance() {
        let t0 = Instant::now();
        let mut pauses = Pauses::default();
        let slightly = t0 + PAUSE_AFTER;
        pauses.look(t0, slightly);
        assert_eq!(pauses.since(t0), Duration::ZERO, "a scheduling delay");
        let stopped = slightly + Duration::from_secs(25);
        pauses.look(slightly, stopped);
        assert_eq!(pauses.since(t0), Duration::from_secs(25));
    }

    /// Two pauses seen from `t0`: 5 s ending at `first`, then 3 s ending at `second`.
    fn two_pauses() -> (Pauses, Instant, Instant, Instant) {
        let t0 = Instant::now();
        let mut pauses = Pauses::default();
        let first = t0 + Duration::from_secs(5);
        pauses.look(t0, first);
        let second = first + Duration::from_secs(3);
        pauses.look(first, second);
        (pauses, t0, first, second)
    }

    #[test]
    fn a_pause_is_charged_only_to_what_was_in_progress_when_it_ended() {
        let (pauses, t0, first, second) = two_pauses();
        assert_eq!(pauses.since(t0), Duration::from_secs(8), "both");
        assert_eq!(pauses.since(first), Duration::from_secs(3), "the second");
        assert_eq!(pauses.since(second), Duration::ZERO, "neither");
    }

    #[test]
    fn pauses_nothing_in_progress_can_use_are_forgotten() {
        let (mut pauses, t0, first, second) = two_pauses();
        // A wait that began before the first pause keeps both.
        pauses.forget_before(t0);
        assert_eq!(pauses.since(t0), Duration::from_secs(8));
        // Progress before the second pause, and no wait, keeps only the second.
        pauses.forget_before(first);
        assert_eq!(pauses.since(t0), Duration::from_secs(3));
        pauses.forget_before(second);
        assert_eq!(pauses.since(t0), Duration::ZERO);
    }
}
