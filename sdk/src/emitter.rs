//! `Emitter`: a map function's handle on the output batch, to write records into its
//! columns directly.
//!
//! Invariants:
//! - Everything emitted goes, in call order, into the columns of the one output batch
//!   of the current guest call: no `Record` and no per-record allocation in between
//!   (beyond what the user's own code allocates). A short value written through a
//!   [`ValueWriter`] passes through the emitter's one small buffer and is copied into
//!   the column once, when its record is complete.
//! - What a function emitted for an input record it then refuses (`Err`) is discarded:
//!   the SDK marks the batch's lengths before each call and truncates back to the mark on
//!   `Err` (see `mapper::run_map`), so a refused input contributes no output, exactly as
//!   with the owned forms.
//! - The batch stays well formed after every method: each method appends whole records
//!   (timestamp, key frame, value frame) or none. `emit_with`'s [`ValueWriter`] can only
//!   append to the value column and only shows the record's own bytes, so a user's
//!   closure cannot touch records emitted before.

use crate::Record;
use crate::framing::{Batch, copy_in_pieces, end_frame, extend_bytes, push_frame};
use crate::output::IntoRecords;
use crate::record_ref::RecordRef;

/// Where a map function of the form `fn(RecordRef<'_>, &mut Emitter) -> Result<()>`
/// writes its output records: zero or more per input record, in order.
///
/// ```ignore
/// #[weir_guest::map]
/// fn shout(record: RecordRef<'_>, out: &mut Emitter) -> Result<()> {
///     out.emit(record.key, record.value_str()?.to_uppercase(), record.timestamp);
///     Ok(())
/// }
/// ```
#[derive(Debug)]
pub struct Emitter<'b> {
    batch: &'b mut Batch,
    /// The buffer each [`ValueWriter`] writes a short value into, set up once per batch.
    inline: [u8; INLINE_BYTES],
}

/// The value of the record being emitted by [`Emitter::emit_with`]: appends to the
/// output batch's value column, and shows only this record's bytes.
///
/// A short value is first written into a small buffer (the emitter's, reused for every
/// record) and appended to the column in one fixed-size copy when the closure returns.
/// Each append to the buffer is a store and a bounds check against a constant; an
/// append to the column is a check of its capacity and an update of its length, both
/// read again from memory after every store, since a byte store through the column's
/// pointer might have changed them as far as the compiler knows. (For `word-count`'s
/// JSON: emit 51 -> 43 ns per key in a guest.) A value that outgrows the buffer, or
/// whose writer is asked to `reserve` more or to `extend` from an iterator, moves to
/// the column and is written there from then on.
#[derive(Debug)]
pub struct ValueWriter<'v> {
    values: &'v mut Vec<u8>,
    /// Where this record's value starts in `values`.
    start: usize,
    inline: &'v mut [u8; INLINE_BYTES],
    /// Bytes of `inline` in use; [`SPILLED`] once the value lives in `values` (from
    /// `start` on), and then `inline` is not read again for it.
    len: usize,
}

/// Bytes of a value a [`ValueWriter`] keeps in the buffer before it moves to the
/// column: a JSON record of a few fields; `uppercase`'s 64-byte values go straight to
/// the column.
const INLINE_BYTES: usize = 48;
/// `ValueWriter::len` of a value written straight into the column.
const SPILLED: usize = usize::MAX;

impl<'v> ValueWriter<'v> {
    #[inline(always)]
    fn new(values: &'v mut Vec<u8>, inline: &'v mut [u8; INLINE_BYTES]) -> Self {
        let start = values.len();
        Self {
            values,
            start,
            inline,
            len: 0,
        }
    }

    /// Whether `n` more bytes fit in the buffer (never once the value has moved).
    #[inline(always)]
    fn has_room(&self, n: usize) -> bool {
        n <= INLINE_BYTES && self.len <= INLINE_BYTES - n
    }

    /// Moves the value to the column if it is not there yet: what the buffer holds is
    /// appended to the column (nothing to append for an empty value, the common case
    /// of a writer that starts with `reserve` or `extend`).
    #[inline(always)]
    fn spill(&mut self) {
        match self.len {
            SPILLED => {}
            0 => self.len = SPILLED,
            _ => self.move_to_column(),
        }
    }

