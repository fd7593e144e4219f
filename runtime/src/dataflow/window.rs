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
//! - No timestamp overflows this arithmetic: bounds are computed in `i128` and clamped,
//!   so near `i64`'s ends a window is cut short (`[i64::MIN, end)`,
//!   `[start, MAX_WINDOW_END)`) but still holds its records, and every window assigned
//!   to a record has a distinct end. Window ends stop at [`MAX_WINDOW_END`] because
//!   state keys use the end `i64::MAX` for "no window": a record at or after
//!   `MAX_WINDOW_END - 1` counts in the window ending at `MAX_WINDOW_END`. Sources
//!   outside the spec's control (Kafka, JSON lines) may carry any `i64` timestamp.

use crate::record::Window;
use crate::state::StateKey;

/// The latest end a window can have: one before the end state keys reserve for the
/// unwindowed (global) accumulator.
pub const MAX_WINDOW_END: i64 = StateKey::GLOBAL_WINDOW_END - 1;

/// Most windows one record may belong to (a hopping window's size / slide). A record is
/// grouped, copied into the guest's input and folded once per window it belongs to, so
/// this factor multiplies the host memory and guest time of every batch: at 1,000 a
/// default batch (1,024 records) makes about a million (record, window) pairs.
/// (`size = "1h", slide = "1ms"` would make 3.6 million per record.)
pub const MAX_WINDOWS_PER_RECORD: u128 = 1_000;

