//! `weir-bench` (`make bench`): Weir's benchmarks, each figure beside a baseline
//! measured in the same run on the same machine, so ratios survive a noisy host.
//!
//! 1. map: generator -> WASM `uppercase` -> discard, against the same transform as a
//!    native Rust operator in the same dataflow (one source task, same batches); and
//!    the two operators alone on the same pre-built batches (CPU ns/record).
//! 2. aggregate: keyed `word-count` over 1,000,000 distinct keys with RocksDB state,
//!    against a native HashMap count fed the same batches.
//! 3. checkpoint: duration and bytes written for that state, first checkpoint and a
//!    second one of unchanged state (incremental: should copy nothing).
//!
//! Writes a JSON file (`--out`) and prints a table. A benchmark, not a test: nothing
//! here passes or fails.

mod aggregate;
mod map;
mod pause;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use weir::dataflow::operators::map::MapOperator;
use weir::engine::{GuestLimits, WasmEngine};

use aggregate::aggregate_figures;
use map::{NativeUppercase, generator_batches, map_throughput, operator_alone};

/// Records per batch, in every benchmark.
pub const BATCH: usize = 1024;
/// Records of the map's operator-alone figure (pre-built, so held in memory: ~35 MiB),
/// and its rounds per operator.
const OPERATOR_ALONE_RECORDS: u64 = 256 * BATCH as u64;
const OPERATOR_ALONE_ROUNDS: usize = 7;

fn main() -> anyhow::Result<()> {
    let mut out = PathBuf::from("build/bench.json");
    let mut records: u64 = 2_000_000;
    let mut keys: u64 = 1_000_000;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--out" => out = PathBuf::from(args.next().context("--out PATH")?),
            "--records" => records = args.next().context("--records N")?.parse()?,
            "--keys" => keys = args.next().context("--keys N")?.parse()?,
            other => anyhow::bail!(
                "unknown argument {other}; usage: weir-bench [--out PATH] [--records N] [--keys N]"
            ),
        }
    }
    let guests = weir_tests::guests_dir();
    let engine = WasmEngine::new(None)?;
    let uppercase = Arc::new(engine.load(&guests.join("uppercase.wasm"))?);

    eprintln!("map: {records} records, WASM uppercase vs native ...");
    // Warm up both paths once (page faults, instantiation), then measure.
    map_throughput(records / 10, Box::new(NativeUppercase))?;
    let native_map = map_throughput(records, Box::new(NativeUppercase))?;
    let wasm_map = map_throughput(
        records,
        Box::new(MapOperator::new(
            "step-0".into(),
            uppercase.clone(),
            GuestLimits::default(),
            BTreeMap::new(),
        )),
    )?;
    eprintln!("map: the operators alone, {OPERATOR_ALONE_RECORDS} pre-built records ...");
    let alone = operator_alone(
        &mut MapOperator::new(
            "step-0".into(),
            uppercase,
            GuestLimits::default(),
            BTreeMap::new(),
        ),
        &mut NativeUppercase,
        &generator_batches(OPERATOR_ALONE_RECORDS),
        OPERATOR_ALONE_ROUNDS,
    )?;

    eprintln!("pause: checkpoints of a {keys}-key state, deferred vs inline upload ...");
    let word_count = Arc::new(engine.load(&guests.join("word_count.wasm"))?);
    let pause_records = 3 * keys;
    let deferred = pause::pause_figures(
        word_count.clone(),
        pause_records,
        keys,
        pause::Mode::Deferred,
    )?;
    let inline = pause::pause_figures(word_count, pause_records, keys, pause::Mode::Inline)?;

    eprintln!("aggregate: word-count over {keys} distinct keys, RocksDB vs HashMap ...");
    let agg = aggregate_figures(&engine, &guests, keys)?;

    let mb = |b: u64| b as f64 / (1 << 20) as f64;
    let rows = [
        (
            "map: WASM uppercase (records/s)",
            wasm_map,
            native_map,
            "native Rust uppercase",
        ),
        (
            "aggregate: WASM word-count + RocksDB (records/s)",
            agg.wasm_rps,
            agg.native_rps,
            "native HashMap count",
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
    println!(
        "| map, operator alone: WASM uppercase (CPU ns/record, lower is better) | {:.1} | {:.1} | {:.2} | native Rust uppercase, same batches (ratio native/WASM) |",
        alone.wasm_ns_per_record,
        alone.native_ns_per_record,
        alone.native_ns_per_record / alone.wasm_ns_per_record
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

    println!();
    println!(
        "| checkpoints of a {keys}-key state, {pause_records} records | longest output pause | longest barrier call | longest gap without a barrier | longest barrier-to-durable | checkpoints | records/s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (name, f) in [
        ("upload deferred (Weir)", &deferred),
        ("upload inline on the task thread (baseline)", &inline),
    ] {
        println!(
            "| {name} | {} ms | {} ms | {} ms | {} ms | {} | {:.0} |",
            f.longest_pause.as_millis(),
            f.longest_barrier_call.as_millis(),
            f.longest_gap_without_barrier.as_millis(),
            f.longest_checkpoint.as_millis(),
            f.checkpoints,
            f.records_per_s
        );
    }
    let pause_json = |f: &pause::PauseFigures| {
        serde_json::json!({
            "longest_pause_ms": f.longest_pause.as_secs_f64() * 1e3,
            "longest_barrier_call_ms": f.longest_barrier_call.as_secs_f64() * 1e3,
        "longest_gap_without_barrier_ms": f.longest_gap_without_barrier.as_secs_f64() * 1e3,
            "longest_checkpoint_ms": f.longest_checkpoint.as_secs_f64() * 1e3,
            "checkpoints": f.checkpoints,
            "records_per_s": f.records_per_s,
        })
    };

    let json = serde_json::json!({
        "pause": { "keys": keys, "records": pause_records, "deferred": pause_json(&deferred), "inline": pause_json(&inline) },
        "machine": { "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) },
        "map": { "records": records, "wasm_records_per_s": wasm_map, "native_records_per_s": native_map, "ratio": wasm_map / native_map,
            "operator_alone": { "records": OPERATOR_ALONE_RECORDS, "rounds": OPERATOR_ALONE_ROUNDS, "wasm_cpu_ns_per_record": alone.wasm_ns_per_record, "native_cpu_ns_per_record": alone.native_ns_per_record, "ratio": alone.native_ns_per_record / alone.wasm_ns_per_record } },
        "aggregate": { "keys": keys, "wasm_rocksdb_records_per_s": agg.wasm_rps, "native_hashmap_records_per_s": agg.native_rps, "ratio": agg.wasm_rps / agg.native_rps },
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