    #[cold]
    fn move_to_column(&mut self) {
        extend_bytes(self.values, &self.inline[..self.len]);
        self.len = SPILLED;
    }

    /// Appends what is still in the buffer to the column: all 48 bytes (a copy of a
    /// length known at compile time, loads and stores), then the column cut back to
    /// the value's end.
    #[inline(always)]
    fn finish(&mut self) {
        if self.len != SPILLED {
            self.values.extend_from_slice(&self.inline[..]);
            self.values.truncate(self.start + self.len);
        }
    }

    /// Appends `bytes` to the value.
    #[inline(always)]
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        if self.len == SPILLED {
            extend_bytes(self.values, bytes);
        } else if self.has_room(bytes.len()) {
            copy_in_pieces(&mut self.inline[self.len..self.len + bytes.len()], bytes);
            self.len += bytes.len();
        } else {
            self.move_to_column();
            extend_bytes(self.values, bytes);
        }
    }

    /// Appends `text` (as UTF-8) to the value.
    #[inline(always)]
    pub fn push_str(&mut self, text: &str) {
        self.extend_from_slice(text.as_bytes());
    }

    /// Appends one byte to the value.
    #[inline(always)]
    pub fn push(&mut self, byte: u8) {
        if self.len < INLINE_BYTES {
            self.inline[self.len] = byte;
            self.len += 1;
        } else {
            self.spill();
            self.values.push(byte);
        }
    }

    /// Appends `text` as a JSON string literal: quoted, with `"`, `\\` and the control
    /// characters escaped exactly as `serde_json` writes them (`\\n`, `\\u001f`, ...), so a
    /// JSON value can be written piece by piece without a serialiser or a buffer.
    pub fn push_json_str(&mut self, text: &str) {
        if self.push_clean_json_str(text.as_bytes()) {
            return;
        }
        self.push_json_escaped(text.as_bytes());
    }

    /// Appends `bytes` as a JSON string literal like [`Self::push_json_str`] of
    /// `String::from_utf8_lossy(bytes)`: invalid UTF-8 becomes U+FFFD, the rest is
    /// escaped exactly as `serde_json` does. ASCII (the common case: keys, words)
    /// is escaped straight from `bytes`, with no UTF-8 pass and no copy.
    pub fn push_json_str_lossy(&mut self, bytes: &[u8]) {
        if self.push_clean_json_str(bytes) {
            return;
        }
        if bytes.is_ascii() {
            self.push_json_escaped(bytes);
        } else {
            self.push_json_escaped(String::from_utf8_lossy(bytes).as_bytes());
        }
    }

    /// The escaping of [`Self::push_json_str`] over the bytes of valid UTF-8 (only
    /// ASCII bytes are ever escaped, so multi-byte sequences pass through whole).
    fn push_json_escaped(&mut self, bytes: &[u8]) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let needs_escape = |b: u8| b < 0x20 || b == b'"' || b == b'\\';
        self.reserve(bytes.len() + 2);
        self.push(b'"');
        if !bytes.iter().fold(false, |any, &b| any | needs_escape(b)) {
            self.extend_from_slice(bytes);
            self.push(b'"');
            return;
        }
        let mut clean = 0;
        for (i, &b) in bytes.iter().enumerate() {
            let short = match b {
                b'"' => b'"',
                b'\\' => b'\\',
                b'\n' => b'n',
                b'\r' => b'r',
                b'\t' => b't',
                0x08 => b'b',
                0x0c => b'f',
                0x00..=0x1f => b'u',
                _ => continue,
            };
            self.extend_from_slice(&bytes[clean..i]);
            clean = i + 1;
            if short == b'u' {
                let (hi, lo) = (HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]);
                self.extend_from_slice(&[b'\\', b'u', b'0', b'0', hi, lo]);
            } else {
                self.extend_from_slice(&[b'\\', short]);
            }
        }
        self.extend_from_slice(&bytes[clean..]);
        self.push(b'"');
    }

    /// Appends `n` in decimal, as `write!(value, "{n}")` would, without `core::fmt`
    /// (whose machinery costs a guest far more than the digits).
    ///
    /// Below 10^8 (counts, sums, most numbers a guest writes) the eight digit places are
    /// computed at once in one `u64` ([`digit_bytes`]), appended whole and cut back to
    /// the digits: no division, no loop, no copy of a variable length (which WebAssembly
    /// runs as a call out to the host). Larger numbers take `u32` arithmetic nine digits
    /// at a time: WebAssembly has no 64 x 64 -> 128-bit multiply, so a `u64` division by
    /// a constant stays a real division instruction per digit, while a `u32` one becomes
    /// a multiply and a shift.
    pub fn push_u64(&mut self, n: u64) {
        const EIGHT_DIGITS: u64 = 100_000_000;
        const NINE_DIGITS: u64 = 1_000_000_000;
        if n < EIGHT_DIGITS {
            let digits = digit_bytes(n as u32);
            // Leading zero digits are the low zero bytes; `0` keeps its last digit.
            let leading = (digits.trailing_zeros() / 8).min(7);
            let ascii = (digits + 0x3030_3030_3030_3030) >> (8 * leading);
            let count = 8 - leading as usize;
            if self.has_room(8) {
                self.inline[self.len..self.len + 8].copy_from_slice(&ascii.to_le_bytes());
                self.len += count;
            } else {
                self.spill();
                let start = self.values.len();
                self.values.extend_from_slice(&ascii.to_le_bytes());
                self.values.truncate(start + count);
            }
            return;
        }
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut rest = n;
        // At most two rounds: u64::MAX has 20 digits.
        while rest >= NINE_DIGITS {
            let low = (rest % NINE_DIGITS) as u32;
            rest /= NINE_DIGITS;
            at = write_digits(&mut digits[..at], low, 9);
        }
        at = write_digits(&mut digits[..at], rest as u32, 1);
        self.extend_from_slice(&digits[at..]);
    }

    /// Appends `n` in decimal, with a `-` when negative, as `write!` would.
    pub fn push_i64(&mut self, n: i64) {
        if n < 0 {
            self.push(b'-');
        }
        self.push_u64(n.unsigned_abs());
    }

    /// Reserves room for at least `additional` more bytes.
    pub fn reserve(&mut self, additional: usize) {
        if !self.has_room(additional) {
            self.spill();
            self.values.reserve(additional);
        }
    }

    /// The value written so far, to edit in place (e.g. `make_ascii_uppercase`).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match self.len {
            SPILLED => &mut self.values[self.start..],
            len => &mut self.inline[..len],
        }
    }

    /// The value written so far.
    pub fn as_slice(&self) -> &[u8] {
        match self.len {
            SPILLED => &self.values[self.start..],
            len => &self.inline[..len],
        }
    }

    /// Appends a short `bytes` as a JSON string literal if it is printable ASCII other
    /// than `"` and `\\` (a key, a word: nothing to escape or replace); false, having
    /// appended nothing, for anything else. One byte loop that stops at the first byte
    /// it cannot pass: for a short string, far fewer instructions than the vectorised
    /// scans (`is_ascii`, then the escape check) whose set-up dominates at a few bytes.
    #[inline(always)]
    fn push_clean_json_str(&mut self, bytes: &[u8]) -> bool {
        if bytes.len() > SHORT_JSON_STR_BYTES
            || !bytes
                .iter()
                .all(|&b| (0x20..0x80).contains(&b) && b != b'"' && b != b'\\')
        {
            return false;
        }
        self.reserve(bytes.len() + 2);
        self.push(b'"');
        self.extend_from_slice(bytes);
        self.push(b'"');
        true
    }
}

