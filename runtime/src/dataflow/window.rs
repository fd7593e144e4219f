//! Event-time windows, assigned by the runtime from each record's timestamp.
//!
//! Invariants (Flink's semantics, so users can carry their intuition over):
//! - A window is `[start, end)` in milliseconds; its last timestamp is `end - 1`.
//! - Tumbling windows of size s start at multiples of s; hopping windows of size s and
//!   slide d start at multiples of d, so a record belongs to s / d windows.
//! - A window fires once the watermark reaches its last timestamp (`end - 1 <= wm`).
//! - A window is *late* once `end - 1 + allowed_lateness <= wm`: records for it are
//!   refused, and its state is dropped. Between firing and lateness, a record updates the
//!   window and fires it again (a late firing).

/// A window `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Window {
    pub start: i64,
    pub end: i64,
}

impl Window {
    /// The last event time the window contains.
    pub fn max_timestamp(&self) -> i64 {
        self.end - 1
    }
}

/// How records are assigned to windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowAssigner {
    /// No windows: one accumulator per key for the whole stream.
    Global,
    Tumbling {
        size_ms: i64,
    },
    Hopping {
        size_ms: i64,
        slide_ms: i64,
    },
}

impl WindowAssigner {
    pub fn is_global(&self) -> bool {
        matches!(self, WindowAssigner::Global)
    }

    /// Appends the windows containing `timestamp` to `out` (nothing for `Global`).
    pub fn assign(&self, timestamp: i64, out: &mut Vec<Window>) {
        match *self {
            WindowAssigner::Global => {}
            WindowAssigner::Tumbling { size_ms } => {
                let start = timestamp - timestamp.rem_euclid(size_ms);
                out.push(Window {
                    start,
                    end: start.saturating_add(size_ms),
                });
            }
            WindowAssigner::Hopping { size_ms, slide_ms } => {
                let last_start = timestamp - timestamp.rem_euclid(slide_ms);
                let mut start = last_start - size_ms + slide_ms;
                while start <= last_start {
                    if timestamp < start.saturating_add(size_ms) {
                        out.push(Window {
                            start,
                            end: start.saturating_add(size_ms),
                        });
                    }
                    start += slide_ms;
                }
            }
        }
    }
}

/// Whether `window` is past its allowed lateness at `watermark`.
pub fn is_late(window: Window, allowed_lateness_ms: i64, watermark: i64) -> bool {
    window.max_timestamp().saturating_add(allowed_lateness_ms) <= watermark
}

/// Whether `window` fires (or has fired) at `watermark`.
pub fn has_fired(window: Window, watermark: i64) -> bool {
    window.max_timestamp() <= watermark
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(a: WindowAssigner, ts: i64) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        a.assign(ts, &mut out);
        out.into_iter().map(|w| (w.start, w.end)).collect()
    }

    #[test]
    fn tumbling_assigns_one_window_also_for_negative_times() {
        let t = WindowAssigner::Tumbling { size_ms: 10 };
        assert_eq!(windows(t, 0), [(0, 10)]);
        assert_eq!(windows(t, 9), [(0, 10)]);
        assert_eq!(windows(t, 10), [(10, 20)]);
        assert_eq!(windows(t, -1), [(-10, 0)]);
    }

    #[test]
    fn hopping_assigns_size_over_slide_windows() {
        let h = WindowAssigner::Hopping {
            size_ms: 10,
            slide_ms: 5,
        };
        assert_eq!(windows(h, 7), [(0, 10), (5, 15)]);
        assert_eq!(windows(h, 5), [(0, 10), (5, 15)]);
        assert_eq!(windows(h, 4), [(-5, 5), (0, 10)]);
    }

    #[test]
    fn firing_and_lateness_follow_the_watermark() {
        let w = Window { start: 0, end: 10 };
        assert!(!has_fired(w, 8));
        assert!(has_fired(w, 9));
        assert!(!is_late(w, 5, 13));
        assert!(is_late(w, 5, 14));
        assert!(is_late(w, 0, 9));
    }
}
