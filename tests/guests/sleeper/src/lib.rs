//! `sleeper`: a hostile guest for the deadline tests (time blocked in host calls).
//!
//! Passes every record through unchanged, except that a record whose value is
//! `sleep <seconds>` (e.g. `sleep 300`) makes the call sleep that long with
//! `std::thread::sleep`, which waits inside the host (WASI
//! `monotonic-clock.subscribe-duration` + `poll`), where no epoch check runs. The runtime
//! must cut the wait off at the call's deadline, report the usual deadline error naming
//! this module, fail this pipeline only, and restart it from its last checkpoint.
//! Built by `make guests` -> build/guests/sleeper.wasm.

use std::time::Duration;

use weir_guest::{Record, Result};

#[weir_guest::map]
fn sleeper(record: Record) -> Result<Record> {
    let seconds = std::str::from_utf8(&record.value)
        .ok()
        .and_then(|v| v.strip_prefix("sleep "))
        .and_then(|s| s.parse::<u64>().ok());
    if let Some(seconds) = seconds {
        std::thread::sleep(Duration::from_secs(seconds));
    }
    Ok(record)
}
