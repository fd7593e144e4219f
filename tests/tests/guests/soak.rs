//! Soak: every shipped example guest, in every language (Rust, Python, JavaScript; the
//! `uppercase` map and the `word-count` aggregate), through `weir run` under the default
//! limits (64 MiB of guest memory, batches of 1,024), over 3,000,000 generated records
//! (`WEIR_SOAK_RECORDS`; `make soak` runs 10,000,000). What it proves, for each:
//! - the run ends with rc 0: the guest never reaches its memory limit (before the fix,
//!   the JavaScript map died at ~240,000 records and the Python one at ~485,000);
//! - its output is exact: each uppercased value once, or each (key, window) count once
//!   with its count, computed here from the generator;
//! - guest memory is bounded: the guest's linear memory at the end (the status file's
//!   `guest_memory`, which the runtime samples after every call) is below the
//!   recycling mark (the runtime replaces an instance that has grown by half its
//!   headroom, see `engine/guest_store.rs`), measured from what it was once the first
//!   100,000 records were read: at most `early + (limit - early) / 2 + MEMORY_SLACK`;
//! - the output is exact whichever code ran it: each run has an empty compiled-code
//!   cache, so a Python or JavaScript guest starts on Winch's baseline code and moves
//!   to Cranelift's mid-run when its background compile ends, as a user's first run of
//!   a new module does (each soak prints the tiers it saw; when the switch lands
//!   depends on the machine's load, so it is printed, not asserted: `engine::tier_tests`
//!   checks the switch itself);
//! - and flat where the toolchain frees what it allocates: a Rust guest's memory at the
//!   end is at most [`MEMORY_SLACK`] above its early figure, and it is never recycled.
//!   (Python and JavaScript guests are recycled every few hundred calls: componentize-js
//!   runs no garbage collection during calls and componentize-py never frees the bytes
//!   lists a guest returns; each soak prints how often.)
//!
//! Bounded in records; timing decides nothing (the wall time is reported).

use weir_tests::guest;
use weir_tests::soak::{
    SoakMemory, assert_uppercase_output, assert_window_counts, generator, run_watching_memory,
    soak_records, soak_spec,
};

/// Records per soak in `make test`.
const RECORDS: u64 = 3_000_000;
/// The default guest memory limit the soaks run under (`[limits] memory`).
const LIMIT: u64 = 64 << 20;
/// When the early memory figure is taken.
const EARLY_RECORDS: u64 = 100_000;
/// How far guest memory may rise after the early figure. Wasm memory grows in 64 KiB
/// pages and never shrinks, and an allocator may take a few pages more as its free
/// lists settle; a leak of even 100 bytes per call is 3 MiB over 3,000,000 records at
/// batches of 1,024, and today's leaks were ~140 KB per call.
const MEMORY_SLACK: u64 = 2 << 20;
/// The word-count soak's tumbling window, and its keys: each 10 s window (10,000
/// records) sees ~6,300 of them, so each key comes back in most windows, and each
/// window fires ~6,300 counts.
const WINDOW_MS: i64 = 10_000;
const WORD_COUNT_KEYS: u64 = 10_000;

/// Whether a guest's toolchain frees what it allocates (so its memory must stay flat).
fn frees_its_memory(module: &str) -> bool {
    !(module.ends_with("_py") || module.ends_with("_js"))
}

fn assert_bounded(module: &str, memory: SoakMemory, records: u64) {
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    eprintln!(
        "{module}: {records} records in {:.1?}, guest memory {:.1} MiB after {EARLY_RECORDS} records, \
         {:.1} MiB at the end, {} instances recycled, code {:?}",
        memory.wall,
        mib(memory.early_bytes),
        mib(memory.final_bytes),
        memory.recycled,
        memory.tiers,
    );
    let mark = memory.early_bytes + LIMIT.saturating_sub(memory.early_bytes) / 2;
    assert!(
        memory.final_bytes <= mark + MEMORY_SLACK,
        "{module}: guest memory {} bytes at the end, above the recycling mark {mark} over {records} records",
        memory.final_bytes
    );
    if frees_its_memory(module) {
        assert!(
            memory.final_bytes <= memory.early_bytes + MEMORY_SLACK,
            "{module}: guest memory grew from {} to {} bytes over {records} records",
            memory.early_bytes,
            memory.final_bytes
        );
        assert_eq!(
            memory.recycled, 0,
            "{module}: a guest that frees its memory was recycled"
        );
    }
}

fn uppercase_soak(module: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = generator(soak_records(RECORDS), 1_000);
    let step = format!(
        "[[steps]]\ntype = \"map\"\nmodule = {}\n",
        weir_tests::toml_path(&guest(module))
    );
    let spec = soak_spec(dir.path(), &format!("soak-{module}"), &config, &step);
    let memory = run_watching_memory(&spec, "step-0", EARLY_RECORDS);
    assert_uppercase_output(&dir.path().join("out"), &config);
    assert_bounded(module, memory, config.count);
}

fn word_count_soak(module: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = generator(soak_records(RECORDS), WORD_COUNT_KEYS);
    let step = format!(
        "[[steps]]\ntype = \"aggregate\"\nmodule = {}\nwindow = {{ type = \"tumbling\", size = \"{WINDOW_MS}ms\" }}\n",
        weir_tests::toml_path(&guest(module))
    );
    let spec = soak_spec(dir.path(), &format!("soak-{module}"), &config, &step);
    let memory = run_watching_memory(&spec, "step-0", EARLY_RECORDS);
    assert_window_counts(&dir.path().join("out"), &config, WINDOW_MS);
    assert_bounded(module, memory, config.count);
}

#[test]
fn rust_uppercase_soak() {
    uppercase_soak("uppercase");
}

#[test]
fn python_uppercase_soak() {
    uppercase_soak("uppercase_py");
}

#[test]
fn js_uppercase_soak() {
    uppercase_soak("uppercase_js");
}

#[test]
fn rust_word_count_soak() {
    word_count_soak("word_count");
}

#[test]
fn python_word_count_soak() {
    word_count_soak("word_count_py");
}

#[test]
fn js_word_count_soak() {
    word_count_soak("word_count_js");
}
