//! Repartition frames: the records one writer subtask sends to one partition of a
//! repartition topic, packed into one Kafka record (see `repartition`).
//!
//! Why: as a Kafka record of its own, every record crossing the topic costs librdkafka a
//! message to allocate, queue, batch and acknowledge on the writer's side and to parse,
//! queue and hand over on the reader's, and the broker a record to validate, all on the
//! cores the pipeline runs on. Only Weir writes and reads the topic, so it packs: a
//! frame pays those costs once for up to `frame_bytes` of records.
//!
//! Invariants:
//! - Format: a frame is a Kafka record with no key and header [`FRAME_HEADER`] =
//!   [`FRAME_VERSION`]; its value is its records one after the other, each `key length,
//!   key, value length, value, event time`, the lengths LEB128 varints, the event time a
//!   zigzag LEB128 varint (any `i64`: unlike a Kafka timestamp, it carries times at or
//!   below zero). Nothing else: a frame holds as many records as its value does. The
//!   frame's own Kafka timestamp means nothing.
//! - A frame holds records of one checkpoint, in the order its writer subtask received
//!   them: the writer sends every frame it holds at a barrier, before that checkpoint's
//!   watermark markers (`repartition_watermark`) and before anything of the next
//!   checkpoint. So a frame is in exactly one transaction, and a key's records keep the
//!   order of the writer's input (see `sink`'s "Order").
//! - Bounded: a frame is sent as soon as it holds `frame_bytes`, and before a record
//!   would take it past that, so a record too large for a frame is a frame of its own:
//!   whatever Kafka record size a record fitted before, its frame fits too (plus at
//!   most [`MAX_RECORD_OVERHEAD`] bytes). A writer subtask holds at most its partitions
//!   x `frame_bytes` ([`frame_bytes`]).
//! - Decoding checks every length against the bytes left: a value that is not a frame
//!   (written by something other than Weir) is a [`FrameError`] saying what is wrong
//!   with it, never a panic or a read out of bounds. A frame header of another
//!   version (a newer Weir's) is refused the same way: its bytes are never taken for a
//!   record of their own.
//! - A reader may return a frame's records over several polls; its position is then the
//!   frame's offset and how many of its records it returned
//!   (`PartitionPosition::frame_read`), and a reader restored from it skips those.

use crate::cluster::KeyGroupRanges;
use crate::connector::kafka::repartition;

/// The header that marks a Kafka record of a repartition topic as a frame.
pub const FRAME_HEADER: &str = "weir.frame";
/// [`FRAME_HEADER`]'s value: the format this module writes and reads.
pub const FRAME_VERSION: &[u8] = b"1";
/// Bytes a writer subtask's frames hold at most together, where the partitions allow it
/// (see [`frame_bytes`]).
pub const FRAME_BUFFER_BYTES: usize = 2 << 20;
/// The largest frame: 64 KiB, a few thousand small records, so the per-frame costs
/// vanish per record, and well under a producer batch (`config::MIN_BATCH_BYTES`).
pub const MAX_FRAME_BYTES: usize = 64 << 10;
/// The smallest frame, whatever the partition count: 4 KiB.
pub const MIN_FRAME_BYTES: usize = 4 << 10;
/// The most bytes a frame adds to a record: two 5-byte lengths and a 10-byte time.
pub const MAX_RECORD_OVERHEAD: usize = 20;

/// The size at which a writer subtask sends a frame, for a topic of `partitions`
/// partitions: `FRAME_BUFFER_BYTES` shared by them, within `MIN_FRAME_BYTES` and
/// `MAX_FRAME_BYTES` (32 partitions: 64 KiB; the cap of 1,024: 4 KiB, 4 MiB in all).
pub fn frame_bytes(partitions: u16) -> usize {
    (FRAME_BUFFER_BYTES / usize::from(partitions.max(1))).clamp(MIN_FRAME_BYTES, MAX_FRAME_BYTES)
}

/// A record in a frame: key, value, event time.
pub type FrameRecord<'a> = (&'a [u8], &'a [u8], i64);

/// Why bytes are not a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("record {record} is cut off at byte {at} of {len}")]
    Truncated { record: u32, at: usize, len: usize },
    #[error("record {record} has a length or time of more than 10 varint bytes at byte {at}")]
    Varint { record: u32, at: usize },
    #[error("the frame holds {found} records, but the position says {expected} of them were read")]
    TooShort { found: u32, expected: u32 },
}