/// `[start, end)` computed in `i128`, clamped to `i64::MIN..=MAX_WINDOW_END`.
fn clamped(start: i128, end: i128) -> Window {
    let range = i128::from(i64::MIN)..=i128::from(MAX_WINDOW_END);
    let clamp =
        |t: i128| i64::try_from(t.clamp(*range.start(), *range.end())).unwrap_or(MAX_WINDOW_END);
    Window {
        start: clamp(start),
        end: clamp(end),
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

    /// Appends the windows containing `timestamp` to `out` (nothing for `Global`), in
    /// increasing order; size / slide of them for a hopping window (fewer only where
    /// clamping at `MAX_WINDOW_END` merges ends). A timestamp past the last one a
    /// window can hold counts as that one. Sizes and slides below 1 ms count as 1 ms.
    pub fn assign(&self, timestamp: i64, out: &mut Vec<Window>) {
        let ts = i128::from(timestamp.min(MAX_WINDOW_END - 1));
        match *self {
            WindowAssigner::Global => {}
            WindowAssigner::Tumbling { size_ms } => {
                let size = i128::from(size_ms.max(1));
                let start = ts - ts.rem_euclid(size);
                out.push(clamped(start, start + size));
            }
            WindowAssigner::Hopping { size_ms, slide_ms } => {
                let size = i128::from(size_ms.max(1));
                let slide = i128::from(slide_ms.max(1));
                let last_start = ts - ts.rem_euclid(slide);
                // The first start whose window still contains ts: > ts - size.
                let mut start = last_start - size + slide;
                let first = out.len();
                while start <= last_start {
                    let w = clamped(start, start + size);
                    if out.len() == first || out.last().is_some_and(|prev| prev.end != w.end) {
                        out.push(w);
                    }
                    start += slide;
                }
            }
        }
    }

    /// The window ending at `end` as `assign` hands it out (state keeps only the end):
    /// `[end - size, end)`, clamped at `i64::MIN`; the window cut short at
    /// `MAX_WINDOW_END` starts at the earliest start `assign` gave it. `Global`: the
    /// empty window `[end, end)`.
    pub fn window_ending_at(&self, end: i64) -> Window {
        let (size, slide) = match *self {
            WindowAssigner::Global => return Window { start: end, end },
            WindowAssigner::Tumbling { size_ms } => (size_ms, size_ms),
            WindowAssigner::Hopping { size_ms, slide_ms } => (size_ms, slide_ms),
        };
        let size = i128::from(size.max(1));
        let slide = i128::from(slide.max(1));
        let end = i128::from(end);
        let mut start = end - size;
        if end >= i128::from(MAX_WINDOW_END) {
            // The earliest start (a multiple of the slide) whose window reaches the end.
            start += (slide - start.rem_euclid(slide)) % slide;
        }
        clamped(start, end)
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
    fn windows_at_the_ends_of_event_time_are_cut_short_not_overflowed() {
        let t = WindowAssigner::Tumbling { size_ms: 10 };
        assert_eq!(windows(t, i64::MIN), [(i64::MIN, i64::MIN + 8)]);
        // i64::MAX - 1 and i64::MAX count as i64::MAX - 2, the last time a window holds.
        assert_eq!(windows(t, i64::MAX), [(i64::MAX - 7, MAX_WINDOW_END)]);
        assert_eq!(windows(t, i64::MAX - 1), [(i64::MAX - 7, MAX_WINDOW_END)]);
        let h = WindowAssigner::Hopping {
            size_ms: 10,
            slide_ms: 5,
        };
        assert_eq!(
            windows(h, i64::MIN),
            [(i64::MIN, i64::MIN + 3), (i64::MIN, i64::MIN + 8)]
        );
        // Both windows would end past MAX_WINDOW_END: one window, not the same end twice.
        assert_eq!(windows(h, i64::MAX), [(i64::MAX - 7, MAX_WINDOW_END)]);
        // State keeps the end only; the start comes back the same.
        let last = Window {
            start: i64::MAX - 7,
            end: MAX_WINDOW_END,
        };
        assert_eq!(t.window_ending_at(MAX_WINDOW_END), last);
        assert_eq!(h.window_ending_at(MAX_WINDOW_END), last);
        assert_eq!(
            t.window_ending_at(i64::MIN + 8),
            Window {
                start: i64::MIN,
                end: i64::MIN + 8
            }
        );
        let w = Window {
            start: i64::MIN,
            end: i64::MIN,
        };
        assert_eq!(w.max_timestamp(), i64::MIN);
        assert!(has_fired(w, i64::MIN) && !is_late(w, i64::MAX, i64::MIN));
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

    mod properties {
        use proptest::prelude::*;

        use super::super::*;
        use super::MAX_WINDOWS_PER_RECORD;
        use crate::record::message::Watermark;

        /// Checks what every assigned window promises, whatever the arithmetic's edges:
        /// it contains the record (up to the clamp at `MAX_WINDOW_END`), ends are distinct and
        /// increasing, and it fires at the end of input whatever the lateness.
        fn check(assigned: &[Window], ts: i64, size: i64, slide: i64, lateness: i64, wm: i64) {
            for w in assigned {
                assert!(
                    w.start <= ts && (ts < w.end || w.end == MAX_WINDOW_END),
                    "{w:?} {ts}"
                );
                assert!(w.end - w.start <= size, "{w:?} longer than {size}");
                assert!(w.end <= MAX_WINDOW_END);
                if w.start != i64::MIN && w.end != MAX_WINDOW_END {
                    assert_eq!(w.end - w.start, size);
                    assert_eq!(w.start.rem_euclid(slide), 0, "{w:?} not aligned to {slide}");
                }
                assert!(has_fired(*w, Watermark::END.0));
                assert!(is_late(*w, lateness, Watermark::END.0));
                let _ = (is_late(*w, lateness, wm), has_fired(*w, wm));
            }
            assert!(
                assigned.windows(2).all(|p| p[0].end < p[1].end),
                "{assigned:?}"
            );
        }

        proptest! {
            #[test]
            fn tumbling_windows_hold_any_timestamp(
                ts in any::<i64>(),
                size in prop_oneof![1i64..=100_000, 1i64..=i64::MAX],
                lateness in 0i64..=i64::MAX,
                wm in any::<i64>(),
            ) {
                let mut out = Vec::new();
                WindowAssigner::Tumbling { size_ms: size }.assign(ts, &mut out);
                prop_assert_eq!(out.len(), 1);
                check(&out, ts, size, size, lateness, wm);
                let assigner = WindowAssigner::Tumbling { size_ms: size };
                prop_assert_eq!(assigner.window_ending_at(out[0].end), out[0]);
            }

            #[test]
            fn hopping_windows_hold_any_timestamp(
                ts in prop_oneof![any::<i64>(), Just(i64::MIN), Just(i64::MAX), -1000i64..1000],
                slide in prop_oneof![1i64..=10_000, 1i64..=i64::MAX / 1_000],
                per_record in 1i64..=(MAX_WINDOWS_PER_RECORD as i64),
                lateness in 0i64..=i64::MAX,
                wm in any::<i64>(),
            ) {
                let size = slide * per_record;
                let mut out = Vec::new();
                WindowAssigner::Hopping { size_ms: size, slide_ms: slide }.assign(ts, &mut out);
                let clamped = out.last().is_some_and(|w| w.end == MAX_WINDOW_END);
                prop_assert!(
                    out.len() as i64 == per_record || (clamped && !out.is_empty()),
                    "{} windows for {} per record", out.len(), per_record
                );
                check(&out, ts, size, slide, lateness, wm);
                let assigner = WindowAssigner::Hopping { size_ms: size, slide_ms: slide };
                for w in &out {
                    prop_assert_eq!(assigner.window_ending_at(w.end), *w);
                }
            }
        }
    }
}
