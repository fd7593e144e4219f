//! Key groups and the hash shuffle.
//!
//! Invariants: a key's key group is `xxh3_64(key) % max_parallelism`, a pure function
//! of the key bytes, stable across processes, versions and parallelism; key group `g`
//! belongs to subtask `g * parallelism / max_parallelism` (contiguous ranges, Flink's
//! assignment), so state can later be rescaled by moving key-group ranges. Every record
//! of a key group goes to the same subtask, in the order its sender emitted them.

use std::ops::Range;

use crossbeam_channel::Sender;

use crate::cluster::key_group_ranges;
use crate::record::batch::RecordBatch;
use crate::record::message::{Barrier, Message, Watermark};

/// The key group of `key` among `max_parallelism` groups.
pub fn key_group(key: &[u8], max_parallelism: u16) -> u16 {
    (xxhash_rust::xxh3::xxh3_64(key) % u64::from(max_parallelism)) as u16
}

/// The subtask that owns key group `group`: subtasks are key-group ranges
/// (`cluster::key_group_ranges`).
pub fn subtask_of(group: u16, parallelism: usize, max_parallelism: u16) -> usize {
    key_group_ranges::range_of(group, parallelism, max_parallelism)
}

/// The key groups of subtask `j` of `parallelism` among `key_groups`: those `g` with
/// `subtask_of(g) == j`, a contiguous range.
pub fn subtask_key_groups(j: usize, parallelism: usize, key_groups: u16) -> Range<u16> {
    key_group_ranges::groups_of(j, parallelism, key_groups)
}

/// The downstream subtasks of a task are gone: the pipeline is failing or cancelled.
#[derive(Debug, thiserror::Error)]
#[error("downstream task has stopped")]
pub struct Disconnected;

/// Sends one task's output to the next stage: records by key group, watermarks and
/// barriers to every downstream subtask.
#[derive(Debug)]
pub struct ShuffleWriter {
    outputs: Vec<Sender<Message>>,
    max_parallelism: u16,
    /// Per-target parts of the batch being sent, each replaced by an empty one sized
    /// like it when sent.
    pending: Vec<RecordBatch>,
}

impl ShuffleWriter {
    pub fn new(outputs: Vec<Sender<Message>>, max_parallelism: u16) -> Self {
        let pending = vec![RecordBatch::default(); outputs.len()];
        Self {
            outputs,
            max_parallelism,
            pending,
        }
    }

    pub fn send_batch(&mut self, batch: RecordBatch) -> Result<(), Disconnected> {
        let parallelism = self.outputs.len();
        if parallelism == 1 {
            return self.outputs[0]
                .send(Message::Batch(batch))
                .map_err(|_| Disconnected);
        }
        for record in batch.iter() {
            let target = subtask_of(
                key_group(record.key, self.max_parallelism),
                parallelism,
                self.max_parallelism,
            );
            self.pending[target].push_ref(record);
        }
        for (target, out) in self.outputs.iter().enumerate() {
            if !self.pending[target].is_empty() {
                let next = self.pending[target].sized_like();
                let part = std::mem::replace(&mut self.pending[target], next);
                out.send(Message::Batch(part)).map_err(|_| Disconnected)?;
            }
        }
        Ok(())
    }

    pub fn send_watermark(&self, watermark: Watermark) -> Result<(), Disconnected> {
        self.broadcast(|| Message::Watermark(watermark))
    }

    pub fn send_barrier(&self, barrier: Barrier) -> Result<(), Disconnected> {
        self.broadcast(|| Message::Barrier(barrier))
    }

    fn broadcast(&self, message: impl Fn() -> Message) -> Result<(), Disconnected> {
        for out in &self.outputs {
            out.send(message()).map_err(|_| Disconnected)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_groups_are_stable_and_cover_subtasks_contiguously() {
        assert_eq!(key_group(b"alpha", 128), key_group(b"alpha", 128));
        let owners: Vec<usize> = (0..128u16).map(|g| subtask_of(g, 3, 128)).collect();
        assert!(owners.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(owners.first(), Some(&0));
        assert_eq!(owners.last(), Some(&2));
    }

    #[test]
    fn shuffle_sends_each_key_to_one_subtask() {
        let (tx0, rx0) = crossbeam_channel::unbounded();
        let (tx1, rx1) = crossbeam_channel::unbounded();
        let mut writer = ShuffleWriter::new(vec![tx0, tx1], 128);
        let mut batch = RecordBatch::default();
        for i in 0..100 {
            batch.push(format!("k{}", i % 10).as_bytes(), b"v", i);
        }
        writer.send_batch(batch).expect("sent");
        let keys = |rx: &crossbeam_channel::Receiver<Message>| -> Vec<Vec<u8>> {
            rx.try_iter()
                .flat_map(|m| match m {
                    Message::Batch(b) => b.iter().map(|r| r.key.to_vec()).collect::<Vec<_>>(),
                    _ => vec![],
                })
                .collect()
        };
        let (k0, k1) = (keys(&rx0), keys(&rx1));
        assert_eq!(k0.len() + k1.len(), 100);
        assert!(k0.iter().all(|k| !k1.contains(k)));
    }
}
