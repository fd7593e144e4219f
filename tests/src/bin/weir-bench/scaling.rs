//! Weak scaling through `weir run`: the map (`uppercase`) and the revisited-key
//! aggregate (`word_count` over keys that come back, in tumbling windows) at
//! parallelism 1, 2, 4, ... up to the machine's cores, every subtask given the same
//! work: `records` generated records each, and for the aggregate `keys` keys each (so
//! each key comes back `records / keys` times, in the generator's hashed order), all in
//! one window. The generator stamps record `i` at `i` ms and a subtask reads every P-th
//! record, so at P its records span P times the event time: the windows are P hours
//! long and start at 0, so that every subtask at every P fills one window and fires it
//! at the end, as at P = 1. (With one-hour windows at every P, a subtask at P = 2 would
//! fire a window midway and hold 1.4 times the entries it holds at 1: more work per
//! subtask, which a weak-scaling figure must not hide.)
//!
//! What is measured, per parallelism, the median, lowest and highest of
//! [`SCALING_RUNS`] runs of `weir_run::run_once` (wall time of the whole `weir run` and
//! its CPU time over all threads; its output checked).
//!
//! records/s = `parallelism x records / wall`; efficiency = records/s at P divided by
//! P x records/s at 1 (1.0: perfect weak scaling).

use std::path::Path;

use anyhow::Context;
use serde_json::{Value, json};

use crate::measure::spread;
use crate::weir_run::{self, Shape, Timed, Workload};

/// Runs per parallelism; the figures are medians, with the lowest and highest.
const SCALING_RUNS: usize = 5;

/// The parallelisms measured: 1, 2, 4, ... up to `cores`, and `cores` itself.
pub fn parallelisms(cores: usize) -> Vec<usize> {
    let mut p: Vec<usize> = std::iter::successors(Some(1usize), |p| Some(p * 2))
        .take_while(|&p| p <= cores)
        .collect();
    if p.last() != Some(&cores) {
        p.push(cores);
    }
    p
}

/// Both pipelines at every parallelism.
pub fn scaling_figures(guests: &Path, records: u64, keys: u64) -> anyhow::Result<Value> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // The spec lives in a scratch directory: module paths must not be relative.
    let guests = &std::fs::canonicalize(guests)
        .with_context(|| format!("the guests directory {}", guests.display()))?;
    let mut rows = Vec::new();
    for shape in [Shape::Map, Shape::WindowedCount] {
        let mut base = None;
        for p in parallelisms(cores) {
            let work = Workload {
                shape,
                parallelism: p,
                records: p as u64 * records,
                // The map's keys matter to none; the aggregate's grow with p.
                keys: if shape == Shape::Map {
                    1000
                } else {
                    p as u64 * keys
                },
                zipf: None,
                // p-hour windows: the same work per subtask (see the module doc).
                aligned_window_hours: Some(p as u64),
            };
            let runs = (0..SCALING_RUNS)
                .map(|_| weir_run::run_once(guests, &work))
                .collect::<anyhow::Result<Vec<_>>>()?;
            rows.push(row(&work, &runs, &mut base));
        }
    }
    Ok(json!({ "cores": cores, "runs": SCALING_RUNS, "rows": rows }))
}

/// A row's pipeline.
fn name(shape: Shape) -> &'static str {
    match shape {
        Shape::WindowedCount => "aggregate (word_count, keys revisited, one window per subtask)",
        other => other.name(),
    }
}

/// One parallelism's row: records/s and process CPU per record, median, lowest and
/// highest over `runs`; efficiency from the medians, against `base`, the median
/// records/s at parallelism 1 (set by the first row of a pipeline).
fn row(work: &Workload, runs: &[Timed], base: &mut Option<f64>) -> Value {
    let records = work.records as f64;
    let rate = spread(
        runs.iter()
            .map(|r| records / r.wall.as_secs_f64())
            .collect(),
    );
    let cpu = spread(
        runs.iter()
            .map(|r| r.cpu.as_nanos() as f64 / records)
            .collect(),
    );
    let p = work.parallelism;
    let per_subtask = *base.get_or_insert(rate.0);
    json!({
        "pipeline": name(work.shape),
        "kind": if p == 1 { "baseline: the same pipeline at parallelism 1" } else { "weir" },
        "parallelism": p,
        "records": work.records,
        "keys": if work.shape == Shape::Map { 0 } else { work.keys },
        "records_per_s": rate.0, "records_per_s_min": rate.1, "records_per_s_max": rate.2,
        "process_cpu_ns_per_record": cpu.0, "cpu_min": cpu.1, "cpu_max": cpu.2,
        "efficiency": rate.0 / (p as f64 * per_subtask),
    })
}

/// The scaling table.
pub fn print(f: &Value) {
    let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    println!(
        "| weak scaling, `weir run`, {} cores, medians of {} runs | parallelism | records | records/s (min-max) | process CPU ns/record (min-max) | efficiency |",
        f["cores"], f["runs"]
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for row in f["rows"].as_array().into_iter().flatten() {
        println!(
            "| {} | {} | {} | {:.0} ({:.0}-{:.0}) | {:.0} ({:.0}-{:.0}) | {:.2} |",
            row["pipeline"].as_str().unwrap_or("?"),
            row["parallelism"],
            row["records"],
            num(&row["records_per_s"]),
            num(&row["records_per_s_min"]),
            num(&row["records_per_s_max"]),
            num(&row["process_cpu_ns_per_record"]),
            num(&row["cpu_min"]),
            num(&row["cpu_max"]),
            num(&row["efficiency"]),
        );
    }
}
