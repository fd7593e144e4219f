//! `agg-panicker`: a hostile aggregator for the `on_error` tests of aggregate steps.
//!
//! Counts records per key (and window), emitting `{"word":"<key>","count":N}` like
//! `word-count`, except that a record whose value is exactly `boom` makes it panic with
//! "weir-test: aggregator panicked on purpose": the whole update call traps, and the
//! runtime must find that record by folding the call's records one at a time, then
//! fail naming it (`on_error = "fail"`) or send it to the dead letters and count the
//! rest (`"dead-letter"`). A record `sleep-until <unix ms>` sleeps until that
//! wall-clock time before it counts (a call slowed past its deadline, as on a starved
//! host). Built by `make guests` -> build/guests/agg_panicker.wasm.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use weir_guest::{Record, Window};

#[weir_guest::aggregate(emit = emit_count)]
fn count(count: &mut u64, record: &Record) {
    if record.value == b"boom" {
        panic!("weir-test: aggregator panicked on purpose");
    }
    let until = std::str::from_utf8(&record.value)
        .ok()
        .and_then(|v| v.strip_prefix("sleep-until "))
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(until) = until {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        std::thread::sleep(Duration::from_millis(until.saturating_sub(now)));
    }
    *count += 1;
}

fn emit_count(key: &[u8], _window: Option<Window>, count: &u64) -> Record {
    let word = String::from_utf8_lossy(key);
    let json = format!("{{\"word\":{word:?},\"count\":{count}}}");
    Record::new(key, json)
}
