//! `memory-hog`: a hostile guest for the memory-limit tests (ResourceLimiter).
//!
//! Passes every record through unchanged, except that a record whose value is exactly
//! `hog` makes it allocate without bound, 1 MiB at a time, touching every block. The
//! runtime must refuse the memory growth, so the guest traps (allocation failure), fail
//! this pipeline only, and restart it from its last checkpoint. Built by `make guests`
//! -> build/guests/memory_hog.wasm.

use weir_guest::{Record, Result};

/// Size of each allocation.
const BLOCK: usize = 1 << 20; // 1 MiB

#[weir_guest::map]
fn memory_hog(record: Record) -> Result<Record> {
    if record.value == b"hog" {
        let mut blocks: Vec<Vec<u8>> = Vec::new();
        loop {
            // `vec![1; n]` writes every byte (not a lazily zeroed allocation), and
            // `black_box` keeps the optimiser from removing the unused blocks.
            blocks.push(std::hint::black_box(vec![1u8; BLOCK]));
            std::hint::black_box(&mut blocks);
        }
    }
    Ok(record)
}
