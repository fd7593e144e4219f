//! Weak scaling through `weir run`: the map (`uppercase`) and the revisited-key
//! aggregate (`word_count` over keys that come back, one-hour tumbling windows) at
//! parallelism 1, 2, 4, ... up to the machine's cores, every subtask given the same
//! work: `records` generated records each, and for the aggregate `keys` keys each (so
//! each key comes back `records / keys` times, in the generator's hashed order).
//!
//! What is measured, per parallelism, the median of [`SCALING_RUNS`] runs:
//! - wall time of the whole `weir run`, spawn to exit: start-up, every checkpoint (1 s
//!   interval), the last one and the file sink's commit included;
//! - the child's CPU time, all its threads (`getrusage(RUSAGE_CHILDREN)` around it).
//!
//! records/s = `parallelism x records / wall`; efficiency = records/s at P divided by
//! P x records/s at 1 (1.0: perfect weak scaling). Output goes to a file sink under
//! /dev/shm when there is one (the disk is not what is measured); every run's committed
//! output is checked: the map's line count is its record count, the aggregate's counts
//! sum to it.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use weir_tests::process_cpu::children_cpu;

use crate::measure::median;

/// Runs per parallelism; the figures are medians.
const SCALING_RUNS: usize = 3;

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
    for shape in [Shape::Map, Shape::Aggregate] {
        let mut base = None;
        for p in parallelisms(cores) {
            let runs = (0..SCALING_RUNS)
                .map(|_| run_once(guests, shape, p, records, keys))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let (wall, cpu) = medians(&runs);
            let total = p as u64 * records;
            let rate = total as f64 / wall.as_secs_f64();
            let per_subtask = *base.get_or_insert(rate);
            rows.push(json!({
                "pipeline": shape.name(),
                "parallelism": p,
                "records": total,
                "keys": if shape == Shape::Aggregate { p as u64 * keys } else { 0 },
                "wall_s": wall.as_secs_f64(),
                "records_per_s": rate,
                "process_cpu_ns_per_record": cpu.as_nanos() as f64 / total as f64,
                "efficiency": rate / (p as f64 * per_subtask),
            }));
        }
    }
    Ok(json!({ "cores": cores, "runs": SCALING_RUNS, "rows": rows }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Map,
    Aggregate,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Map => "map (uppercase)",
            Shape::Aggregate => "aggregate (word_count, keys revisited)",
        }
    }

    fn step(self, guests: &Path) -> String {
        match self {
            Shape::Map => format!(
                "[[steps]]\ntype = \"map\"\nmodule = {}\n",
                weir_tests::toml_path(&guests.join("uppercase.wasm"))
            ),
            Shape::Aggregate => format!(
                "[[steps]]\ntype = \"aggregate\"\nmodule = {}\nwindow = {{ type = \"tumbling\", size = \"1h\" }}\n",
                weir_tests::toml_path(&guests.join("word_count.wasm"))
            ),
        }
    }
}

/// One `weir run` at parallelism `p`: its wall time and CPU time; its output checked.
pub fn run_once(
    guests: &Path,
    shape: Shape,
    p: usize,
    records: u64,
    keys: u64,
) -> anyhow::Result<(Duration, Duration)> {
    let dir = scratch_dir()?;
    let total = p as u64 * records;
    let key_count = if shape == Shape::Aggregate {
        p as u64 * keys
    } else {
        1000
    };
    let out = dir.path().join("out");
    let spec = format!(
        "name = \"scaling\"\nparallelism = {p}\nstate_dir = {}\n\
         [[sources]]\ntype = \"generator\"\ncount = {total}\nkeys = {key_count}\nvalue_size = 64\n\
         {}[[sinks]]\ntype = \"file\"\npath = {}\n[checkpoint]\ninterval = \"1s\"\n",
        weir_tests::toml_path(&dir.path().join("state")),
        shape.step(guests),
        weir_tests::toml_path(&out),
    );
    let spec_path = dir.path().join("spec.toml");
    std::fs::write(&spec_path, spec)?;
    let cpu_before = children_cpu();
    let started = Instant::now();
    let run = weir_tests::weir()
        .args(["run", "--quiet"])
        .arg(&spec_path)
        .stdout(std::process::Stdio::null())
        .output()
        .context("run weir")?;
    let wall = started.elapsed();
    let cpu = children_cpu().saturating_sub(cpu_before);
    anyhow::ensure!(
        run.status.success(),
        "weir run at parallelism {p}: {}: {}",
        run.status,
        weir_tests::stderr_of(&run)
    );
    check_output(shape, &out, total)?;
    Ok((wall, cpu))
}

/// A scratch directory on /dev/shm where there is one, else the system's temp dir.
fn scratch_dir() -> anyhow::Result<tempfile::TempDir> {
    let shm = PathBuf::from("/dev/shm");
    Ok(if shm.is_dir() {
        tempfile::tempdir_in(shm)?
    } else {
        tempfile::tempdir()?
    })
}

/// The map: one line per record; the aggregate: counts summing to the records.
fn check_output(shape: Shape, out: &Path, records: u64) -> anyhow::Result<()> {
    let (mut lines, mut counted) = (0u64, 0u64);
    for entry in std::fs::read_dir(out)? {
        // Committed files only: the sink's staging directory holds none after a clean end.
        let entry = entry?;
        if !entry.file_type()?.is_file() {
            continue;
        }
        let file = std::io::BufReader::new(std::fs::File::open(entry.path())?);
        for line in file.lines() {
            let line = line?;
            lines += 1;
            if shape == Shape::Aggregate {
                counted += count_of(&line).with_context(|| format!("a count in {line:?}"))?;
            }
        }
    }
    let got = if shape == Shape::Map { lines } else { counted };
    anyhow::ensure!(
        got == records,
        "{}: {got} records in the output, {records} in",
        shape.name()
    );
    Ok(())
}

/// The `"count":N` of one word-count output line.
fn count_of(line: &str) -> Option<u64> {
    let rest = &line[line.find("\"count\":")? + "\"count\":".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Median wall time and median CPU time of `runs` (`measure::median`).
fn medians(runs: &[(Duration, Duration)]) -> (Duration, Duration) {
    let median_of = |part: fn(&(Duration, Duration)) -> Duration| {
        Duration::from_secs_f64(median(runs.iter().map(|r| part(r).as_secs_f64()).collect()))
    };
    (median_of(|r| r.0), median_of(|r| r.1))
}

/// The scaling table.
pub fn print(f: &Value) {
    let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    println!(
        "| weak scaling, `weir run`, {} cores, medians of {} runs | parallelism | records | records/s | process CPU ns/record | efficiency |",
        f["cores"], f["runs"]
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for row in f["rows"].as_array().into_iter().flatten() {
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.2} |",
            row["pipeline"].as_str().unwrap_or("?"),
            row["parallelism"],
            row["records"],
            num(&row["records_per_s"]),
            num(&row["process_cpu_ns_per_record"]),
            num(&row["efficiency"]),
        );
    }
}
