//! The guests benchmark: the same `uppercase` map written in Rust, Python
//! (componentize-py) and JavaScript (componentize-js), each beside the native operator
//! measured in the same process, and what it costs to start each one:
//! - first load: `weir validate` of the component with an empty compiled-code cache,
//!   wall time of the whole command (what a user's first `weir run` of a new module
//!   pays: weir compiles it in its limited child process and stores the artifact);
//! - second load: the same command again, now a cache hit (every later start);
//! - first output, tiered: what a first `weir run` of a new module waits before its
//!   first batch comes out: a tiered engine (`engine::code_tier`) with an empty cache
//!   loads the module (a large one on Winch's baseline code) and a fresh operator maps
//!   one record, wall time, in this process; then how long after the start optimized
//!   code (Cranelift, compiled in the background meanwhile) was ready;
//! - first call: a fresh `MapOperator`'s first batch of one record, wall time, the
//!   median of a few: instantiation from the module's `InstancePre` plus one call (what
//!   each subtask pays once per start);
//! - the operator alone, CPU ns/record of `handle_batch` against the native operator on
//!   the same batches (see `map.rs`): for the compiled guest (Rust) as many records and
//!   rounds as the map section's figure, so the two agree; for the interpreters fewer
//!   ([`INTERPRETED_ALONE`]), as they are one or two orders of magnitude slower;
//! - end to end: generator -> guest -> discard against the native operator, records/s.
//!
//! Every guest must produce what the native operator does (one record out per record
//! in, none rejected: `map.rs` checks), so the rows compare the same work.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use weir::dataflow::operator::{Operator, Output};
use weir::dataflow::operators::map::MapOperator;
use weir::engine::{CodeTier, GuestLimits, GuestModule, WasmEngine};
use weir::metrics::guest_memory::GuestMemoryGauge;
use weir::record::batch::RecordBatch;

use crate::BATCH;
use crate::map::{
    NativeUppercase, generator_batches, generator_range, map_throughput, operator_alone,
};

/// Records and rounds per operator of an operator-alone figure.
#[derive(Debug, Clone, Copy)]
pub struct AloneRuns {
    pub records: u64,
    pub rounds: usize,
}

/// The interpreted guests' operator-alone runs.
const INTERPRETED_ALONE: AloneRuns = AloneRuns {
    records: 32 * BATCH as u64,
    rounds: 3,
};

/// The `uppercase` guest of each language, as `make guests` names it in build/guests,
/// and its operator-alone runs (`None`: the map section's).
pub const GUESTS: [(&str, &str, Option<AloneRuns>); 3] = [
    ("Rust", "uppercase.wasm", None),
    ("Python", "uppercase_py.wasm", Some(INTERPRETED_ALONE)),
    ("JavaScript", "uppercase_js.wasm", Some(INTERPRETED_ALONE)),
];
/// Fresh instances timed for the first-call figure.
const FIRST_CALLS: usize = 5;
/// Longest wait for a tiered start's optimized code.
const TIER_UP_WAIT: Duration = Duration::from_secs(600);
/// Records of the long run, in which guest memory is read at the start and the end.
const LONG_RUN_RECORDS: u64 = 1_000_000;