/// A writer subtask's open frames, one per partition of its repartition topic.
#[derive(Debug)]
pub struct FrameWriter {
    key_groups: KeyGroupRanges,
    frames: Vec<Vec<u8>>,
    frame_bytes: usize,
}

impl FrameWriter {
    pub fn new(key_groups: KeyGroupRanges) -> Self {
        let partitions = key_groups.count();
        FrameWriter {
            key_groups,
            frames: vec![Vec::new(); usize::from(partitions)],
            frame_bytes: frame_bytes(partitions),
        }
    }

    /// Adds a record to the frame of its key group's partition
    /// (`repartition::partition_of_key`), first sending that frame through `send`
    /// (partition, frame) if the record would take it past `frame_bytes`, and after it
    /// if the frame is full.
    pub fn push<E>(
        &mut self,
        (key, value, event_time): FrameRecord<'_>,
        send: &mut impl FnMut(i32, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let partition = repartition::partition_of_key(key, self.key_groups);
        let frame = &mut self.frames[partition as usize];
        let len = key.len() + value.len() + MAX_RECORD_OVERHEAD;
        if !frame.is_empty() && frame.len() + len > self.frame_bytes {
            send(partition, frame)?;
            frame.clear();
        }
        put_varint(frame, key.len() as u64);
        frame.extend_from_slice(key);
        put_varint(frame, value.len() as u64);
        frame.extend_from_slice(value);
        put_varint(frame, zigzag(event_time));
        if frame.len() >= self.frame_bytes {
            send(partition, frame)?;
            frame.clear();
        }
        Ok(())
    }

    /// Sends every frame that holds a record, in partition order.
    pub fn flush<E>(
        &mut self,
        send: &mut impl FnMut(i32, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        for (partition, frame) in self.frames.iter_mut().enumerate() {
            if !frame.is_empty() {
                // At most `MAX_REPARTITION_PARTITIONS` (1,024) partitions.
                send(partition as i32, frame)?;
                frame.clear();
            }
        }
        Ok(())
    }

    /// The partitions of the topic: one frame each.
    pub fn partitions(&self) -> u16 {
        self.key_groups.count()
    }

    /// Whether no frame holds a record.
    pub fn is_empty(&self) -> bool {
        self.frames.iter().all(Vec::is_empty)
    }
}

/// A frame being read: its bytes, where the next record starts, how many were read.
#[derive(Debug)]
pub struct FrameReader {
    bytes: Vec<u8>,
    at: usize,
    read: u32,
}

impl FrameReader {
    pub fn new(bytes: Vec<u8>) -> Self {
        FrameReader {
            bytes,
            at: 0,
            read: 0,
        }
    }

    /// How many records were read (or skipped).
    pub fn read(&self) -> u32 {
        self.read
    }

    /// Whether every record was read.
    pub fn is_finished(&self) -> bool {
        self.at == self.bytes.len()
    }

    /// The next record, `None` at the frame's end.
    pub fn next_record(&mut self) -> Result<Option<FrameRecord<'_>>, FrameError> {
        if self.at == self.bytes.len() {
            return Ok(None);
        }
        let mut at = self.at;
        let key = self.field(&mut at)?;
        let value = self.field(&mut at)?;
        let event_time = unzigzag(self.varint(&mut at)?);
        self.at = at;
        self.read += 1;
        Ok(Some((&self.bytes[key], &self.bytes[value], event_time)))
    }

    /// Passes over `n` records (read before a restore); fails if the frame has fewer.
    pub fn skip(&mut self, n: u32) -> Result<(), FrameError> {
        while self.read < n {
            if self.next_record()?.is_none() {
                return Err(FrameError::TooShort {
                    found: self.read,
                    expected: n,
                });
            }
        }
        Ok(())
    }

    /// A length-prefixed field at `at`: its byte range; moves `at` past it.
    fn field(&self, at: &mut usize) -> Result<std::ops::Range<usize>, FrameError> {
        let len = self.varint(at)?;
        let start = *at;
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| start.checked_add(len))
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| self.truncated(start))?;
        *at = end;
        Ok(start..end)
    }

    fn varint(&self, at: &mut usize) -> Result<u64, FrameError> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let Some(&byte) = self.bytes.get(*at) else {
                return Err(self.truncated(*at));
            };
            *at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(FrameError::Varint {
            record: self.read,
            at: *at,
        })
    }

    fn truncated(&self, at: usize) -> FrameError {
        FrameError::Truncated {
            record: self.read,
            at,
            len: self.bytes.len(),
        }
    }
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

#[cfg(test)]
#[path = "repartition_frame_tests.rs"]
mod tests;
