//! Long runs of one guest through `weir run`, watched through its status file: how
//! much linear memory the guest's instance holds early on and at the end, and whether
//! every record came out exactly once.
//!
//! The input is the generator (deterministic: record `i`'s key, value and event time
//! are a function of `i` and the seed), so the expected output is computed here, from
//! the same `GeneratorConfig`, and checked line by line without holding millions of
//! lines in memory.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use weir::connector::generator::{GeneratorConfig, Scratch};
use weir::metrics::MetricsSnapshot;
use weir::record::batch::RecordBatch;

use crate::{stderr_of, toml_path, weir};

/// The generator's rate in a soak, records/s: above what an interpreted guest does, so
/// it only paces a Rust guest, whose run would otherwise end before the status file
/// (written twice a second) showed its memory after the first 100,000 records.
pub const SOAK_RATE: u64 = 1_000_000;

/// How many records a soak runs: `WEIR_SOAK_RECORDS`, else `default` (`make soak` sets
/// it higher than `make test`'s default).
pub fn soak_records(default: u64) -> u64 {
    std::env::var("WEIR_SOAK_RECORDS")
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// The generator every soak reads: `records` records over `keys` keys that come back,
/// 64-byte texts, one ms apart, no skew, at most [`SOAK_RATE`] a second.
pub fn generator(records: u64, keys: u64) -> GeneratorConfig {
    let mut config = GeneratorConfig::with_count(records);
    config.rate = SOAK_RATE;
    config.keys = keys;
    config.value_size = 64;
    config.seed = 31;
    config
}

/// The `[[sources]]` table of `config`.
pub fn generator_source(config: &GeneratorConfig) -> String {
    format!(
        "[[sources]]\ntype = \"generator\"\ncount = {}\nrate = {}\nkeys = {}\nvalue_size = {}\nseed = {}\n\
         start_time = {}\ntime_step = \"{}ms\"\n",
        config.count,
        config.rate,
        config.keys,
        config.value_size,
        config.seed,
        config.start_time,
        config.time_step.as_millis(),
    )
}

/// What a soak saw: the guest's linear memory (its largest instance) once the sources
/// had read `early_records`, and at the end; how many instances the runtime recycled;
/// which code tiers it ran on.
#[derive(Debug, Clone, Copy)]
pub struct SoakMemory {
    pub early_bytes: u64,
    pub final_bytes: u64,
    pub recycled: u64,
    pub wall: Duration,
    pub tiers: SoakTiers,
}

/// The code a soak's guest ran on (`engine::code_tier`), from weir's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SoakTiers {
    /// Optimized code from the start (a small module).
    Optimized,
    /// Baseline code until the end: the run ended before optimized code was ready.
    Baseline,
    /// Baseline code first, then optimized code, mid-run.
    BaselineThenOptimized,
}

impl SoakTiers {
    fn from_log(stderr: &str) -> SoakTiers {
        match (
            stderr.contains("starting on baseline code"),
            stderr.contains("optimized code ready"),
        ) {
            (false, _) => SoakTiers::Optimized,
            (true, false) => SoakTiers::Baseline,
            (true, true) => SoakTiers::BaselineThenOptimized,
        }
    }
}

