//! The columnar framing of the contract (`wit/weir.wit`), as plain Rust: no bindings,
//! so it runs and is tested on the host.
//!
//! A list of N byte strings travels as `ends: list<u32>` (exclusive end offset of each
//! string) plus `bytes: list<u8>`: string `i` is `bytes[ends[i-1]..ends[i]]`, with
//! `ends[-1] = 0`. A `record-batch` is three such columns (keys, values) plus
//! `timestamps`. Input comes from the trusted runtime; a malformed frame is a host bug,
//! so it panics (the call traps) with a message naming the column.

use crate::Record;

/// The contract's `record-batch`, owned: the five columns, field for field.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Batch {
    pub timestamps: Vec<i64>,
    pub key_ends: Vec<u32>,
    pub keys: Vec<u8>,
    pub value_ends: Vec<u32>,
    pub values: Vec<u8>,
}

impl Batch {
    /// An empty batch with room for `records` records of `key_bytes` + `value_bytes`
    /// bytes in all, so that filling it does not reallocate.
    pub fn with_capacity(records: usize, key_bytes: usize, value_bytes: usize) -> Self {
        Self {
            timestamps: Vec::with_capacity(records),
            key_ends: Vec::with_capacity(records),
            keys: Vec::with_capacity(key_bytes),
            value_ends: Vec::with_capacity(records),
            values: Vec::with_capacity(value_bytes),
        }
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.timestamps.len()
    }

    /// Whether the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.timestamps.is_empty()
    }

    /// Appends one record (copies its bytes into the columns).
    pub fn push(&mut self, key: &[u8], value: &[u8], timestamp: i64) {
        self.timestamps.push(timestamp);
        push_frame(&mut self.key_ends, &mut self.keys, key);
        push_frame(&mut self.value_ends, &mut self.values, value);
    }

    /// Appends `record`.
    pub fn push_record(&mut self, record: &Record) {
        self.push(&record.key, &record.value, record.timestamp);
    }

    /// The records, as `(key, value, timestamp)` borrowed from the columns.
    ///
    /// # Panics
    /// If the columns are not a well-formed batch (lengths differ, offsets decrease or
    /// run past the bytes): only a broken host sends that.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8], i64)> + '_ {
        let n = self.timestamps.len();
        assert!(
            self.key_ends.len() == n && self.value_ends.len() == n,
            "weir-guest: malformed record-batch from the host: {n} timestamps, {} key ends, \
             {} value ends",
            self.key_ends.len(),
            self.value_ends.len(),
        );
        frames(&self.key_ends, &self.keys, "keys")
            .zip(frames(&self.value_ends, &self.values, "values"))
            .zip(self.timestamps.iter().copied())
            .map(|((key, value), timestamp)| (key, value, timestamp))
    }
}

/// Appends `bytes` as the next frame of an `ends` + `buffer` column.
///
/// # Panics
/// If the column would exceed 4 GiB, which the contract's `u32` offsets cannot express
/// (a guest's memory limit is far below that).
pub fn push_frame(ends: &mut Vec<u32>, buffer: &mut Vec<u8>, bytes: &[u8]) {
    extend_bytes(buffer, bytes);
    ends.push(offset(buffer.len()));
}

/// Longest byte string [`extend_bytes`] copies in fixed-size pieces.
const SHORT_COPY_BYTES: usize = 32;

/// Appends `bytes` to `buffer`, like `extend_from_slice`. In WebAssembly a copy whose
/// length is not known at compile time is a `memory.copy`, which wasmtime runs as a call
/// out of the guest into the host, worth far more than the copy of a short key, word or
/// number; a copy of a fixed 8, 4, 2 or 1 bytes is a load and a store. So a short
/// string is copied in such pieces, a long one in bulk. Always inlined: where the
/// length is known at compile time (`push_str` of a literal), the copy is then just its
/// pieces, with no branch on the length and no call.
#[inline(always)]
pub(crate) fn extend_bytes(buffer: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.len() > SHORT_COPY_BYTES {
        buffer.extend_from_slice(bytes);
        return;
    }
    buffer.reserve(bytes.len());
    let mut rest = bytes;
    while let Some((piece, tail)) = rest.split_first_chunk::<8>() {
        buffer.extend_from_slice(piece);
        rest = tail;
    }
    if let Some((piece, tail)) = rest.split_first_chunk::<4>() {
        buffer.extend_from_slice(piece);
        rest = tail;
    }
    if let Some((piece, tail)) = rest.split_first_chunk::<2>() {
        buffer.extend_from_slice(piece);
        rest = tail;
    }
    if let Some(&byte) = rest.first() {
        buffer.push(byte);
    }
}

/// Copies `bytes` into `dest` (of the same length) in fixed-size pieces, like
/// [`extend_bytes`].
#[inline(always)]
pub(crate) fn copy_in_pieces(dest: &mut [u8], bytes: &[u8]) {
    if bytes.len() > SHORT_COPY_BYTES {
        dest.copy_from_slice(bytes);
        return;
    }
    let (mut dest, mut rest) = (dest, bytes);
    while let Some((piece, tail)) = rest.split_first_chunk::<8>() {
        let (to, dest_tail) = dest.split_at_mut(8);
        to.copy_from_slice(piece);
        (dest, rest) = (dest_tail, tail);
    }
    if let Some((piece, tail)) = rest.split_first_chunk::<4>() {
        let (to, dest_tail) = dest.split_at_mut(4);
        to.copy_from_slice(piece);
        (dest, rest) = (dest_tail, tail);
    }
    if let Some((piece, tail)) = rest.split_first_chunk::<2>() {
        let (to, dest_tail) = dest.split_at_mut(2);
        to.copy_from_slice(piece);
        (dest, rest) = (dest_tail, tail);
    }
    if let (Some(&byte), Some(to)) = (rest.first(), dest.first_mut()) {
        *to = byte;
    }
}

