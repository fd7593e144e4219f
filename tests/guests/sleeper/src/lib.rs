//! `sleeper`: a hostile guest for the deadline tests (time blocked in host calls).
//!
//! Passes every record through unchanged, except that a record whose value is
//! `sleep <seconds>` (e.g. `sleep 300`) makes the call sleep that long with
//! `std::thread::sleep`, which waits inside the host (WASI
//! `monotonic-clock.subscribe-duration` + `poll`), where no epoch check runs. The runtime
//! must cut the wait off at the call's deadline, report the usual deadline error naming
//! this module, fail this pipeline only, and restart it from its last checkpoint.
//! A record `sleep-until <unix ms>` sleeps until that wall-clock time (not at all once
//! it has passed): a call slowed past its deadline once, as on a starved host, whose
//! second call in a fresh instance fits (the retry tests).
//! Built by `make guests` -> build/guests/sleeper.wasm.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use weir_guest::{Record, Result};

#[weir_guest::map]
fn sleeper(record: Record) -> Result<Record> {
    let value = std::str::from_utf8(&record.value).unwrap_or("");
    if let Some(seconds) = value
        .strip_prefix("sleep ")
        .and_then(|s| s.parse::<u64>().ok())
    {
        std::thread::sleep(Duration::from_secs(seconds));
    }
    if let Some(until) = value
        .strip_prefix("sleep-until ")
        .and_then(|s| s.parse::<u64>().ok())
    {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        std::thread::sleep(Duration::from_millis(until.saturating_sub(now)));
    }
    Ok(record)
}
