//! Keys that come back, end to end: the word count (`word_count`, generated records,
//! file sink) through `weir run` at parallelism 1, windowed (one-hour tumbling windows)
//! and unwindowed, over these key shapes, every key seen [`VISITS`] times on average:
//! - [`FEW_KEYS`] keys (the baseline: every key stays hot in the cache);
//! - `keys` keys (default 1,000,000), uniform;
//! - ten times as many, uniform and Zipf-distributed (exponent [`ZIPF_EXPONENT`]).
//!
//! The target: the process CPU per record over a million keys within three
//! times that over a thousand, and at least 1,000,000 records/s for the windowed count.
//!
//! Per row, [`RUNS`] runs, the rows alternated within each round; the median with the
//! lowest and highest of records/s (wall time of the whole `weir run`) and of the
//! child's CPU time over every thread, per record; every run's output checked (see
//! `weir_run`). A baseline row runs before each record count; a row's ratio is its CPU
//! per record over that baseline's (same step, same records).

use std::path::Path;

use anyhow::Context;
use serde_json::{Value, json};

use crate::measure::{RUNS, spread};
use crate::weir_run::{self, Shape, Timed, Workload};

/// Keys of the baseline, every one of which stays hot.
pub const FEW_KEYS: u64 = 1_000;
/// Records per key, on average.
pub const VISITS: u64 = 4;
/// The skewed rows' exponent.
pub const ZIPF_EXPONENT: f64 = 1.1;
/// The large rows' keys, as a multiple of `keys`.
pub const LARGE: u64 = 10;

/// Every row, `RUNS` times, alternated.
pub fn keys_figures(guests: &Path, keys: u64) -> anyhow::Result<Value> {
    let guests = &std::fs::canonicalize(guests)
        .with_context(|| format!("the guests directory {}", guests.display()))?;
    let work = workloads(keys);
    let mut runs: Vec<Vec<Timed>> = vec![Vec::new(); work.len()];
    for round in 0..RUNS {
        for (w, timed) in work.iter().zip(&mut runs) {
            eprintln!(
                "  keys: round {} of {RUNS}: {} keys, {:?}",
                round + 1,
                w.keys,
                w.shape
            );
            timed.push(weir_run::run_once(guests, w)?);
        }
    }
    let rows: Vec<Value> = work.iter().zip(&runs).map(|(w, r)| row(w, r)).collect();
    let rows = with_ratios(rows);
    Ok(json!({ "runs": RUNS, "visits": VISITS, "rows": rows }))
}

/// The rows: per step, the baseline first.
fn workloads(keys: u64) -> Vec<Workload> {
    let mut rows = Vec::new();
    for shape in [Shape::WindowedCount, Shape::Count] {
        // (keys, records, zipf): a baseline row before each record count.
        for (keys, records, zipf) in [
            (FEW_KEYS, keys * VISITS, None),
            (keys, keys * VISITS, None),
            (FEW_KEYS, LARGE * keys * VISITS, None),
            (LARGE * keys, LARGE * keys * VISITS, None),
            (LARGE * keys, LARGE * keys * VISITS, Some(ZIPF_EXPONENT)),
        ] {
            rows.push(Workload {
                shape,
                parallelism: 1,
                records,
                keys,
                zipf,
                aligned_window_hours: None,
            });
        }
    }
    rows
}

/// One row's figures: medians, lowest and highest over its runs.
fn row(work: &Workload, runs: &[Timed]) -> Value {
    let spread = |per_run: &dyn Fn(&Timed) -> f64| spread(runs.iter().map(per_run).collect());
    let records = work.records;
    let rate = spread(&|r| records as f64 / r.wall.as_secs_f64());
    let cpu = spread(&|r| r.cpu.as_nanos() as f64 / records as f64);
    json!({
        "step": work.shape.name(),
        "windowed": work.shape == Shape::WindowedCount,
        "keys": work.keys,
        "distribution": work.zipf.map_or("uniform".to_owned(), |s| format!("zipf {s}")),
        "records": records,
        "kind": if work.keys == FEW_KEYS { "baseline: the same pipeline, hot keys" } else { "weir" },
        "records_per_s": rate.0, "records_per_s_min": rate.1, "records_per_s_max": rate.2,
        "process_cpu_ns_per_record": cpu.0, "cpu_min": cpu.1, "cpu_max": cpu.2,
    })
}

/// Each row's `cpu_ratio`: its CPU per record over that of the baseline row of the same
/// step and record count (so start-up weighs the same on both sides).
fn with_ratios(mut rows: Vec<Value>) -> Vec<Value> {
    let cpu = |r: &Value| r["process_cpu_ns_per_record"].as_f64().unwrap_or(f64::NAN);
    let baselines: Vec<(Value, Value, f64)> = rows
        .iter()
        .filter(|r| r["keys"] == FEW_KEYS)
        .map(|r| (r["windowed"].clone(), r["records"].clone(), cpu(r)))
        .collect();
    for r in &mut rows {
        let base = baselines
            .iter()
            .find(|b| b.0 == r["windowed"] && b.1 == r["records"])
            .map_or(f64::NAN, |b| b.2);
        r["cpu_ratio"] = json!(cpu(r) / base);
    }
    rows
}

/// The table.
pub fn print(f: &Value) {
    let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    println!(
        "| word count, `weir run`, 1 subtask, medians of {} runs | keys | records | records/s (min-max) | process CPU ns/record (min-max) | CPU ratio to 1,000 keys |",
        f["runs"]
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for row in f["rows"].as_array().into_iter().flatten() {
        println!(
            "| {}, {} | {} | {} | {:.0} ({:.0}-{:.0}) | {:.0} ({:.0}-{:.0}) | {:.2} |",
            if row["windowed"] == true {
                "1 h windows"
            } else {
                "unwindowed"
            },
            row["distribution"].as_str().unwrap_or("?"),
            row["keys"],
            row["records"],
            num(&row["records_per_s"]),
            num(&row["records_per_s_min"]),
            num(&row["records_per_s_max"]),
            num(&row["process_cpu_ns_per_record"]),
            num(&row["cpu_min"]),
            num(&row["cpu_max"]),
            num(&row["cpu_ratio"]),
        );
    }
    println!("\n(target: at most 3 at 1,000,000 keys; 1,000,000 records/s windowed)\n");
}
