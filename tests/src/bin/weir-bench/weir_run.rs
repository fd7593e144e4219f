//! One `weir run` of a generated workload, timed and its output checked: what the
//! `keys` and `scaling` sections measure.
//!
//! A run is generator -> one step -> file sink, checkpoints every second (the default),
//! the spec and state in a scratch directory on /dev/shm where there is one (the disk
//! is not what is measured). Measured: wall time of the whole `weir run`, spawn to exit
//! (start-up, every checkpoint, the last one and the sink's commit included), and the
//! child's CPU time over all its threads (`getrusage(RUSAGE_CHILDREN)` around it).
//!
//! Every run's committed output is checked, so a fast wrong run fails the bench: the
//! map's line count is its record count; a windowed count's counts sum to it; an
//! unwindowed count's output is a changelog (each batch emits its keys' new counts),
//! so the last (largest) count of every key sums to it.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use weir_tests::process_cpu::children_cpu;

/// The step of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `uppercase`.
    Map,
    /// `word_count` in one-hour tumbling windows.
    WindowedCount,
    /// `word_count` without a window.
    Count,
}

impl Shape {
    pub fn name(self) -> &'static str {
        match self {
            Shape::Map => "map (uppercase)",
            Shape::WindowedCount => "aggregate (word_count, 1 h windows, keys revisited)",
            Shape::Count => "aggregate (word_count, unwindowed, keys revisited)",
        }
    }

    fn step(self, guests: &Path, window_hours: u64) -> String {
        let module = |file: &str| weir_tests::toml_path(&guests.join(file));
        match self {
            Shape::Map => format!(
                "[[steps]]\ntype = \"map\"\nmodule = {}\n",
                module("uppercase.wasm")
            ),
            Shape::WindowedCount => format!(
                "[[steps]]\ntype = \"aggregate\"\nmodule = {}\nwindow = {{ type = \"tumbling\", size = \"{window_hours}h\" }}\n",
                module("word_count.wasm")
            ),
            Shape::Count => format!(
                "[[steps]]\ntype = \"aggregate\"\nmodule = {}\n",
                module("word_count.wasm")
            ),
        }
    }
}

/// What one run generates and runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Workload {
    pub shape: Shape,
    pub parallelism: usize,
    /// Records over all subtasks.
    pub records: u64,
    /// Keys over all subtasks.
    pub keys: u64,
    /// `None`: keys drawn uniformly; `Some(s)`: by Zipf's law with exponent `s`.
    pub zipf: Option<f64>,
    /// The windowed count's windows: `None`, one hour long over the generator's default
    /// event times (which start 800,000 ms into an hour); `Some(h)`, `h` hours long over
    /// event times from 0, so a run of at most `h` hours of event time (at 1 ms a
    /// record, 3,600,000 records an hour) falls in one window.
    pub aligned_window_hours: Option<u64>,
}

/// Wall time and CPU time (all threads) of one run.
#[derive(Debug, Clone, Copy)]
pub struct Timed {
    pub wall: Duration,
    pub cpu: Duration,
}

/// Runs `work` once with the guests in `guests` (an absolute path: the spec lives in a
/// scratch directory); its output checked.
pub fn run_once(guests: &Path, work: &Workload) -> anyhow::Result<Timed> {
    let dir = scratch_dir()?;
    let out = dir.path().join("out");
    let mut generator = match work.zipf {
        None => String::new(),
        Some(s) => format!("key_distribution = {{ zipf = {s} }}\n"),
    };
    if work.aligned_window_hours.is_some() {
        generator.push_str("start_time = 0\n");
    }
    let spec = format!(
        "name = \"bench\"\nparallelism = {}\nstate_dir = {}\n\
         [[sources]]\ntype = \"generator\"\ncount = {}\nkeys = {}\n{generator}value_size = 64\n\
         {}[[sinks]]\ntype = \"file\"\npath = {}\n[checkpoint]\ninterval = \"1s\"\n",
        work.parallelism,
        weir_tests::toml_path(&dir.path().join("state")),
        work.records,
        work.keys,
        work.shape
            .step(guests, work.aligned_window_hours.unwrap_or(1)),
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
        "weir run of {work:?}: {}: {}",
        run.status,
        weir_tests::stderr_of(&run)
    );
    check_output(work, &out)?;
    Ok(Timed { wall, cpu })
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

/// The output's records (map), or counts (aggregates), sum to the input's records.
fn check_output(work: &Workload, out: &Path) -> anyhow::Result<()> {
    let (mut lines, mut summed) = (0u64, 0u64);
    // The unwindowed count's latest count per key index ("k<index>").
    let mut latest = vec![
        0u64;
        if work.shape == Shape::Count {
            work.keys as usize
        } else {
            0
        }
    ];
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
            let count = || {
                number_after(&line, "\"count\":").with_context(|| format!("a count in {line:?}"))
            };
            match work.shape {
                Shape::Map => {}
                Shape::WindowedCount => summed += count()?,
                Shape::Count => {
                    let key = number_after(&line, "\"word\":\"k")
                        .and_then(|k| latest.get_mut(k as usize))
                        .with_context(|| format!("a key k0..k{} in {line:?}", work.keys - 1))?;
                    *key = (*key).max(count()?);
                }
            }
        }
    }
    let got = match work.shape {
        Shape::Map => lines,
        Shape::WindowedCount => summed,
        Shape::Count => latest.iter().sum(),
    };
    anyhow::ensure!(
        got == work.records,
        "{}: {got} records in the output, {} in",
        work.shape.name(),
        work.records
    );
    Ok(())
}

/// The decimal number right after `prefix` in `line`.
fn number_after(line: &str, prefix: &str) -> Option<u64> {
    let rest = &line[line.find(prefix)? + prefix.len()..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}
