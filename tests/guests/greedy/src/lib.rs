//! `greedy`: a hostile guest for the tenant walls (`[isolation]`, the `cpu_millicores`
//! and `memory_bytes` quotas): it stays inside every per-call limit and still takes
//! what it can of the host.
//!
//! Passes every record through unchanged, after
//! - `spin` (step config, default 0) rounds of arithmetic per record: a CPU hog whose
//!   every call ends well within its deadline;
//! - on its first call, `hold_mib` (default 0) MiB allocated and written, and kept for
//!   the instance's life: a memory hog within its own linear-memory limit, whose
//!   instances together outgrow the tenant's memory.
//!
//! Built by `make guests` -> build/guests/greedy.wasm.

use std::sync::OnceLock;

use weir_guest::{Record, Result};

/// What the first call allocated, kept so that it stays resident.
static HELD: OnceLock<Vec<Vec<u8>>> = OnceLock::new();

fn setting(name: &str) -> u64 {
    weir_guest::config(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[weir_guest::map]
fn greedy(record: Record) -> Result<Record> {
    HELD.get_or_init(|| {
        // `vec![1; n]` writes every byte (not a lazily zeroed allocation).
        (0..setting("hold_mib"))
            .map(|_| std::hint::black_box(vec![1u8; 1 << 20]))
            .collect()
    });
    let mut x: u64 = record.value.len() as u64;
    for i in 0..setting("spin") {
        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
    }
    std::hint::black_box(x);
    Ok(record)
}