/// Runs `weir run --quiet spec` to its end, polling its status file, with an empty
/// compiled-code cache of its own (so a large guest starts on baseline code and moves to
/// optimized code mid-run, as a user's first run of a new module does); asserts rc 0
/// and returns the memory of `step`'s guest after `early_records` and at the end.
pub fn run_watching_memory(spec: &Path, step: &str, early_records: u64) -> SoakMemory {
    let status = spec.with_extension("status.json");
    let started = Instant::now();
    let mut child = weir()
        .args(["run", "--quiet", "--status-file"])
        .arg(&status)
        .arg(spec)
        .env("WEIR_CACHE_DIR", spec.with_extension("compiled"))
        .env("WEIR_LOG", "warn,weir::engine::guest_module=info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weir");
    let mut early = None;
    let exit = loop {
        if let Some(exit) = child.try_wait().expect("wait for weir") {
            break exit;
        }
        if early.is_none() {
            early = read_status(&status)
                .filter(|m| m.records_in >= early_records)
                .and_then(|m| step_memory(&m, step));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = child.wait_with_output().expect("collect weir's stderr");
    assert!(
        exit.success(),
        "{} failed ({exit}): {}",
        spec.display(),
        stderr_of(&output)
    );
    let last = read_status(&status).expect("the status file after the run");
    SoakMemory {
        recycled: last.guest_memory.get(step).map_or(0, |s| s.recycled),
        early_bytes: early.unwrap_or_else(|| {
            panic!("{step}'s guest memory was never seen after {early_records} records")
        }),
        final_bytes: step_memory(&last, step).expect("the step's guest memory at the end"),
        wall: started.elapsed(),
        tiers: SoakTiers::from_log(&stderr_of(&output)),
    }
}

fn read_status(path: &Path) -> Option<MetricsSnapshot> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn step_memory(m: &MetricsSnapshot, step: &str) -> Option<u64> {
    m.guest_memory
        .get(step)
        .map(|s| s.max_bytes)
        .filter(|&bytes| bytes > 0)
}

/// Record `i` of `config`: (key, value, event time); `batch` is scratch space.
fn record(
    config: &GeneratorConfig,
    i: u64,
    scratch: &mut Scratch,
    batch: &mut RecordBatch,
) -> (String, String, i64) {
    batch.clear();
    config.push_record(i, batch, scratch);
    let r = batch.get(0);
    (
        String::from_utf8(r.key.to_vec()).expect("generator keys are UTF-8"),
        String::from_utf8(r.value.to_vec()).expect("generator values are UTF-8"),
        r.timestamp,
    )
}

/// The committed files of a file sink in `dir`, in name order.
fn committed_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the sink's directory")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Each committed line of the file sink in `dir`, streamed to `f`.
fn for_each_line(dir: &Path, mut f: impl FnMut(&str)) {
    for file in committed_files(dir) {
        let reader = BufReader::new(std::fs::File::open(&file).expect("open committed file"));
        for line in reader.lines() {
            f(&line.expect("read a committed line"));
        }
    }
}

/// Asserts that the file sink in `dir` committed exactly the uppercase of every
/// generated value, each once (the `uppercase` examples, `format = "value"`).
pub fn assert_uppercase_output(dir: &Path, config: &GeneratorConfig) {
    let mut seen = vec![false; config.count as usize];
    let (mut scratch, mut batch) = (Scratch::default(), RecordBatch::default());
    let mut lines = 0u64;
    for_each_line(dir, |line| {
        lines += 1;
        let id = line
            .strip_prefix("{\"ID\":")
            .and_then(|rest| rest.split(',').next())
            .and_then(|id| id.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("not an uppercased generator value: {line}"));
        assert!(id < config.count, "record {id} is past the input: {line}");
        let (_, value, _) = record(config, id, &mut scratch, &mut batch);
        assert_eq!(line, value.to_uppercase(), "record {id}");
        assert!(!seen[id as usize], "record {id} committed twice");
        seen[id as usize] = true;
    });
    assert_eq!(lines, config.count, "committed lines");
}

/// Asserts that the file sink in `dir` committed exactly one line per (key, tumbling
/// window of `window_ms`) of the generated records, with its count, as the `word-count`
/// examples write it (`{"word":K,"window_start":S,"window_end":E,"count":N}`).
pub fn assert_window_counts(dir: &Path, config: &GeneratorConfig, window_ms: i64) {
    let mut expected = HashMap::<String, u64>::new();
    let (mut scratch, mut batch) = (Scratch::default(), RecordBatch::default());
    for i in 0..config.count {
        let (key, _, time) = record(config, i, &mut scratch, &mut batch);
        let start = time.div_euclid(window_ms) * window_ms;
        let line = format!(
            "{{\"word\":\"{key}\",\"window_start\":{start},\"window_end\":{},\"count\":",
            start + window_ms
        );
        *expected.entry(line).or_default() += 1;
    }
    let mut unexpected = Vec::new();
    for_each_line(dir, |line| {
        let found = line.rfind(':').and_then(|at| {
            let count = line[at + 1..].strip_suffix('}')?.parse::<u64>().ok()?;
            (expected.get(&line[..=at]) == Some(&count)).then_some(at)
        });
        match found {
            Some(at) => {
                expected.remove(&line[..=at]);
            }
            None if unexpected.len() < 5 => unexpected.push(line.to_owned()),
            None => {}
        }
    });
    assert!(
        unexpected.is_empty(),
        "unexpected or duplicate lines: {unexpected:?}"
    );
    let missing: Vec<_> = expected.keys().take(5).collect();
    assert!(
        missing.is_empty(),
        "{} windows missing, e.g. {missing:?}",
        expected.len()
    );
}

/// A pipeline spec: the generator, one step (`step_table`), the file sink in `dir/out`.
pub fn soak_spec(dir: &Path, name: &str, config: &GeneratorConfig, steps: &str) -> PathBuf {
    let spec = format!(
        "name = \"{name}\"\nstate_dir = {state}\n\n[checkpoint]\ninterval = \"1s\"\n\n{source}\n{steps}\n\
         [[sinks]]\ntype = \"file\"\npath = {out}\n",
        state = toml_path(&dir.join("state")),
        source = generator_source(config),
        out = toml_path(&dir.join("out")),
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, spec).expect("write the spec");
    path
}
