//! `word-count`: a keyed aggregate. Shows `#[weir_guest::aggregate]` with a plain `u64`
//! accumulator, an update that reads each record in place (`RecordRef`: nothing is
//! copied for it) and an `emit` function that writes JSON straight into the output
//! batch (the `Emitter` form of `emit`).
//!
//! Counts the records of each key (the word, after `split-words` and a `key-by`), per
//! window when the step is windowed. Every record counts: this step never rejects. The
//! runtime keeps each count in its state backend and checkpoints it, so counts are
//! exactly-once across failures. Each emitted record has key = the word and value
//!   `{"word":"<key>","count":N}`                                      (unwindowed)
//!   `{"word":"<key>","window_start":S,"window_end":E,"count":N}`      (windowed)
//! with S and E the window's `[start, end)` in ms since the Unix epoch. A key that is
//! not UTF-8 is written with U+FFFD in place of its invalid bytes.
//!
//! Build: `make guests` (-> build/guests/word_count.wasm); `make demo` runs it.

use weir_guest::{Emitter, RecordRef, Window};

#[weir_guest::aggregate(emit = emit_count)]
fn count(count: &mut u64, _record: RecordRef<'_>) {
    *count += 1;
}

/// Writes the JSON straight into the output batch, field by field: no serialiser, no
/// buffer of its own per key and no `core::fmt` (a `serde_json::to_vec` of a struct
/// here cost about twice this whole function inside the guest, and `write!` of the
/// numbers with a lossy `String` of the key most of the rest).
fn emit_count(key: &[u8], window: Option<Window>, count: &u64, out: &mut Emitter<'_>) {
    out.emit_with(key, window.map_or(0, |w| w.end - 1), |json| {
        json.push_str(r#"{"word":"#);
        json.push_json_str_lossy(key);
        if let Some(w) = window {
            json.push_str(r#","window_start":"#);
            json.push_i64(w.start);
            json.push_str(r#","window_end":"#);
            json.push_i64(w.end);
        }
        json.push_str(r#","count":"#);
        json.push_u64(*count);
        json.push(b'}');
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_guest::Record;

    /// The one record `emit_count` emits.
    fn emitted(key: &[u8], window: Option<Window>, count: u64) -> Record {
        let mut records = Emitter::capture(|out| emit_count(key, window, &count, out));
        assert_eq!(records.len(), 1);
        records.remove(0)
    }

    #[test]
    fn counts_and_emits_the_documented_json() {
        let mut n = 0;
        for _ in 0..3 {
            count(&mut n, (&Record::new("hello", "hello")).into());
        }
        let unwindowed = emitted(b"hello", None, n);
        assert_eq!(
            unwindowed.value_str().ok(),
            Some(r#"{"word":"hello","count":3}"#)
        );
        assert_eq!(unwindowed.key, b"hello");
        let windowed = emitted(
            b"hello",
            Some(Window {
                start: 0,
                end: 60_000,
            }),
            n,
        );
        assert_eq!(
            windowed.value_str().ok(),
            Some(r#"{"word":"hello","window_start":0,"window_end":60000,"count":3}"#)
        );
        assert_eq!(windowed.timestamp, 59_999);
    }

    #[test]
    fn a_key_is_escaped_and_invalid_utf8_replaced() {
        let odd = emitted(b"say \"hi\"\\\n\xff", None, 2);
        assert_eq!(
            odd.value_str().ok(),
            Some("{\"word\":\"say \\\"hi\\\"\\\\\\n\u{fffd}\",\"count\":2}")
        );
        assert_eq!(odd.key, b"say \"hi\"\\\n\xff");
    }
}
