//! `Window`: an event-time window `[start, end)` in milliseconds since the Unix epoch,
//! as the runtime assigns it and as a guest aggregate receives it.
//!
//! Invariant: `start < end` for every window the runtime assigns (see
//! `dataflow/window.rs` for how, and how the ends of `i64` are clamped).

/// A window `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Window {
    pub start: i64,
    pub end: i64,
}

impl Window {
    /// The last event time the window contains.
    pub fn max_timestamp(&self) -> i64 {
        self.end.saturating_sub(1)
    }
}
