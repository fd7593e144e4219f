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

#[derive(Debug, Clone, Copy)]
struct Pause {
    /// When the watchdog ran again, on the monotonic clock and in Unix milliseconds.
    ended: Instant,
    ended_unix_ms: u64,
    lasted: Duration,
}

#[derive(Debug, Default)]
pub struct Pauses {
    list: Vec<Pause>,
}

impl Pauses {
    /// Notes a look at `now` (`now_unix_ms`) that was planned for `planned`: one that
    /// came more than [`PAUSE_AFTER`] late ends a pause as long as its delay.
    pub fn look(&mut self, planned: Instant, now: Instant, now_unix_ms: u64) {
        let late = now.saturating_duration_since(planned);
        if late > PAUSE_AFTER {
            self.list.push(Pause {
                ended: now,
                ended_unix_ms: now_unix_ms,
                lasted: late,
            });
        }
    }

    /// How long the process was paused since `since`.
    pub fn since(&self, since: Instant) -> Duration {
        self.lasted(|p| p.ended > since)
    }

    /// How long the process was paused since `since_unix_ms`.
    pub fn since_unix_ms(&self, since_unix_ms: u64) -> Duration {
        self.lasted(|p| p.ended_unix_ms > since_unix_ms)
    }

    /// How long the pauses that `counted` picks lasted, together.
    fn lasted(&self, counted: impl Fn(&Pause) -> bool) -> Duration {
        self.list
            .iter()
            .filter(|p| counted(p))
            .map(|p| p.lasted)
            .sum()
    }

    /// Forgets the pauses that ended before both `oldest` (the oldest wait in progress)
    /// and `progress_unix_ms` (the pipeline's last progress): nothing can be excused by
    /// them any more.
    pub fn forget_before(&mut self, oldest: Option<Instant>, progress_unix_ms: u64) {
        self.list
            .retain(|p| oldest.is_some_and(|o| p.ended > o) || p.ended_unix_ms > progress_unix_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS0: u64 = 1_000_000;

    fn ms(d: Duration) -> u64 {
        MS0 + d.as_millis() as u64
    }

    #[test]
    fn a_late_look_is_a_pause_only_past_the_allowance() {
        let t0 = Instant::now();
        let mut pauses = Pauses::default();
        let slightly = t0 + PAUSE_AFTER;
        pauses.look(t0, slightly, ms(PAUSE_AFTER));
        assert_eq!(pauses.since(t0), Duration::ZERO, "a scheduling delay");
        let stopped = slightly + Duration::from_secs(25);
        pauses.look(slightly, stopped, ms(stopped - t0));
        assert_eq!(pauses.since(t0), Duration::from_secs(25));
        assert_eq!(pauses.since_unix_ms(MS0), Duration::from_secs(25));
    }

    /// Two pauses seen from `t0`: 5 s ending at `first`, then 3 s ending at `second`.
    fn two_pauses() -> (Pauses, Instant, Instant, Instant) {
        let t0 = Instant::now();
        let mut pauses = Pauses::default();
        let first = t0 + Duration::from_secs(5);
        pauses.look(t0, first, ms(first - t0));
        let second = first + Duration::from_secs(3);
        pauses.look(first, second, ms(second - t0));
        (pauses, t0, first, second)
    }

    #[test]
    fn a_pause_is_charged_only_to_what_was_in_progress_when_it_ended() {
        let (pauses, t0, first, second) = two_pauses();
        assert_eq!(pauses.since(t0), Duration::from_secs(8), "both");
        assert_eq!(pauses.since(first), Duration::from_secs(3), "the second");
        assert_eq!(pauses.since(second), Duration::ZERO, "neither");
        assert_eq!(pauses.since_unix_ms(ms(first - t0)), Duration::from_secs(3));
    }

    #[test]
    fn pauses_nothing_in_progress_can_use_are_forgotten() {
        let (mut pauses, t0, first, second) = two_pauses();
        // A wait that began before the first pause keeps both.
        pauses.forget_before(Some(t0), ms(second - t0));
        assert_eq!(pauses.since(t0), Duration::from_secs(8));
        // Progress before the second pause, and no wait, keeps only the second.
        pauses.forget_before(None, ms(first - t0));
        assert_eq!(pauses.since(t0), Duration::from_secs(3));
        pauses.forget_before(None, ms(second - t0));
        assert_eq!(pauses.since(t0), Duration::ZERO);
    }
}
