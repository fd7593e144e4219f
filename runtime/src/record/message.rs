//! What travels on a channel between tasks.
//!
//! Invariants: on every channel, a `Barrier(n)` is preceded by every record its sender
//! emitted before checkpoint n and followed only by records emitted after it; barriers
//! arrive in increasing id order; watermarks are non-decreasing per channel. End of
//! input is the channel's disconnection, which a task sees only after the final barrier.

use crate::record::batch::RecordBatch;
use crate::record::checkpoint_id::CheckpointId;

/// A checkpoint barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub id: CheckpointId,
    /// The last checkpoint of a bounded run: after forwarding it, a task exits.
    pub is_final: bool,
}

/// Event time in milliseconds since the Unix epoch; `Watermark::END` closes every window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Watermark(pub i64);

impl Watermark {
    pub const START: Watermark = Watermark(i64::MIN);
    /// Sent by a source that has read all its input.
    pub const END: Watermark = Watermark(i64::MAX);
}

#[derive(Debug)]
pub enum Message {
    Batch(RecordBatch),
    Watermark(Watermark),
    Barrier(Barrier),
}
