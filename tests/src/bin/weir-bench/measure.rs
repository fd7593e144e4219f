//! How one side of a comparison is measured: wall time, the CPU time of the calling
//! thread, and the CPU time of the whole process (every thread: the state writer,
//! RocksDB's flushes and compactions, uploads), each over [`RUNS`] runs, reported as
//! medians with the spread of records/s.
//!
//! Invariants: a sample's clocks start after its input is built and stop after its
//! work is done, durable work included where the side has any (Weir's state is
//! checkpointed inside the span, so no write-back or flush is still running when the
//! clock stops); nothing else runs in the process meanwhile (each section is a child
//! process of its own, and sides run one after another).

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

/// Runs per side; figures are their medians.
pub const RUNS: usize = 5;

/// One run of one side.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub wall: Duration,
    pub thread_cpu: Duration,
    pub process_cpu: Duration,
}

fn cpu_clock(clock: nix::time::ClockId) -> anyhow::Result<Duration> {
    let t = nix::time::clock_gettime(clock).context("clock_gettime")?;
    Ok(Duration::new(
        u64::try_from(t.tv_sec()).context("CPU seconds")?,
        u32::try_from(t.tv_nsec()).context("CPU nanoseconds")?,
    ))
}

/// CPU time of the calling thread so far, to the nanosecond (`CLOCK_THREAD_CPUTIME_ID`;
/// not `getrusage`, whose thread times advance in 4 ms scheduler ticks).
pub fn thread_cpu() -> anyhow::Result<Duration> {
    cpu_clock(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time of every thread of this process so far (`CLOCK_PROCESS_CPUTIME_ID`).
pub fn process_cpu() -> anyhow::Result<Duration> {
    cpu_clock(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
}

/// Times `work` on the three clocks.
pub fn sample(work: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<Sample> {
    let (wall, thread, process) = (Instant::now(), thread_cpu()?, process_cpu()?);
    work()?;
    Ok(Sample {
        thread_cpu: thread_cpu()? - thread,
        process_cpu: process_cpu()? - process,
        wall: wall.elapsed(),
    })
}

/// A side's figures over its runs.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    pub runs: usize,
    /// Median, lowest and highest records/s (wall clock).
    pub records_per_s: f64,
    pub records_per_s_min: f64,
    pub records_per_s_max: f64,
    /// Median CPU ns per record of the calling thread, and of the whole process.
    pub thread_cpu_ns: f64,
    pub process_cpu_ns: f64,
}

/// The median of `values` (the mean of the middle two for an even count).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The median, lowest and highest of `values`.
pub fn spread(values: Vec<f64>) -> (f64, f64, f64) {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (median(values), min, max)
}

impl Figures {
    /// The figures of `samples`, each over `records` records.
    pub fn of(records: u64, samples: &[Sample]) -> Figures {
        let n = records as f64;
        let rates: Vec<f64> = samples.iter().map(|s| n / s.wall.as_secs_f64()).collect();
        let per_record = |f: fn(&Sample) -> Duration| {
            median(samples.iter().map(|s| f(s).as_nanos() as f64 / n).collect())
        };
        Figures {
            runs: samples.len(),
            records_per_s_min: rates.iter().copied().fold(f64::INFINITY, f64::min),
            records_per_s_max: rates.iter().copied().fold(0.0, f64::max),
            records_per_s: median(rates),
            thread_cpu_ns: per_record(|s| s.thread_cpu),
            process_cpu_ns: per_record(|s| s.process_cpu),
        }
    }

    /// As JSON, with what the side is (`kind`).
    pub fn json(&self, kind: &str) -> Value {
        json!({
            "kind": kind,
            "runs": self.runs,
            "records_per_s": self.records_per_s,
            "records_per_s_min": self.records_per_s_min,
            "records_per_s_max": self.records_per_s_max,
            "thread_cpu_ns_per_record": self.thread_cpu_ns,
            "process_cpu_ns_per_record": self.process_cpu_ns,
        })
    }
}
