//! Keys that come back, end to end: the windowed word count (`word_count`, one-hour
//! tumbling windows, generated records, file sink) through `weir run` at parallelism 1,
//! over [`FEW_KEYS`] keys and over `keys` keys, each key seen [`VISITS`] times on
//! average, in the generator's hashed (uniform) order. The target: the process
//! CPU per record over a million keys within three times that over a thousand.
//!
//! Per shape, [`RUNS`] runs alternated with the other shape; the median with the lowest
//! and highest of records/s (wall time of the whole `weir run`: start-up, checkpoints
//! every second and the sink's commit included) and of the child's CPU time over every
//! thread, per record. Every run's committed counts are checked to sum to its records
//! (see `scaling::run_once`).

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};

use crate::measure::RUNS;
use crate::scaling::{self, Shape};

/// Keys of the shape every key of which stays hot.
pub const FEW_KEYS: u64 = 1_000;
/// Records per key, on average.
pub const VISITS: u64 = 4;

/// Both shapes, alternated.
pub fn keys_figures(guests: &Path, keys: u64) -> anyhow::Result<Value> {
    let guests = &std::fs::canonicalize(guests)
        .with_context(|| format!("the guests directory {}", guests.display()))?;
    let records = keys * VISITS;
    let (mut few, mut many) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        few.push(scaling::run_once(
            guests,
            Shape::Aggregate,
            1,
            records,
            FEW_KEYS,
        )?);
        many.push(scaling::run_once(
            guests,
            Shape::Aggregate,
            1,
            records,
            keys,
        )?);
    }
    let few = row(FEW_KEYS, records, &few);
    let many = row(keys, records, &many);
    let ratio = many["process_cpu_ns_per_record"]
        .as_f64()
        .unwrap_or(f64::NAN)
        / few["process_cpu_ns_per_record"]
            .as_f64()
            .unwrap_or(f64::NAN);
    Ok(json!({
        "runs": RUNS,
        "records": records,
        "rows": [few, many],
        "cpu_ratio": ratio,
    }))
}

/// One shape's figures: medians, lowest and highest over its runs.
fn row(keys: u64, records: u64, runs: &[(Duration, Duration)]) -> Value {
    let spread = |per_run: &dyn Fn(&(Duration, Duration)) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(per_run).collect();
        v.sort_by(f64::total_cmp);
        (crate::measure::median(v.clone()), v[0], v[v.len() - 1])
    };
    let rate = spread(&|r| records as f64 / r.0.as_secs_f64());
    let cpu = spread(&|r| r.1.as_nanos() as f64 / records as f64);
    json!({
        "keys": keys,
        "records_per_s": rate.0, "records_per_s_min": rate.1, "records_per_s_max": rate.2,
        "process_cpu_ns_per_record": cpu.0, "cpu_min": cpu.1, "cpu_max": cpu.2,
    })
}

/// The table.
pub fn print(f: &Value) {
    let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    println!(
        "| windowed word count, `weir run`, 1 subtask, {} records, medians of {} runs | records/s (min-max) | process CPU ns/record (min-max) |",
        f["records"], f["runs"]
    );
    println!("|---|---:|---:|");
    for row in f["rows"].as_array().into_iter().flatten() {
        println!(
            "| {} keys, {} records each | {:.0} ({:.0}-{:.0}) | {:.0} ({:.0}-{:.0}) |",
            row["keys"],
            f["records"].as_u64().unwrap_or(0) / row["keys"].as_u64().unwrap_or(1).max(1),
            num(&row["records_per_s"]),
            num(&row["records_per_s_min"]),
            num(&row["records_per_s_max"]),
            num(&row["process_cpu_ns_per_record"]),
            num(&row["cpu_min"]),
            num(&row["cpu_max"]),
        );
    }
    println!(
        "\nCPU per record, many keys over few: {:.2} (target: at most 3)\n",
        num(&f["cpu_ratio"])
    );
}