/// Longest string [`push_clean_json_str`] scans byte by byte.
const SHORT_JSON_STR_BYTES: usize = 32;

/// The eight decimal digits of `n` (< 10^8, zero-padded), one per byte as values 0-9,
/// most significant first in memory order (the `u64`'s low byte first): the digits
/// computed in parallel lanes of one `u64` (SWAR), by multiplications and shifts only.
fn digit_bytes(n: u32) -> u64 {
    debug_assert!(n < 100_000_000);
    let n = u64::from(n);
    // Two 32-bit lanes: the upper four digits (low lane: first in memory), the lower four.
    let fours = (n / 10_000) | ((n % 10_000) << 32);
    // Each lane (< 10^4) into two 16-bit lanes (< 100): v / 100, then v % 100.
    // x * 10_486 >> 20 is x / 100 for every x < 10^4 (checked by a test).
    let hundreds = ((fours * 10_486) >> 20) & 0x0000_007F_0000_007F;
    let twos = ((fours - 100 * hundreds) << 16) | hundreds;
    // Each 16-bit lane (< 100) into two bytes: w / 10, then w % 10. x * 103 >> 10 is
    // x / 10 for every x < 100.
    let tens = ((twos * 103) >> 10) & 0x000F_000F_000F_000F;
    ((twos - 10 * tens) << 8) | tens
}

