//! `weir-bench` (`make bench`): Weir's benchmarks, each figure beside a baseline
//! measured in the same run on the same machine, so ratios survive a noisy host.
//!
//! 1. map: generator -> WASM `uppercase` -> discard, against the same transform as a
//!    native Rust operator in the same dataflow (one source task, same batches).
//! 2. aggregate: keyed `word-count` with RocksDB state and the default cache, against a
//!    native HashMap count fed the same batches: over 1,000,000 distinct keys (every
//!    record misses the cache), and over 1,000 keys x 1,000 records (every record hits).
//! 3. checkpoint: duration and bytes written for that state, first checkpoint and a
//!    second one of unchanged state (incremental: should copy nothing).
//!
//! Writes a JSON file (`--out`) and prints a table. A benchmark, not a test: nothing
//! here passes or fails.

mod aggregate;
mod map;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use weir::dataflow::operators::map::MapOperator;
use weir::engine::{GuestLimits, WasmEngine};

use aggregate::{HOT_KEYS, HOT_ROUNDS, aggregate_figures};
use map::{NativeUppercase, map_throughput};

/// Records per batch, in every benchmark.
pub const BATCH: usize = 1024;

fn main() -> anyhow::Result<()> {
    let mut out = PathBuf::from("build/bench.json");
    let mut records: u64 = 2_000_000;
    let mut keys: u64 = 1_000_000;
    let mut aggregate_only = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--out" => out = PathBuf::from(args.next().context("--out PATH")?),
            "--records" => records = args.next().context("--records N")?.parse()?,
            "--keys" => keys = args.next().context("--keys N")?.parse()?,
            "--aggregate-only" => aggregate_only = true,
            other => anyhow::bail!(
                "unknown argument {other}; usage: weir-bench [--out PATH] [--records N] [--keys N] [--aggregate-only]"
            ),
        }
    }
    let guests = weir_tests::guests_dir();
    let engine = WasmEngine::new(None)?;
    let uppercase = Arc::new(engine.load(&guests.join("uppercase.wasm"))?);

    let (mut native_map, mut wasm_map) = (f64::NAN, f64::NAN);
    if !aggregate_only {
        eprintln!("map: {records} records, WASM uppercase vs native ...");
        // Warm up both paths once (page faults, instantiation), then measure.
        map_throughput(records / 10, Box::new(NativeUppercase))?;
        native_map = map_throughput(records, Box::new(NativeUppercase))?;
        wasm_map = map_throughput(
            records,
            Box::new(MapOperator::new(
                "step-0".into(),
                uppercase,
                GuestLimits::default(),
                BTreeMap::new(),
            )),
        )?;
    }

    eprintln!(
        "aggregate: word-count over {keys} distinct keys and {HOT_KEYS} x {HOT_ROUNDS}, RocksDB vs HashMap ..."
    );
    let agg = aggregate_figures(&engine, &guests, keys)?;

    let mb = |b: u64| b as f64 / (1 << 20) as f64;
    let rows = [(
        "map: WASM uppercase (records/s)",
        wasm_map,
        native_map,
        "native Rust uppercase",
    )];
    let aggregates = [
        (format!("{keys} distinct keys, default cache"), agg.distinct),
        (
            format!("{HOT_KEYS} keys x {HOT_ROUNDS} (cache hits)"),
            agg.hot,
        ),
    ];
    println!("| benchmark | Weir | baseline | ratio | baseline is |");
    println!("|---|---:|---:|---:|---|");
    for (name, weir, base, what) in rows {
        println!(
            "| {name} | {weir:.0} | {base:.0} | {:.2} | {what} |",
            weir / base
        );
    }
    println!();
    println!(
        "| aggregate: WASM word-count + RocksDB vs native HashMap count | Weir records/s | baseline records/s | ratio | Weir CPU ns/record | baseline CPU ns/record |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, run) in &aggregates {
        println!(
            "| {name} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} |",
            run.weir.records_per_s,
            run.native.records_per_s,
            run.ratio(),
            run.weir.cpu_ns_per_record,
            run.native.cpu_ns_per_record
        );
    }
    println!(
        "\nword-count guest calls alone, per key: update {:.0} ns, emit {:.0} ns",
        agg.guest.update_ns_per_key, agg.guest.emit_ns_per_key
    );
    let (d1, f1, b1) = agg.first_checkpoint;
    let (d2, f2, b2) = agg.second_checkpoint;
    println!();
    println!("| checkpoint of {keys} keys | duration | SST files added | MiB added |");
    println!("|---|---:|---:|---:|");
    println!("| first | {} ms | {f1} | {:.1} |", d1.as_millis(), mb(b1));
    println!(
        "| second, state unchanged | {} ms | {f2} | {:.1} |",
        d2.as_millis(),
        mb(b2)
    );

    let json = serde_json::json!({
        "machine": { "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) },
        "map": { "records": records, "wasm_records_per_s": wasm_map, "native_records_per_s": native_map, "ratio": wasm_map / native_map },
        "aggregate": {
            "distinct_keys_default_cache": agg.distinct.json(),
            "hot_keys_default_cache": agg.hot.json(),
            "guest_update_ns_per_key": agg.guest.update_ns_per_key,
            "guest_emit_ns_per_key": agg.guest.emit_ns_per_key,
        },
        "checkpoint": {
            "first": { "ms": d1.as_millis() as u64, "files_added": f1, "bytes_added": b1 },
            "second_unchanged": { "ms": d2.as_millis() as u64, "files_added": f2, "bytes_added": b2 },
        },
    });
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&out, serde_json::to_vec_pretty(&json)?)?;
    eprintln!("wrote {}", out.display());
    Ok(())
}
