//! `RecordBatch`: the unit of data on every channel and at every guest call.
//!
//! Invariant: a batch of N records is five flat vectors, mirroring the WIT
//! `record-batch` field for field, so handing a batch to a guest moves vectors and
//! copies nothing per record. `key_ends` and `value_ends` are non-decreasing exclusive
//! end offsets into `keys` and `values`; all three per-record vectors have length N.
//!
//! Offsets are `u32`, as in the WIT (a guest's memory is 32-bit), so a batch addresses
//! at most [`MAX_BATCH_BYTES`] of keys and of values. `try_push` refuses a record past
//! that; `push` never panics on it either: its offsets saturate, and `check_size` (part
//! of `validate`) refuses the batch. Whoever fills a batch with `push` (a source, in
//! its `poll`) has it checked before it travels: the source task does so after every
//! poll.

use std::ops::Range;

/// One record, borrowed from a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// Empty when the record has no key.
    pub key: &'a [u8],
    pub value: &'a [u8],
    /// Event time, milliseconds since the Unix epoch.
    pub timestamp: i64,
}

/// A batch of records in the columnar layout of the WIT `record-batch`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordBatch {
    pub timestamps: Vec<i64>,
    pub key_ends: Vec<u32>,
    pub keys: Vec<u8>,
    pub value_ends: Vec<u32>,
    pub values: Vec<u8>,
}

/// Most bytes of keys, and of values, one batch can address: 4 GiB - 1, the largest
/// `u32` end offset.
pub const MAX_BATCH_BYTES: usize = u32::MAX as usize;

/// Why a batch received from a guest is not well formed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed record batch: {0}")]
pub struct MalformedBatch(pub String);

/// A batch would hold more keys or values than its `u32` offsets can address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a batch of {} needs {bytes} bytes of {what}, more than the {MAX_BATCH_BYTES} (4 GiB) a batch can address",
    count_records(.records)
)]
pub struct BatchTooLarge {
    /// Records in the batch, counting the one that did not fit.
    pub records: usize,
    /// `"keys"` or `"values"`.
    pub what: &'static str,
    pub bytes: usize,
}

/// `1 record`, `2 records`.
fn count_records(n: &usize) -> String {
    format!("{n} record{}", if *n == 1 { "" } else { "s" })
}

impl From<BatchTooLarge> for MalformedBatch {
    fn from(e: BatchTooLarge) -> Self {
        MalformedBatch(e.to_string())
    }
}

/// How much one `Source::poll` may put in a batch: a source stops adding records once
/// the batch holds `records` records or at least `bytes` bytes (see
/// [`RecordBatch::byte_len`]), so a batch is at most `bytes` plus one record (a record
/// larger than `bytes` travels alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimit {
    pub records: usize,
    pub bytes: usize,
}

impl BatchLimit {
    /// At most `records` records, whatever their size.
    pub fn records(records: usize) -> Self {
        BatchLimit {
            records,
            bytes: usize::MAX,
        }
    }

    /// Whether `batch` has reached this limit: no record may be added to it.
    pub fn is_full(&self, batch: &RecordBatch) -> bool {
        batch.len() >= self.records || batch.byte_len() >= self.bytes
    }
}

/// Bytes a record costs in a batch besides its key and value: its timestamp and two
/// end offsets.
pub const RECORD_OVERHEAD_BYTES: usize = 16;

impl RecordBatch {
    /// Bytes the batch holds: keys, values and [`RECORD_OVERHEAD_BYTES`] per record
    /// (what `batch_bytes` bounds).
    pub fn byte_len(&self) -> usize {
        self.keys
            .len()
            .saturating_add(self.values.len())
            .saturating_add(self.timestamps.len().saturating_mul(RECORD_OVERHEAD_BYTES))
    }

    /// An empty batch with room for `records` records of about `bytes` value bytes.
    pub fn with_capacity(records: usize, bytes: usize) -> Self {
        Self {
            timestamps: Vec::with_capacity(records),
            key_ends: Vec::with_capacity(records),
            keys: Vec::new(),
            value_ends: Vec::with_capacity(records),
            values: Vec::with_capacity(bytes),
        }
    }

    /// An empty batch with room for as many records, key bytes and value bytes as this
    /// one holds: the next batch of a stream of like batches fills it without growing
    /// (a batch grown from empty copies its bytes again at every doubling).
    pub fn sized_like(&self) -> Self {
        Self {
            timestamps: Vec::with_capacity(self.len()),
            key_ends: Vec::with_capacity(self.len()),
            keys: Vec::with_capacity(self.keys.len()),
            value_ends: Vec::with_capacity(self.len()),
            values: Vec::with_capacity(self.values.len()),
        }
    }

    pub fn len(&self) -> usize {
        self.timestamps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.timestamps.is_empty()
    }

    /// Total payload bytes (keys and values).
    pub fn byte_size(&self) -> usize {
        self.keys.len() + self.values.len()
    }