/// Writes `n` in decimal, zero-padded to at least `min_digits`, so that it ends where
/// `digits` ends; the index of its first digit.
fn write_digits(digits: &mut [u8], mut n: u32, min_digits: usize) -> usize {
    let end = digits.len();
    let mut at = end;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 && end - at >= min_digits {
            return at;
        }
    }
}

/// Appends an iterator's bytes (`value.extend(bytes.iter().map(u8::to_ascii_uppercase))`)
/// through `Vec::extend`, which reserves once for an iterator of known length (a slice's
/// bytes mapped one to one) and then writes without a capacity check per byte: a loop
/// the compiler turns into SIMD steps, where pushing the bytes one by one, or in pieces,
/// pays a check and a length update each.
impl Extend<u8> for ValueWriter<'_> {
    #[inline(always)]
    fn extend<I: IntoIterator<Item = u8>>(&mut self, bytes: I) {
        self.spill();
        self.values.extend(bytes);
    }
}

impl core::fmt::Write for ValueWriter<'_> {
    fn write_str(&mut self, text: &str) -> core::fmt::Result {
        self.push_str(text);
        Ok(())
    }
}

impl std::io::Write for ValueWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The output batch's lengths at some point, to truncate back to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    records: usize,
    key_bytes: usize,
    value_bytes: usize,
}

impl<'b> Emitter<'b> {
    pub(crate) fn new(batch: &'b mut Batch) -> Self {
        Self {
            batch,
            inline: [0; INLINE_BYTES],
        }
    }

    /// Emits one record with these key and value bytes (copied into the output batch)
    /// and this event time. An empty key means "no key".
    pub fn emit(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>, timestamp: i64) {
        self.batch.push(key.as_ref(), value.as_ref(), timestamp);
    }

    /// Emits `record` unchanged (a filter's "keep").
    pub fn emit_ref(&mut self, record: RecordRef<'_>) {
        self.batch.push(record.key, record.value, record.timestamp);
    }

