//! Event time across the repartition topic: every writer states its watermark in every
//! partition, and a reader's watermark is the minimum over the writers.
//!
//! Within one process a watermark travels in band, behind the records it follows, and
//! a keyed task takes the minimum over its input channels. Across workers the channel is
//! a repartition partition that several writers (every task upstream of the exchange,
//! in every worker) share, so the partition's largest timestamp says nothing about a
//! writer that lags: the writers' watermarks have to cross the topic themselves.
//!
//! Invariants:
//! - A writer is one task upstream of the exchange in one worker of one layout:
//!   `RepartitionWriter { set, index }`, `index = worker x tasks per worker + task`, and
//!   the set is `{generation, count}` of the layout (`count = workers x tasks per
//!   worker`; every worker runs the same spec, so the same tasks). A reader knows the
//!   whole set from its own spec, so a writer it has not heard from yet holds its
//!   watermark at the start instead of being ignored.
//! - At every barrier n a writer that has seen a watermark sends one marker record to
//!   every partition of the topic, after all its records of n and inside T(n): header
//!   `weir.watermark` = `(generation, writer, watermark)` (`WatermarkMarker`), no key,
//!   no value. Marker and records commit or abort together, and a `read_committed`
//!   reader meets the marker after every record the writer sent before it to that
//!   partition (one producer per checkpoint keeps a partition's order; see `sink`).
//! - A writer sends a marker only when its watermark advanced since its last one, so an
//!   idle pipeline writes nothing. Only a windowed keyed step has writers at all
//!   (`pipeline::WorkerPlan::repartition_writers`): an unwindowed aggregate ignores event time.
//! - The reader checkpoints what it knows with its offsets: each partition's position
//!   carries its writers' watermarks (`PartitionPosition::writers`), exactly those of
//!   the markers before the offset. A reader restored from checkpoint c therefore knows
//!   what it knew at c and reads every later marker again, even from a writer that
//!   restarted with nothing left to read (whose watermark starts over and may never
//!   advance again: its earlier markers still count). A restarted writer may also
//!   state a lower watermark than before its crash; the reader keeps the largest per
//!   writer, as a task's watermark never goes back (the records it replays were read
//!   after that marker in the first run too).
//! - A reader's partition watermark is the minimum over the set's writers of the
//!   largest watermark seen from each (`Watermark::START` before the first). A marker of
//!   another generation is ignored, and a restored state of another generation or
//!   writer count starts over: the layout before a rescale stopped before this one
//!   started, so in every partition its records and markers all come first, and they
//!   say nothing about this layout's writers (whose indices they may share).
//! - A marker is not a record: the reader skips it (its offset still advances), and in
//!   a repartition topic only markers move the event-time frontier.

use serde::{Deserialize, Serialize};

use crate::record::message::Watermark;

/// The Kafka header that marks a repartition record as a writer's watermark.
pub const WATERMARK_HEADER: &str = "weir.watermark";

/// Encoding version of a marker's header value.
const MARKER_VERSION: u8 = 1;
/// version (1) + generation (8) + writer (4) + watermark (8), big-endian.
const MARKER_LEN: usize = 21;

/// The writers of one layout: every task upstream of the exchange, in every worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepartitionWriters {
    /// The layout's generation (`cluster::LayoutStamp`).
    pub generation: u64,
    /// How many writers the layout has.
    pub count: u32,
}

/// One writer of a repartition topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepartitionWriter {
    pub set: RepartitionWriters,
    /// `0..set.count`.
    pub index: u32,
}

/// What a marker record says: writer `writer` of layout generation `generation` has
/// sent everything up to `watermark` before this record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatermarkMarker {
    pub generation: u64,
    pub writer: u32,
    pub watermark: Watermark,
}

impl WatermarkMarker {
    /// `writer`'s marker for `watermark`.
    pub fn of(writer: RepartitionWriter, watermark: Watermark) -> WatermarkMarker {
        WatermarkMarker {
            generation: writer.set.generation,
            writer: writer.index,
            watermark,
        }
    }

