//! `agg-panicker`: a hostile aggregator for the `on_error` tests of aggregate steps.
//!
//! Counts records per key (and window), emitting `{"word":"<key>","count":N}` like
//! `word-count`, except that a record whose value is exactly `boom` makes it panic with
//! "weir-test: aggregator panicked on purpose": the whole update call traps, and the
//! runtime must find that record by folding the call's records one at a time, then
//! fail naming it (`on_error = "fail"`) or send it to the dead letters and count the
//! rest (`"dead-letter"`). Built by `make guests` -> build/guests/agg_panicker.wasm.

use weir_guest::{Record, Window};

#[weir_guest::aggregate(emit = emit_count)]
fn count(count: &mut u64, record: &Record) {
    if record.value == b"boom" {
        panic!("weir-test: aggregator panicked on purpose");
    }
    *count += 1;
}

fn emit_count(key: &[u8], _window: Option<Window>, count: &u64) -> Record {
    let word = String::from_utf8_lossy(key);
    let json = format!("{{\"word\":{word:?},\"count\":{count}}}");
    Record::new(key, json)
}
