//! Watermark generation for a source task: Flink's bounded out-of-orderness.
//!
//! Invariants:
//! - The watermark emitted after a batch is `frontier - out_of_orderness - 1`, where the
//!   frontier is the source's own event-time frontier when it tracks one (per partition,
//!   for Kafka; it may advance without a record), else the largest event time seen so
//!   far. No record at or below it is expected any more.
//! - Watermarks never go back: a watermark is emitted only when it is strictly greater
//!   than the last one emitted (the first must pass `Watermark::START`).
//! - At end of input the watermark is `Watermark::END`, emitted once; nothing follows it.
//! - Arithmetic saturates at the `i64` ends: neither `i64::MIN`/`i64::MAX` timestamps
//!   nor an out-of-orderness past `i64::MAX` milliseconds overflow.
use std::time::Duration;

use crate::record::message::Watermark;

/// Decides which watermark, if any, a source task emits after each batch and at the
/// end of its input.
#[derive(Debug, Clone)]
pub struct WatermarkGenerator {
    /// Bounded out-of-orderness in milliseconds (saturated to `i64::MAX`).
    out_of_orderness_ms: i64,
    /// The largest event time seen in any batch (`i64::MIN` before the first record).
    max_timestamp: i64,
    /// The last watermark emitted (`Watermark::START` before the first).
    last: Watermark,
}

impl WatermarkGenerator {
    pub fn new(out_of_orderness: Duration) -> Self {
        Self {
            out_of_orderness_ms: i64::try_from(out_of_orderness.as_millis()).unwrap_or(i64::MAX),
            max_timestamp: i64::MIN,
            last: Watermark::START,
        }
    }

    /// Notes the event times of a batch the source produced.
    pub fn observe(&mut self, timestamps: &[i64]) {
        self.max_timestamp = timestamps
            .iter()
            .copied()
            .fold(self.max_timestamp, i64::max);
    }

    /// The watermark to emit after a batch, if it advances: `source_frontier` is the
    /// source's own event-time frontier, preferred to the largest timestamp seen.
    pub fn after_batch(&mut self, source_frontier: Option<i64>) -> Option<Watermark> {
        let frontier = source_frontier.unwrap_or(self.max_timestamp);
        let next = Watermark(
            frontier
                .saturating_sub(self.out_of_orderness_ms)
                .saturating_sub(1),
        );
        self.advance_to(next)
    }

    /// The watermark to emit when the input has ended: `Watermark::END`, unless it was
    /// already emitted.
    pub fn at_end_of_input(&mut self) -> Option<Watermark> {
        self.advance_to(Watermark::END)
    }

    /// The last watermark emitted (`Watermark::START` before the first).
    #[cfg(test)]
    pub fn current(&self) -> Watermark {
        self.last
    }

    fn advance_to(&mut self, next: Watermark) -> Option<Watermark> {
        (next > self.last).then(|| {
            self.last = next;
            next
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generator(out_of_orderness_ms: u64) -> WatermarkGenerator {
        WatermarkGenerator::new(Duration::from_millis(out_of_orderness_ms))
    }

    #[test]
    fn the_out_of_orderness_and_one_millisecond_are_subtracted_from_the_largest_time() {
        let mut g = generator(100);
        g.observe(&[1_000, 5_000, 3_000]);
        assert_eq!(g.after_batch(None), Some(Watermark(4_899)));
        let mut g = generator(0);
        g.observe(&[1_000]);
        assert_eq!(g.after_batch(None), Some(Watermark(999)));
    }

    #[test]
    fn the_watermark_never_goes_back() {
        let mut g = generator(10);
        g.observe(&[1_000]);
        assert_eq!(g.after_batch(None), Some(Watermark(989)));
        // An older batch leaves the largest time where it was: nothing new to emit.
        g.observe(&[500]);
        assert_eq!(g.after_batch(None), None);
        // A source frontier behind the last watermark emits nothing either.
        assert_eq!(g.after_batch(Some(200)), None);
        assert_eq!(g.current(), Watermark(989));
        // Equal is not an advance.
        assert_eq!(g.after_batch(Some(1_000)), None);
        assert_eq!(g.after_batch(Some(1_001)), Some(Watermark(990)));
    }

    #[test]
    fn the_source_frontier_is_preferred_to_the_largest_time_seen() {
        let mut g = generator(0);
        g.observe(&[10_000]);
        // The source knows a partition lags behind the largest record.
        assert_eq!(g.after_batch(Some(2_000)), Some(Watermark(1_999)));
        // And may advance without any record.
        assert_eq!(g.after_batch(Some(20_000)), Some(Watermark(19_999)));
    }

    #[test]
    fn nothing_is_emitted_before_any_record_or_frontier() {
        let mut g = generator(0);
        assert_eq!(g.after_batch(None), None);
        g.observe(&[]);
        assert_eq!(g.after_batch(None), None);
        assert_eq!(g.current(), Watermark::START);
    }

    #[test]
    fn end_of_input_emits_end_once() {
        let mut g = generator(5);
        g.observe(&[100]);
        assert_eq!(g.after_batch(None), Some(Watermark(94)));
        assert_eq!(g.at_end_of_input(), Some(Watermark::END));
        assert_eq!(g.at_end_of_input(), None);
        g.observe(&[i64::MAX]);
        assert_eq!(g.after_batch(None), None);
        assert_eq!(g.current(), Watermark::END);
    }

    #[test]
    fn i64_extremes_saturate_instead_of_overflowing() {
        // i64::MIN timestamps: MIN - ooo - 1 saturates to START, which is no advance.
        let mut g = generator(1_000);
        g.observe(&[i64::MIN]);
        assert_eq!(g.after_batch(None), None);
        assert_eq!(g.after_batch(Some(i64::MIN)), None);
        // i64::MAX timestamp: one below the end, never END itself before the input ends.
        let mut g = generator(0);
        g.observe(&[i64::MAX]);
        assert_eq!(g.after_batch(None), Some(Watermark(i64::MAX - 1)));
        assert_eq!(g.at_end_of_input(), Some(Watermark::END));
        // An out-of-orderness past i64::MAX milliseconds saturates too.
        let mut g = WatermarkGenerator::new(Duration::MAX);
        g.observe(&[i64::MAX]);
        assert_eq!(g.after_batch(None), Some(Watermark(-1)));
        assert_eq!(g.after_batch(Some(i64::MAX)), None);
        let mut g = WatermarkGenerator::new(Duration::MAX);
        g.observe(&[i64::MIN, 0]);
        assert_eq!(g.after_batch(None), None);
    }
}