    /// The header value.
    pub fn encode(&self) -> [u8; MARKER_LEN] {
        let mut out = [0u8; MARKER_LEN];
        out[0] = MARKER_VERSION;
        out[1..9].copy_from_slice(&self.generation.to_be_bytes());
        out[9..13].copy_from_slice(&self.writer.to_be_bytes());
        out[13..21].copy_from_slice(&self.watermark.0.to_be_bytes());
        out
    }

    /// Decodes a header value; `None` if it is not a marker this weir writes.
    pub fn decode(bytes: &[u8]) -> Option<WatermarkMarker> {
        let bytes: &[u8; MARKER_LEN] = bytes.try_into().ok()?;
        if bytes[0] != MARKER_VERSION {
            return None;
        }
        let (generation, rest) = bytes[1..].split_at(8);
        let (writer, watermark) = rest.split_at(4);
        Some(WatermarkMarker {
            generation: u64::from_be_bytes(generation.try_into().ok()?),
            writer: u32::from_be_bytes(writer.try_into().ok()?),
            watermark: Watermark(i64::from_be_bytes(watermark.try_into().ok()?)),
        })
    }
}

/// A reader's view of one repartition partition: the largest watermark seen from each
/// writer of its layout. Stored in the partition's checkpointed position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionWatermarks {
    generation: u64,
    /// Indexed by writer, in milliseconds; `i64::MIN` (`Watermark::START`) until its
    /// first marker.
    writers: Vec<i64>,
}

impl PartitionWatermarks {
    pub fn new(set: RepartitionWriters) -> PartitionWatermarks {
        PartitionWatermarks {
            generation: set.generation,
            writers: vec![Watermark::START.0; set.count as usize],
        }
    }

    /// What a reader of `set` continues from: `restored` (its checkpoint's) if it is of
    /// the same layout, else nothing known yet (see the module invariants).
    pub fn restore(set: RepartitionWriters, restored: Option<&PartitionWatermarks>) -> Self {
        match restored {
            Some(r) if r.generation == set.generation && r.writers.len() == set.count as usize => {
                r.clone()
            }
            _ => PartitionWatermarks::new(set),
        }
    }

    /// Notes a marker read from the partition (see the module invariants).
    pub fn observe(&mut self, marker: WatermarkMarker) {
        if marker.generation != self.generation {
            return;
        }
        if let Some(w) = self.writers.get_mut(marker.writer as usize) {
            *w = (*w).max(marker.watermark.0);
        }
    }

    /// The partition's watermark: the minimum over the writers.
    pub fn watermark(&self) -> Watermark {
        Watermark(self.writers.iter().copied().min().unwrap_or(i64::MIN))
    }

