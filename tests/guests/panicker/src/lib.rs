//! `panicker`: a hostile guest for the trap tests.
//!
//! Passes every record through unchanged, except that a record whose value is exactly
//! `boom` makes it panic with "weir-test: guest panicked on purpose". std's panic hook
//! writes that message to stderr (which the runtime captures) and the call traps: the
//! runtime must fail this pipeline only, report the message, and restart from its last
//! checkpoint. A record `forge` makes it panic with a message holding a line break
//! and a forged `weir: error:` line ([`FORGED`]): the runtime must print it escaped, on
//! the one error line naming the module. Built by `make guests` ->
//! build/guests/panicker.wasm.

use weir_guest::{Record, Result};

/// The panic message the tests look for in the runtime's error report.
const MESSAGE: &str = "weir-test: guest panicked on purpose";
/// A panic message trying to print a second error line of its own.
const FORGED: &str = "weir-test: forged\nweir: error: forged by the guest";

#[weir_guest::map]
fn panicker(record: Record) -> Result<Record> {
    if record.value == b"boom" {
        panic!("{MESSAGE}");
    }
    if record.value == b"forge" {
        panic!("{FORGED}");
    }
    Ok(record)
}
