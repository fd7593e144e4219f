//! The guests benchmark: the same `uppercase` map written in Rust, Python
//! (componentize-py) and JavaScript (componentize-js), each beside the native operator
//! measured in the same process, and what it costs to start each one:
//! - first load: `weir validate` of the component with an empty compiled-code cache,
//!   wall time of the whole command (what a user's first `weir run` of a new module
//!   pays: weir compiles it in its limited child process and stores the artifact);
//! - second load: the same command again, now a cache hit (every later start);
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
use weir::engine::{GuestLimits, GuestModule, WasmEngine};
use weir::record::batch::RecordBatch;

use crate::BATCH;
use crate::map::{NativeUppercase, generator_batches, map_throughput, operator_alone};

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
    let native = map_throughput(records, Box::new(NativeUppercase))?;
    let wasm = map_throughput(records, Box::new(operator()))?;
    Ok(json!({
        "module_mib": std::fs::metadata(&path)?.len() as f64 / (1 << 20) as f64,
        "first_load_s": first_load.as_secs_f64(),
        "second_load_s": second_load.as_secs_f64(),
        "first_call_ms": first_call.as_secs_f64() * 1e3,
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

/// The guests section's table, one row per language.
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
}