/// All figures of one language's guest.
pub fn guest_figures(
    guests: &Path,
    file: &str,
    alone_runs: AloneRuns,
    records: u64,
) -> anyhow::Result<Value> {
    let path = guests.join(file);
    anyhow::ensure!(
        path.is_file(),
        "{} is missing: run `make guests` first (make bench does)",
        path.display()
    );
    let cache = tempfile::tempdir()?;
    let first_load = validate_wall(&path, cache.path())?;
    let tiered = tiered_start(&path)?;
    let second_load = validate_wall(&path, cache.path())?;
    // The same cache: this process's own load is a hit, as a pipeline's would be.
    let engine = WasmEngine::new(Some(cache.path()))?;
    let module = Arc::new(engine.load(&path)?);
    let operator = || {
        MapOperator::new(
            "step-0".into(),
            module.clone(),
            GuestLimits::default(),
            BTreeMap::new(),
        )
    };
    let first_call = first_call_wall(&module)?;
    let alone = operator_alone(
        &mut operator(),
        &mut NativeUppercase,
        &generator_batches(alone_runs.records),
        alone_runs.rounds,
    )?;
    let rate = |s: crate::measure::Sample| records as f64 / s.wall.as_secs_f64();
    let native = rate(map_throughput(records, Box::new(NativeUppercase))?);
    let wasm = rate(map_throughput(records, Box::new(operator()))?);
    let long_run = long_run(&module, LONG_RUN_RECORDS)?;
    Ok(json!({
        "module_mib": std::fs::metadata(&path)?.len() as f64 / (1 << 20) as f64,
        "first_load_s": first_load.as_secs_f64(),
        "second_load_s": second_load.as_secs_f64(),
        "first_call_ms": first_call.as_secs_f64() * 1e3,
        "tiered_start": tiered,
        "operator_alone": {
            "records": alone_runs.records,
            "rounds": alone_runs.rounds,
            "wasm_cpu_ns_per_record": alone.wasm_ns_per_record,
            "native_cpu_ns_per_record": alone.native_ns_per_record,
            "ratio": alone.native_ns_per_record / alone.wasm_ns_per_record,
        },
        "end_to_end": {
            "records": records,
            "wasm_records_per_s": wasm,
            "native_records_per_s": native,
            "ratio": wasm / native,
        },
        "long_run": long_run,
    }))
}

/// One operator over `records` generated records (batches made as they are mapped):
/// records/s of `handle_batch` (wall time, one thread), the guest's linear memory after
/// its first batch and at the end as the runtime's gauge reads it (the last instance's,
/// when the operator recycled some), and how many instances it recycled.
fn long_run(module: &Arc<GuestModule>, records: u64) -> anyhow::Result<Value> {
    let gauge = GuestMemoryGauge::detached();
    let mut op = MapOperator::new(
        "step-0".into(),
        module.clone(),
        GuestLimits::default(),
        BTreeMap::new(),
    )
    .with_memory_gauge(gauge.clone());
    let (mut first_mib, mut done, mut busy) = (None, 0u64, Duration::ZERO);
    while done < records {
        let n = (records - done).min(BATCH as u64);
        let batch = generator_range(done, n);
        let mut out = Output::default();
        let started = Instant::now();
        op.handle_batch(batch, &mut out)
            .map_err(|e| anyhow::anyhow!("{} after {done} records: {e}", op.id()))?;
        busy += started.elapsed();
        done += n;
        first_mib.get_or_insert(gauge.get() as f64 / (1 << 20) as f64);
    }
    Ok(json!({
        "records": records,
        "records_per_s": records as f64 / busy.as_secs_f64(),
        "memory_first_mib": first_mib,
        "memory_end_mib": gauge.get() as f64 / (1 << 20) as f64,
        "instances_recycled": gauge.recycled_count(),
    }))
}

/// Wall time of `weir validate path` with the compiled-code cache in `cache`.
fn validate_wall(path: &Path, cache: &Path) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let out = weir_tests::weir()
        .arg("validate")
        .arg(path)
        .env("WEIR_CACHE_DIR", cache)
        .output()
        .context("run weir validate")?;
    let elapsed = started.elapsed();
    anyhow::ensure!(
        out.status.success(),
        "weir validate {}: {}",
        path.display(),
        weir_tests::stderr_of(&out)
    );
    Ok(elapsed)
}

