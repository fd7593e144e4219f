//! `infinite-loop`: a hostile guest for the CPU-limit tests (per-call epoch deadline).
//!
//! Passes every record through unchanged, except that a record whose value is exactly
//! `loop` makes the call spin forever, so a test can let checkpoints complete first and
//! then trigger it. The runtime must interrupt the call, fail this pipeline only, and
//! restart it from its last checkpoint. Built by `make guests` -> build/guests/infinite_loop.wasm.

use weir_guest::{Record, Result};

#[weir_guest::map]
fn infinite_loop(record: Record) -> Result<Record> {
    if record.value == b"loop" {
        let mut spins: u64 = 0;
        // `black_box` keeps the optimiser from proving the loop side-effect free (an
        // infinite loop without side effects is undefined behaviour LLVM may delete).
        loop {
            spins = std::hint::black_box(spins.wrapping_add(1));
        }
    }
    Ok(record)
}
