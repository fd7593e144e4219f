//! `count-twice`: version 2 of `word-count` for the upgrade tests of `weir serve`. Same
//! accumulator (a `u64` per key) and the same output, `{"word":"<key>","count":N}`, but
//! every record counts twice: an upgrade from a `word-count` savepoint continues from
//! the saved counts, so a word seen n1 times before and n2 times after ends at n1 + 2 n2.
//! Built by `make guests` -> build/guests/count_twice.wasm.

use weir_guest::{Record, Window};

#[weir_guest::aggregate(emit = emit_count)]
fn count(count: &mut u64, _record: &Record) {
    *count += 2;
}

fn emit_count(key: &[u8], _window: Option<Window>, count: &u64) -> Record {
    let word = String::from_utf8_lossy(key);
    let json = format!("{{\"word\":{word:?},\"count\":{count}}}");
    Record::new(key, json)
}