/// A first run's start with tiered code and an empty cache, in this process: the code
/// tier it started on, wall seconds to the first batch's output and to optimized code.
fn tiered_start(path: &Path) -> anyhow::Result<Value> {
    let cache = tempfile::tempdir()?;
    let started = Instant::now();
    let engine = WasmEngine::tiered(Some(cache.path()))?;
    let module = Arc::new(engine.load(path)?);
    let first_tier = module.tier();
    let mut op = MapOperator::new(
        "step-0".into(),
        module.clone(),
        GuestLimits::default(),
        BTreeMap::new(),
    );
    op.handle_batch(generator_batches(1).remove(0), &mut Output::default())
        .map_err(|e| anyhow::anyhow!("{}: {e}", op.id()))?;
    let first_output = started.elapsed();
    while module.tier() != CodeTier::Optimized {
        anyhow::ensure!(
            started.elapsed() < TIER_UP_WAIT,
            "{}: no optimized code after {TIER_UP_WAIT:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(json!({
        "first_tier": first_tier.compiler(),
        "first_output_s": first_output.as_secs_f64(),
        "optimized_s": started.elapsed().as_secs_f64(),
    }))
}

/// Median wall time of a fresh operator's first batch of one record.
fn first_call_wall(module: &Arc<GuestModule>) -> anyhow::Result<Duration> {
    let one = generator_batches(1).remove(0);
    let mut times = Vec::new();
    for _ in 0..FIRST_CALLS {
        let mut op = MapOperator::new(
            "step-0".into(),
            module.clone(),
            GuestLimits::default(),
            BTreeMap::new(),
        );
        let input: RecordBatch = one.clone();
        let mut out = Output::default();
        let started = Instant::now();
        op.handle_batch(input, &mut out)
            .map_err(|e| anyhow::anyhow!("{}: {e}", op.id()))?;
        times.push(started.elapsed());
    }
    times.sort();
    Ok(times[times.len() / 2])
}

/// The guests section's tables, one row per language.
pub fn print(f: &Value) {
    let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    println!(
        "| uppercase guest (peak RSS {:.0} MiB) | module MiB | first load | second load | first call | operator alone CPU ns/record (native) | ratio | end to end records/s (native) | ratio |",
        num(&f["peak_rss_mib"])
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (language, _, _) in GUESTS {
        let g = &f[language];
        let (a, e) = (&g["operator_alone"], &g["end_to_end"]);
        println!(
            "| {language} | {:.1} | {:.2} s | {:.2} s | {:.1} ms | {:.0} ({:.0}) | {:.3} | {:.0} ({:.0}) | {:.3} |",
            num(&g["module_mib"]),
            num(&g["first_load_s"]),
            num(&g["second_load_s"]),
            num(&g["first_call_ms"]),
            num(&a["wasm_cpu_ns_per_record"]),
            num(&a["native_cpu_ns_per_record"]),
            num(&a["ratio"]),
            num(&e["wasm_records_per_s"]),
            num(&e["native_records_per_s"]),
            num(&e["ratio"]),
        );
    }
    println!();
    println!(
        "| uppercase guest, first run, empty cache | untiered: first load (`weir validate`) | tiered: starts on | first output | optimized code after |"
    );
    println!("|---|---:|---|---:|---:|");
    for (language, _, _) in GUESTS {
        let (g, t) = (&f[language], &f[language]["tiered_start"]);
        println!(
            "| {language} | {:.2} s | {} | {:.2} s | {:.2} s |",
            num(&g["first_load_s"]),
            t["first_tier"].as_str().unwrap_or("?"),
            num(&t["first_output_s"]),
            num(&t["optimized_s"]),
        );
    }
    println!();
    println!(
        "| uppercase guest, long run | records | records/s (operator, wall) | guest memory after the first batch | at the end | instances recycled |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (language, _, _) in GUESTS {
        let l = &f[language]["long_run"];
        println!(
            "| {language} | {:.0} | {:.0} | {:.1} MiB | {:.1} MiB | {:.0} |",
            num(&l["records"]),
            num(&l["records_per_s"]),
            num(&l["memory_first_mib"]),
            num(&l["memory_end_mib"]),
            num(&l["instances_recycled"]),
        );
    }
}
