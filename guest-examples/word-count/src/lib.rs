//! `word-count`: a keyed aggregate. Shows `#[weir_guest::aggregate]` with a plain `u64`
//! accumulator and an `emit` function that writes JSON.
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

use serde::Serialize;
use weir_guest::{Record, Window};

/// The emitted value; the fields serialise in this order.
#[derive(Serialize)]
struct WordCount<'a> {
    word: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    window_start: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    window_end: Option<i64>,
    count: u64,
}

#[weir_guest::aggregate(emit = emit_count)]
fn count(count: &mut u64, _record: &Record) {
    *count += 1;
}

fn emit_count(key: &[u8], window: Option<Window>, count: &u64) -> Record {
    let word = String::from_utf8_lossy(key);
    let value = WordCount {
        word: &word,
        window_start: window.map(|w| w.start),
        window_end: window.map(|w| w.end),
        count: *count,
    };
    // A struct of strings and integers always serialises.
    let json = serde_json::to_vec(&value).expect("a WordCount serialises to JSON");
    Record::new(key, json).with_timestamp(window.map_or(0, |w| w.end - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_emits_the_documented_json() {
        let mut n = 0;
        for _ in 0..3 {
            count(&mut n, &Record::new("hello", "hello"));
        }
        let unwindowed = emit_count(b"hello", None, &n);
        assert_eq!(
            unwindowed.value_str().ok(),
            Some(r#"{"word":"hello","count":3}"#)
        );
        assert_eq!(unwindowed.key, b"hello");
        let windowed = emit_count(
            b"hello",
            Some(Window {
                start: 0,
                end: 60_000,
            }),
            &n,
        );
        assert_eq!(
            windowed.value_str().ok(),
            Some(r#"{"word":"hello","window_start":0,"window_end":60000,"count":3}"#)
        );
        assert_eq!(windowed.timestamp, 59_999);
    }
}
