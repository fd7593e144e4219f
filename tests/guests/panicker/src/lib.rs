//! `panicker`: a hostile guest for the trap tests.
//!
//! Passes every record through unchanged, except that a record whose value is exactly
//! `boom` makes it panic with "weir-test: guest panicked on purpose". std's panic hook
//! writes that message to stderr (which the runtime captures) and the call traps: the
//! runtime must fail this pipeline only, report the message, and restart from its last
//! checkpoint. Built by `make guests` -> build/guests/panicker.wasm.

use weir_guest::{Record, Result};

/// The panic message the tests look for in the runtime's error report.
const MESSAGE: &str = "weir-test: guest panicked on purpose";

#[weir_guest::map]
fn panicker(record: Record) -> Result<Record> {
    if record.value == b"boom" {
        panic!("{MESSAGE}");
    }
    Ok(record)
}