    /// The partition's event-time frontier as a source reports it (`Source::
    /// event_time_frontier`): one past its watermark, so that a source with no
    /// out-of-orderness emits exactly the watermark (`watermark_generator`).
    pub fn frontier(&self) -> i64 {
        self.watermark().0.saturating_add(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::watermark_generator::WatermarkGenerator;

    fn set(generation: u64, count: u32) -> RepartitionWriters {
        RepartitionWriters { generation, count }
    }

    fn marker(generation: u64, writer: u32, watermark: i64) -> WatermarkMarker {
        WatermarkMarker {
            generation,
            writer,
            watermark: Watermark(watermark),
        }
    }

    /// Catches: an encoding that does not round-trip (the i64 extremes included), or a
    /// decoder that takes any header value (a truncated one, another version) as a
    /// marker.
    #[test]
    fn a_marker_round_trips_and_nothing_else_decodes() {
        for m in [
            marker(0, 0, 0),
            marker(7, 5, 1_700_000_000_123),
            marker(u64::MAX, u32::MAX, i64::MIN),
            marker(1, 2, i64::MAX),
        ] {
            assert_eq!(WatermarkMarker::decode(&m.encode()), Some(m));
        }
        let bytes = marker(1, 2, 3).encode();
        assert_eq!(WatermarkMarker::decode(&bytes[..20]), None);
        assert_eq!(
            WatermarkMarker::decode(&[bytes.as_slice(), &[0]].concat()),
            None
        );
        let mut other = bytes;
        other[0] = 2;
        assert_eq!(WatermarkMarker::decode(&other), None);
        assert_eq!(WatermarkMarker::decode(b""), None);
    }

    /// Catches: a partition whose watermark follows the writer that is ahead (a lagging
    /// writer's records would be late), or ignores a writer not heard from yet.
    #[test]
    fn the_partition_waits_for_the_slowest_writer_including_silent_ones() {
        let mut p = PartitionWatermarks::new(set(0, 3));
        assert_eq!(p.watermark(), Watermark::START);
        p.observe(marker(0, 0, 5_000));
        p.observe(marker(0, 2, 9_000));
        assert_eq!(p.watermark(), Watermark::START, "writer 1 is silent");
        p.observe(marker(0, 1, 3_000));
        assert_eq!(p.watermark(), Watermark(3_000));
        p.observe(marker(0, 1, 12_000));
        assert_eq!(p.watermark(), Watermark(5_000));
    }

    /// Catches: a restarted writer's lower restatement moving the partition back, or a
    /// marker of an earlier layout (whose writer indices this one reuses) counted.
    #[test]
    fn a_writer_never_goes_back_and_other_generations_are_ignored() {
        let mut p = PartitionWatermarks::new(set(2, 2));
        p.observe(marker(2, 0, 8_000));
        p.observe(marker(2, 1, 8_000));
        p.observe(marker(2, 0, 1_000));
        assert_eq!(p.watermark(), Watermark(8_000));
        p.observe(marker(1, 0, 50_000));
        p.observe(marker(1, 1, 50_000));
        p.observe(marker(3, 1, 50_000));
        assert_eq!(p.watermark(), Watermark(8_000));
        // A writer index past the layout's count is not one of its writers.
        p.observe(marker(2, 2, 1));
        assert_eq!(p.watermark(), Watermark(8_000));
    }

    /// Catches: a restored state of an earlier layout (or another writer count) taken
    /// as this one's, or a restore of the same layout that forgets what it knew.
    #[test]
    fn a_restored_state_counts_only_for_the_same_layout() {
        let mut known = PartitionWatermarks::new(set(1, 2));
        known.observe(marker(1, 0, 700));
        known.observe(marker(1, 1, 900));
        let same = PartitionWatermarks::restore(set(1, 2), Some(&known));
        assert_eq!(same.watermark(), Watermark(700));
        let json = serde_json::to_value(&same).expect("encodes");
        let back: PartitionWatermarks = serde_json::from_value(json).expect("decodes");
        assert_eq!(back, same);
        for other in [set(2, 2), set(1, 3)] {
            let fresh = PartitionWatermarks::restore(other, Some(&known));
            assert_eq!(fresh.watermark(), Watermark::START, "{other:?}");
        }
        assert_eq!(
            PartitionWatermarks::restore(set(1, 2), None).watermark(),
            Watermark::START
        );
    }

    /// Catches: a frontier off by one against the task's watermark generator (the
    /// repartition source has no out-of-orderness: it must emit the writers' watermark
    /// itself, neither one below nor one above), or one that overflows at the end.
    #[test]
    fn the_frontier_makes_the_source_task_emit_exactly_the_partition_watermark() {
        let mut p = PartitionWatermarks::new(set(0, 1));
        let mut generator = WatermarkGenerator::new(std::time::Duration::ZERO);
        assert_eq!(generator.after_batch(Some(p.frontier())), None);
        p.observe(marker(0, 0, 4_999));
        assert_eq!(
            generator.after_batch(Some(p.frontier())),
            Some(Watermark(4_999))
        );
        p.observe(marker(0, 0, i64::MAX));
        assert_eq!(p.frontier(), i64::MAX);
        assert_eq!(
            generator.after_batch(Some(p.frontier())),
            Some(Watermark(i64::MAX - 1))
        );
    }
}