    /// Emits one record whose value `write_value` writes into the output batch's value
    /// column through a [`ValueWriter`] (which can only append this record's bytes).
    /// Saves building the value elsewhere and copying it.
    pub fn emit_with(
        &mut self,
        key: impl AsRef<[u8]>,
        timestamp: i64,
        write_value: impl FnOnce(&mut ValueWriter<'_>),
    ) {
        let Batch {
            timestamps,
            key_ends,
            keys,
            value_ends,
            values,
        } = &mut *self.batch;
        let mut value = ValueWriter::new(values, &mut self.inline);
        write_value(&mut value);
        value.finish();
        timestamps.push(timestamp);
        push_frame(key_ends, keys, key.as_ref());
        end_frame(value_ends, values);
    }

    /// Emits owned records: a [`crate::Record`], an `Option<Record>` or a `Vec<Record>`.
    pub fn extend(&mut self, records: impl IntoRecords) {
        records.push_into(self.batch);
    }

    /// Runs `f` with an emitter of its own and returns what it emitted, in order: for
    /// unit tests of emitting map and emit functions, run natively.
    ///
    /// ```
    /// use weir_guest::Emitter;
    /// let records = Emitter::capture(|out| out.emit("k", "v", 7));
    /// assert_eq!((records[0].key.as_slice(), records[0].timestamp), (&b"k"[..], 7));
    /// ```
    pub fn capture(f: impl FnOnce(&mut Emitter<'_>)) -> Vec<Record> {
        let mut batch = Batch::default();
        f(&mut Emitter::new(&mut batch));
        batch
            .iter()
            .map(|(key, value, timestamp)| Record::new(key, value).with_timestamp(timestamp))
            .collect()
    }

    /// Records emitted so far in this guest call (for every input record until now).
    pub fn len(&self) -> usize {
        self.batch.len()
    }

    /// Whether nothing was emitted so far in this guest call.
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    pub(crate) fn mark(&self) -> Mark {
        Mark {
            records: self.batch.timestamps.len(),
            key_bytes: self.batch.keys.len(),
            value_bytes: self.batch.values.len(),
        }
    }

    /// Forgets everything emitted since `mark`.
    pub(crate) fn truncate(&mut self, mark: Mark) {
        let batch = &mut *self.batch;
        batch.timestamps.truncate(mark.records);
        batch.key_ends.truncate(mark.records);
        batch.value_ends.truncate(mark.records);
        batch.keys.truncate(mark.key_bytes);
        batch.values.truncate(mark.value_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(batch: &Batch) -> Vec<(Vec<u8>, Vec<u8>, i64)> {
        batch
            .iter()
            .map(|(k, v, t)| (k.to_vec(), v.to_vec(), t))
            .collect()
    }

    #[test]
    fn every_form_appends_whole_records_in_order() {
        let mut batch = Batch::default();
        let mut out = Emitter::new(&mut batch);
        out.emit("a", "1", 1);
        out.emit_ref(RecordRef {
            key: b"",
            value: b"2",
            timestamp: 2,
        });
        out.emit_with(b"c", 3, |v| {
            v.push_str("th");
            v.extend_from_slice(b"re");
            v.push(b'e');
            assert_eq!(v.as_slice(), b"three");
        });
        out.emit_with(b"x", 7, |v| {
            v.extend(b"upper".iter().map(u8::to_ascii_uppercase));
            v.extend(*b"!");
            assert_eq!(v.as_slice(), b"UPPER!");
        });
        out.emit_with("", 4, |_| {});
        out.extend(vec![Record::new("e", "5"), Record::new("f", "6")]);
        out.extend(None::<Record>);
        assert_eq!(out.len(), 7);
        let b = |s: &str| s.as_bytes().to_vec();
        assert_eq!(
            rows(&batch),
            [
                (b("a"), b("1"), 1),
                (b(""), b("2"), 2),
                (b("c"), b("three"), 3),
                (b("x"), b("UPPER!"), 7),
                (b(""), b(""), 4),
                (b("e"), b("5"), 0),
                (b("f"), b("6"), 0),
            ]
        );
    }

    /// Every writer method, in pseudo-random order and sizes, against a plain `Vec`:
    /// values that stay in the writer's buffer, fill it exactly, outgrow it in one
    /// append or piece by piece, or move to the column at once (`reserve`, `extend`),
    /// read and edited in place at every step.
    #[test]
    fn a_value_writer_writes_what_a_vec_would_across_its_buffer_bound() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        };
        let text: Vec<u8> = (0..200u8).map(|i| b'a' + i % 26).collect();
        let mut batch = Batch::default();
        let mut expected = Vec::new();
        let mut out = Emitter::new(&mut batch);
        for record in 0..2_000 {
            let ops = next(12);
            let mut model = Vec::new();
            out.emit_with(b"k", record, |value| {
                for _ in 0..ops {
                    let n = next(70) as usize;
                    match next(9) {
                        0 => {
                            value.push(b'x');
                            model.push(b'x');
                        }
                        1 => {
                            value.extend_from_slice(&text[..n]);
                            model.extend_from_slice(&text[..n]);
                        }
                        2 => {
                            let s = std::str::from_utf8(&text[..n % 20]).unwrap_or("");
                            value.push_str(s);
                            model.extend_from_slice(s.as_bytes());
                        }
                        3 => {
                            let shift = next(64) as u32;
                            let x = next(u64::MAX >> shift);
                            value.push_u64(x);
                            model.extend_from_slice(x.to_string().as_bytes());
                        }
                        4 => {
                            let x = -(next(1 << 40) as i64);
                            value.push_i64(x);
                            model.extend_from_slice(x.to_string().as_bytes());
                        }
                        5 => {
                            value.push_json_str_lossy(&text[..n % 40]);
                            model.push(b'"');
                            model.extend_from_slice(&text[..n % 40]);
                            model.push(b'"');
                        }
                        6 => {
                            value.extend(text[..n].iter().map(u8::to_ascii_uppercase));
                            model.extend(text[..n].iter().map(u8::to_ascii_uppercase));
                        }
                        7 => value.reserve(n),
                        _ => {
                            value.as_mut_slice().make_ascii_uppercase();
                            model.make_ascii_uppercase();
                        }
                    }
                    assert_eq!(value.as_slice(), model.as_slice());
                }
            });
            expected.push(model);
        }
        let values: Vec<&[u8]> = batch.iter().map(|(_, v, _)| v).collect();
        assert_eq!(values, expected);
        assert!(
            batch
                .iter()
                .enumerate()
                .all(|(i, (k, _, t))| k == b"k" && t == i as i64)
        );
    }

    #[test]
    fn a_value_writer_sees_and_edits_only_its_own_record() {
        use core::fmt::Write as _;
        let mut batch = Batch::default();
        let mut out = Emitter::new(&mut batch);
        out.emit("k", "earlier", 1);
        out.emit_with("k", 2, |v| {
            let _ = write!(v, "n={}", 42);
            v.as_mut_slice().make_ascii_uppercase();
        });
        out.emit_with("k", 3, |v| {
            let _ = std::io::Write::write_all(v, b"io");
        });
        let values: Vec<Vec<u8>> = batch.iter().map(|(_, v, _)| v.to_vec()).collect();
        assert_eq!(values, [&b"earlier"[..], b"N=42", b"io"]);
    }

    #[test]
    fn truncate_to_a_mark_forgets_exactly_what_followed() {
        let mut batch = Batch::default();
        let mut out = Emitter::new(&mut batch);
        out.emit("keep", "me", 1);
        let mark = out.mark();
        out.emit("drop", "this", 2);
        out.emit_with("and", 3, |v| v.extend_from_slice(b"this"));
        out.truncate(mark);
        assert!(!out.is_empty());
        out.emit("then", "more", 4);
        let mut expected = Batch::default();
        expected.push(b"keep", b"me", 1);
        expected.push(b"then", b"more", 4);
        assert_eq!(batch, expected);
    }

    #[test]
    fn integers_are_written_as_display_writes_them() {
        // Around the nine-digit chunks (zeros inside a chunk included) and u32::MAX.
        let unsigned = [
            0,
            1,
            9,
            10,
            99,
            100,
            999_999_999,
            1_000_000_000,
            1_000_000_001,
            4_294_967_295,
            4_294_967_296,
            123_000_000_456,
            1_000_000_000_000_000_000,
            10_000_000_000_000_000_007,
            u64::MAX,
        ];
        let signed = [0, -1, 7, -10, 12_345, -1_000_000_000, i64::MIN, i64::MAX];
        let records = Emitter::capture(|out| {
            for n in unsigned {
                out.emit_with("u", 0, |value| value.push_u64(n));
            }
            for n in signed {
                out.emit_with("i", 0, |value| value.push_i64(n));
            }
        });
        let expected = unsigned
            .iter()
            .map(ToString::to_string)
            .chain(signed.iter().map(ToString::to_string));
        let written = records
            .iter()
            .map(|r| r.value_str().unwrap_or("?").to_owned());
        assert!(written.eq(expected));
    }

    #[test]
    fn the_eight_digit_path_writes_what_display_writes() {
        // The two divisions by multiplication, over their whole domains.
        assert!((0..10_000u64).all(|x| (x * 10_486) >> 20 == x / 100));
        assert!((0..100u64).all(|x| (x * 103) >> 10 == x / 10));
        // Every number of up to five digits, then a stride over the rest below 10^8 with
        // the numbers either side of each power of ten and the largest.
        let mut numbers: Vec<u64> = (0..100_000).collect();
        numbers.extend((100_000..100_000_000).step_by(9_973));
        for p in 5..=8 {
            numbers.extend([10u64.pow(p) - 1, 10u64.pow(p), 10u64.pow(p) + 1]);
        }
        let mut batch = Batch::default();
        let mut out = Emitter::new(&mut batch);
        for &n in &numbers {
            out.emit_with(b"", 0, |value| {
                value.push(b'<');
                value.push_u64(n);
                value.push(b'>');
            });
        }
        let written = batch.iter().map(|(_, value, _)| value);
        let expected = numbers.iter().map(|n| format!("<{n}>"));
        for (written, expected) in written.zip(expected) {
            assert_eq!(written, expected.as_bytes());
        }
        assert_eq!(batch.len(), numbers.len());
    }

    #[cfg(feature = "json")]
    #[test]
    fn short_strings_of_every_byte_are_escaped_as_serde_json_escapes_them() {
        // Short strings take a byte loop of their own (`push_clean_json_str`): every
        // byte, alone and inside a word, and strings either side of its length bound.
        let mut cases: Vec<Vec<u8>> = Vec::new();
        for b in 0..=u8::MAX {
            cases.push(vec![b]);
            cases.push(vec![b'a', b, b'z']);
        }
        for len in [SHORT_JSON_STR_BYTES, SHORT_JSON_STR_BYTES + 1] {
            cases.push(vec![b'w'; len]);
            let mut quoted = vec![b'w'; len - 1];
            quoted.push(b'"');
            cases.push(quoted);
        }
        for bytes in &cases {
            let lossy = Emitter::capture(|out| {
                out.emit_with("k", 0, |value| value.push_json_str_lossy(bytes));
            });
            let text = String::from_utf8_lossy(bytes);
            let expected = serde_json::to_string(&text).expect("a string serialises");
            assert_eq!(
                lossy[0].value_str().ok(),
                Some(expected.as_str()),
                "{bytes:?}"
            );
            let exact = Emitter::capture(|out| {
                out.emit_with("k", 0, |value| value.push_json_str(&text));
            });
            assert_eq!(
                exact[0].value_str().ok(),
                Some(expected.as_str()),
                "{text:?}"
            );
        }
    }

    #[test]
    fn lossy_json_strings_match_serde_json_of_the_lossy_text() {
        let cases: [&[u8]; 6] = [
            b"",
            b"ascii word",
            b"tab\there \"quoted\" \x01",
            "caf\u{e9}".as_bytes(),
            b"bad \xff\xfe utf-8 \n",
            b"\xe2\x82",
        ];
        for bytes in cases {
            let records = Emitter::capture(|out| {
                out.emit_with("k", 0, |value| value.push_json_str_lossy(bytes));
            });
            let expected = serde_json::to_string(&String::from_utf8_lossy(bytes))
                .expect("a string serialises");
            assert_eq!(
                records[0].value_str().ok(),
                Some(expected.as_str()),
                "{bytes:?}"
            );
        }
    }

    #[cfg(feature = "json")]
    #[test]
    fn a_json_string_is_escaped_exactly_as_serde_json_escapes_it() {
        let mut every_byte = String::new();
        for c in (0u8..0x80).map(char::from) {
            every_byte.push(c);
        }
        for text in [
            "",
            "plain",
            "quote \" and backslash \\ inside",
            "line\nbreak\r\ttab\u{8}\u{c}",
            "caf\u{e9} \u{1F600} \u{fffd}",
            &every_byte,
        ] {
            let records = Emitter::capture(|out| {
                out.emit_with("k", 0, |value| value.push_json_str(text));
            });
            let expected = serde_json::to_string(text).expect("a string serialises");
            assert_eq!(
                records[0].value_str().ok(),
                Some(expected.as_str()),
                "{text:?}"
            );
        }
    }
}
