//! `chatty`: a hostile guest for the guest log budget (`[limits] guest_log_rate`).
//!
//! Passes every record through unchanged, and for each one writes 100 lines of 1 KiB
//! to stderr and one `log` message: a guest that writes without pause, about 100 KiB per
//! record. The runtime must keep the run's log within the budget (dropping and counting
//! what is over it), and the output exact.
//! Built by `make guests` -> build/guests/chatty.wasm.

use weir_guest::{Record, Result};

#[weir_guest::map]
fn chatty(record: Record) -> Result<Record> {
    let line = "x".repeat(1024);
    for i in 0..100 {
        eprintln!("chatty {i}: {line}");
    }
    weir_guest::log::info(&line);
    Ok(record)
}