/// Records the end of a frame whose bytes were already appended to `buffer`.
pub fn end_frame(ends: &mut Vec<u32>, buffer: &[u8]) {
    ends.push(offset(buffer.len()));
}

fn offset(len: usize) -> u32 {
    u32::try_from(len)
        .unwrap_or_else(|_| panic!("weir-guest: output column exceeds 4 GiB ({len} bytes)"))
}

/// The frames of an `ends` + `bytes` column, in order.
///
/// # Panics
/// On an offset that decreases or runs past `bytes`, naming `column`.
pub fn frames<'a>(
    ends: &'a [u32],
    bytes: &'a [u8],
    column: &'static str,
) -> impl ExactSizeIterator<Item = &'a [u8]> + 'a {
    let mut start = 0usize;
    ends.iter().enumerate().map(move |(i, &end)| {
        let end = end as usize;
        let frame = bytes.get(start..end).unwrap_or_else(|| {
            panic!(
                "weir-guest: malformed `{column}` column from the host: frame {i} spans \
                 {start}..{end} of {} bytes",
                bytes.len()
            )
        });
        start = end;
        frame
    })
}

/// The `[start, end)` index ranges of groups given their exclusive `ends` over `total`
/// items (the framing of `group-batch.record-ends`).
///
/// # Panics
/// On an end that decreases or exceeds `total`, naming `column`.
pub fn ranges<'a>(
    ends: &'a [u32],
    total: usize,
    column: &'static str,
) -> impl ExactSizeIterator<Item = core::ops::Range<usize>> + 'a {
    let mut start = 0usize;
    ends.iter().enumerate().map(move |(i, &end)| {
        let end = end as usize;
        assert!(
            start <= end && end <= total,
            "weir-guest: malformed `{column}` column from the host: group {i} spans \
             {start}..{end} of {total} records"
        );
        let range = start..end;
        start = end;
        range
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch_of(records: &[(&[u8], &[u8], i64)]) -> Batch {
        let mut batch = Batch::default();
        for &(key, value, timestamp) in records {
            batch.push(key, value, timestamp);
        }
        batch
    }

    #[test]
    fn push_then_iter_round_trips_including_empty_keys_and_values() {
        let records: &[(&[u8], &[u8], i64)] = &[
            (b"k1", b"hello", 1),
            (b"", b"no key", -5),
            (b"k3", b"", i64::MAX),
            (b"", b"", 0),
        ];
        let batch = batch_of(records);
        assert_eq!(batch.len(), 4);
        assert_eq!(batch.key_ends, [2, 2, 4, 4]);
        assert_eq!(batch.value_ends, [5, 11, 11, 11]);
        assert_eq!(batch.keys, b"k1k3");
        assert_eq!(batch.iter().collect::<Vec<_>>(), records);
    }

    #[test]
    fn an_empty_batch_has_no_records() {
        let batch = Batch::default();
        assert!(batch.is_empty());
        assert_eq!(batch.iter().count(), 0);
    }

    #[test]
    fn frames_and_ranges_follow_exclusive_ends() {
        let frames: Vec<&[u8]> = frames(&[1, 1, 4], b"abcd", "test").collect();
        assert_eq!(frames, [&b"a"[..], b"", b"bcd"]);
        let ranges: Vec<_> = ranges(&[2, 2, 5], 5, "test").collect();
        assert_eq!(ranges, [0..2, 2..2, 2..5]);
    }

    #[test]
    #[should_panic(expected = "malformed `values` column")]
    fn a_value_end_past_the_bytes_panics_naming_the_column() {
        let batch = Batch {
            timestamps: vec![0],
            key_ends: vec![0],
            keys: vec![],
            value_ends: vec![3],
            values: b"ab".to_vec(),
        };
        let _ = batch.iter().count();
    }

    #[test]
    #[should_panic(expected = "malformed `keys` column")]
    fn a_decreasing_end_panics() {
        let _ = frames(&[2, 1], b"ab", "keys").count();
    }

    #[test]
    #[should_panic(expected = "malformed record-batch")]
    fn columns_of_different_lengths_panic() {
        let batch = Batch {
            timestamps: vec![0, 1],
            key_ends: vec![0],
            ..Batch::default()
        };
        let _ = batch.iter().count();
    }

    #[test]
    #[should_panic(expected = "group 1 spans 3..2")]
    fn a_decreasing_group_end_panics() {
        let _ = ranges(&[3, 2], 3, "record-ends").count();
    }

    #[test]
    fn extend_bytes_appends_exactly_what_extend_from_slice_does() {
        let source: Vec<u8> = (0..=80).collect();
        for len in 0..=source.len() {
            let mut expected = b"head".to_vec();
            expected.extend_from_slice(&source[..len]);
            let mut buffer = b"head".to_vec();
            extend_bytes(&mut buffer, &source[..len]);
            assert_eq!(buffer, expected, "{len} bytes");
        }
    }
}