    /// Appends a record. Past [`MAX_BATCH_BYTES`] the offsets saturate and the batch
    /// is no longer well formed: `check_size` refuses it (use `try_push` to refuse the
    /// record instead).
    pub fn push(&mut self, key: &[u8], value: &[u8], timestamp: i64) {
        self.keys.extend_from_slice(key);
        self.values.extend_from_slice(value);
        self.key_ends.push(offset(self.keys.len()));
        self.value_ends.push(offset(self.values.len()));
        self.timestamps.push(timestamp);
    }

    pub fn push_ref(&mut self, r: RecordRef<'_>) {
        self.push(r.key, r.value, r.timestamp);
    }

    /// Appends a record, or leaves the batch as it was if the record would take its
    /// keys or values past [`MAX_BATCH_BYTES`].
    pub fn try_push(&mut self, r: RecordRef<'_>) -> Result<(), BatchTooLarge> {
        self.check_room(1, r.key.len(), r.value.len())?;
        self.push_ref(r);
        Ok(())
    }

    /// Refuses `records` more records of `key_bytes` and `value_bytes` in all if they
    /// would take the batch's keys or values past [`MAX_BATCH_BYTES`].
    fn check_room(
        &self,
        records: usize,
        key_bytes: usize,
        value_bytes: usize,
    ) -> Result<(), BatchTooLarge> {
        for (what, held, adding) in [
            ("keys", self.keys.len(), key_bytes),
            ("values", self.values.len(), value_bytes),
        ] {
            let bytes = held.saturating_add(adding);
            if bytes > MAX_BATCH_BYTES {
                return Err(BatchTooLarge {
                    records: self.len() + records,
                    what,
                    bytes,
                });
            }
        }
        Ok(())
    }

    /// Appends the records `run` of `source`, in order, as `try_push` of each would,
    /// but copying each column's bytes of the whole run at once (only the end offsets
    /// are computed per record). Refused whole, leaving the batch as it was, if the run
    /// would take its keys or values past [`MAX_BATCH_BYTES`].
    ///
    /// # Panics
    /// If `run` is not within `source`.
    pub fn try_extend_from(
        &mut self,
        source: &RecordBatch,
        run: Range<usize>,
    ) -> Result<(), BatchTooLarge> {
        if run.len() == 1 {
            // One record: pushing it is cheaper than five column slices (callgrind: about
            // 340 against 400 instructions a record when every run was one record long).
            return self.try_push(source.get(run.start));
        }
        let frame = |ends: &[u32]| frame_start(ends, run.start)..frame_start(ends, run.end);
        let (keys, values) = (frame(&source.key_ends), frame(&source.value_ends));
        self.check_room(run.len(), keys.len(), values.len())?;
        // An end `e` of the source becomes `e - start + held`: in u32 arithmetic modulo
        // 2^32, exact since every result fits a u32 (checked above).
        let shift = |held: usize, start: usize| (held as u32).wrapping_sub(start as u32);
        let (key_shift, value_shift) = (
            shift(self.keys.len(), keys.start),
            shift(self.values.len(), values.start),
        );
        self.timestamps
            .extend_from_slice(&source.timestamps[run.clone()]);
        self.key_ends.extend(
            source.key_ends[run.clone()]
                .iter()
                .map(|&e| e.wrapping_add(key_shift)),
        );
        self.value_ends.extend(
            source.value_ends[run]
                .iter()
                .map(|&e| e.wrapping_add(value_shift)),
        );
        self.keys.extend_from_slice(&source.keys[keys]);
        self.values.extend_from_slice(&source.values[values]);
        Ok(())
    }

    /// Refuses a batch whose keys or values are past what its offsets address (filled
    /// by `push` beyond [`MAX_BATCH_BYTES`]).
    pub fn check_size(&self) -> Result<(), BatchTooLarge> {
        for (what, bytes) in [("keys", self.keys.len()), ("values", self.values.len())] {
            if bytes > MAX_BATCH_BYTES {
                return Err(BatchTooLarge {
                    records: self.len(),
                    what,
                    bytes,
                });
            }
        }
        Ok(())
    }

    /// Record `i`. Panics if `i >= len()`, like slice indexing.
    pub fn get(&self, i: usize) -> RecordRef<'_> {
        RecordRef {
            key: &self.keys[frame_start(&self.key_ends, i)..self.key_ends[i] as usize],
            value: &self.values[frame_start(&self.value_ends, i)..self.value_ends[i] as usize],
            timestamp: self.timestamps[i],
        }
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = RecordRef<'_>> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// Checks the framing invariants; batches coming back from a guest are untrusted.
    pub fn validate(&self) -> Result<(), MalformedBatch> {
        self.check_size()?;
        let n = self.timestamps.len();
        if self.key_ends.len() != n || self.value_ends.len() != n {
            return Err(MalformedBatch(
                "timestamps, key-ends and value-ends differ in length".into(),
            ));
        }
        check_ends(&self.key_ends, self.keys.len(), "key-ends")?;
        check_ends(&self.value_ends, self.values.len(), "value-ends")
    }

    pub fn clear(&mut self) {
        self.timestamps.clear();
        self.key_ends.clear();
        self.keys.clear();
        self.value_ends.clear();
        self.values.clear();
    }
}

impl<'a> FromIterator<RecordRef<'a>> for RecordBatch {
    fn from_iter<I: IntoIterator<Item = RecordRef<'a>>>(iter: I) -> Self {
        let mut batch = RecordBatch::default();
        for r in iter {
            batch.push_ref(r);
        }
        batch
    }
}

/// Where frame `i` of an `ends` column starts (the end of frame `i - 1`; 0 for the
/// first); `i` may be `ends.len()`, the end of the last frame.
fn frame_start(ends: &[u32], i: usize) -> usize {
    match i {
        0 => 0,
        i => ends[i - 1] as usize,
    }
}

/// Checks that `ends` is non-decreasing and its last entry equals `total`.
pub fn check_ends(ends: &[u32], total: usize, what: &str) -> Result<(), MalformedBatch> {
    if ends.windows(2).any(|w| w[1] < w[0]) {
        return Err(MalformedBatch(format!("{what} decrease")));
    }
    if ends.last().map_or(0, |&e| e as usize) != total {
        return Err(MalformedBatch(format!(
            "{what} do not end at the data's length {total}"
        )));
    }
    Ok(())
}

/// The end offset for `len` bytes, saturating at `u32::MAX` (see `check_size`).
fn offset(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extending_by_a_run_appends_what_pushing_each_record_appends() {
        let source: RecordBatch = [
            (&b""[..], &b"v0"[..], 10),
            (b"k1", b"", 11),
            (b"key2", b"value2", 12),
            (b"k3", b"v3", 13),
        ]
        .into_iter()
        .map(|(key, value, timestamp)| RecordRef {
            key,
            value,
            timestamp,
        })
        .collect();
        for (start, end) in [(0, 0), (0, 4), (1, 3), (2, 4), (3, 4), (1, 1)] {
            for head in [0, 3] {
                let mut expected: RecordBatch = source.iter().take(head).collect();
                let mut extended = expected.clone();
                for i in start..end {
                    expected.push_ref(source.get(i));
                }
                extended
                    .try_extend_from(&source, start..end)
                    .expect("far below 4 GiB");
                assert_eq!(extended, expected, "{start}..{end} after {head} records");
                assert_eq!(extended.validate(), Ok(()));
            }
        }
    }

    #[test]
    fn push_and_get_round_trip() {
        let mut b = RecordBatch::default();
        b.push(b"k1", b"hello", 5);
        b.push(b"", b"", -1);
        b.push(b"k3", b"world!", 7);
        assert_eq!(b.len(), 3);
        assert_eq!(
            b.get(0),
            RecordRef {
                key: b"k1",
                value: b"hello",
                timestamp: 5
            }
        );
        assert_eq!(
            b.get(1),
            RecordRef {
                key: b"",
                value: b"",
                timestamp: -1
            }
        );
        assert_eq!(b.get(2).value, b"world!");
        assert!(b.validate().is_ok());
        let copy: RecordBatch = b.iter().collect();
        assert_eq!(copy, b);
    }

    /// One record whose value is `bytes` zero bytes. `vec!` of zeros maps untouched
    /// zero pages, so this costs address space, not memory.
    fn one_value_of(bytes: usize) -> RecordBatch {
        RecordBatch {
            timestamps: vec![0],
            key_ends: vec![0],
            keys: Vec::new(),
            value_ends: vec![offset(bytes)],
            values: vec![0; bytes],
        }
    }

    #[test]
    fn a_batch_past_4_gib_is_an_error_not_a_panic() {
        let mut full = one_value_of(MAX_BATCH_BYTES);
        assert_eq!(full.check_size(), Ok(()));
        let e = full
            .try_push(RecordRef {
                key: b"k",
                value: b"v",
                timestamp: 1,
            })
            .expect_err("past 4 GiB");
        assert_eq!(
            e.to_string(),
            "a batch of 2 records needs 4294967296 bytes of values, more than the 4294967295 (4 GiB) a batch can address"
        );
        assert_eq!(full.len(), 1, "a refused record is not added");
        let small: RecordBatch = std::iter::once(RecordRef {
            key: b"k",
            value: b"v",
            timestamp: 1,
        })
        .collect();
        let e = full
            .try_extend_from(&small, 0..1)
            .expect_err("a run past 4 GiB");
        assert_eq!(e.what, "values");
        assert_eq!(full.len(), 1, "a refused run is not added");

        // `push` past the limit saturates its offsets (no panic); the batch is refused.
        assert_eq!(offset(MAX_BATCH_BYTES + 1), u32::MAX);
        let over = one_value_of(MAX_BATCH_BYTES + 1);
        assert_eq!(
            over.check_size().map_err(|e| e.to_string()),
            Err("a batch of 1 record needs 4294967296 bytes of values, more than the 4294967295 (4 GiB) a batch can address".into())
        );
        assert!(over.validate().is_err());
    }

    #[test]
    fn validate_rejects_bad_framing() {
        let mut b = RecordBatch::default();
        b.push(b"k", b"v", 0);
        b.value_ends[0] = 9;
        assert!(b.validate().is_err());
        let mut b = RecordBatch::default();
        b.push(b"k", b"v", 0);
        b.timestamps.push(1);
        assert!(b.validate().is_err());
    }
}
