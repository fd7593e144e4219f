//! `weir run SPEC.toml [--worker I/N]`: runs a pipeline (or worker I of N of it) locally
//! until its sources are drained, or until SIGINT or SIGTERM.
//!
//! A first SIGINT/SIGTERM asks the run to stop after one more committed checkpoint;
//! the run then says where it will resume and exits 130 (SIGINT) or 143 (SIGTERM), as a
//! shell expects of a command ended by a signal. A second one ends the process at once
//! with the same code (a guest call is bounded by its deadline, but an operator must
//! never have to reach for SIGKILL): exactly-once does not need the stop checkpoint,
//! recovery replays from the last committed one. A run asked to stop that fails before
//! its stop checkpoint (a guest call stuck until its deadline) says its error and
//! exits with the signal's code too: it ended as asked, within the call deadline.
//!
//! A run that stops making progress (a broker that stalls past every bound, see
//! `watchdog`) does not hang: the watchdog prints one `weir: error:` line naming what
//! is stuck and exits 75, for the supervisor to restart it.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use anyhow::Context;
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::checkpoint::coordinator::RunEnd;
use crate::cluster::Worker;
use crate::metrics::PipelineMetrics;
use crate::metrics::endpoint::{self, WorkerEndpoint};
use crate::pipeline::{self, RunOptions, RunSummary};
use crate::record::CheckpointId;
use crate::spec::PipelineSpec;
use crate::watchdog::{self, Watchdog, WatchdogConfig};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The pipeline spec (TOML).
    pub spec: PathBuf,
    /// Discard the pipeline's checkpoints and committed file output and start over.
    #[arg(long, conflicts_with = "from_checkpoint")]
    pub from_scratch: bool,
    /// Resume from complete checkpoint N, whatever the Kafka progress markers say, and
    /// discard newer checkpoints (for when the markers were lost: `weir checkpoints`
    /// lists the candidates).
    #[arg(long, value_name = "N")]
    pub from_checkpoint: Option<u64>,
    /// Serve /healthz, /readyz and /metrics on this address (e.g. 0.0.0.0:9464) for
    /// an orchestrator's probes and a Prometheus scrape, from before recovery on.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Run worker I of N of the pipeline (I counts from 0): it reads its own share of
    /// the Kafka source partitions and commits on its own (transactional ids
    /// `<prefix><pipeline>.<I>.{0,1}`, checkpoints and state in `worker-<I>-of-<N>/`).
    /// Without it the pipeline runs whole, as worker 0/1.
    #[arg(long, value_name = "I/N", default_value_t = Worker::SINGLE)]
    pub worker: Worker,
    /// Do not show progress, even on a terminal.
    #[arg(long, short)]
    pub quiet: bool,
    /// Write the run's counters to this JSON file twice a second (for a supervisor).
    #[arg(long, value_name = "PATH", hide = true)]
    pub status_file: Option<PathBuf>,
    /// Run as the worker of supervisor process PID: die with it (SIGKILL when it
    /// exits, whatever way), so a killed server leaves no orphan pipeline behind.
    #[arg(long, value_name = "PID", hide = true)]
    pub supervised_by: Option<i32>,
}

pub fn execute(args: RunArgs) -> anyhow::Result<ExitCode> {
    if let Some(supervisor) = args.supervised_by {
        // SIGKILL when the supervisor's thread that started this worker ends.
        crate::child_process::die_with_parent(supervisor).map_err(anyhow::Error::msg)?;
    }
    let spec = PipelineSpec::load(&args.spec)?;
    let show_progress = !args.quiet && std::io::stderr().is_terminal();
    let stop = stop_on_signals()?;
    let metrics = Arc::new(PipelineMetrics::default());
    let stall_after = endpoint::stall_after(spec.checkpoint.interval, spec.checkpoint.timeout);
    let _watchdog = Watchdog::start(WatchdogConfig {
        pipeline: spec.name.clone(),
        metrics: metrics.clone(),
        stall_after,
        on_stall: Box::new(|line| {
            eprintln!("weir: error: {line}");
            std::process::exit(i32::from(watchdog::EXIT_STALLED));
        }),
    });
    // Up before recovery, so probes are answered while state is restored.
    let _endpoint = match args.http {
        Some(addr) => {
            let served = WorkerEndpoint::start(
                addr,
                &spec.name,
                metrics.clone(),
                stall_after,
                stop.clone(),
            )?;
            eprintln!("weir: health endpoint on http://{}", served.addr());
            Some(served)
        }
        None => None,
    };
    // Pipeline errors already name the pipeline, task and operator.
    let asked_to_stop = stop.clone();
    let options = RunOptions {
        from_scratch: args.from_scratch,
        from_checkpoint: args.from_checkpoint.map(CheckpointId),
        show_progress,
        stop,
        compile_program: Some(super::this_program()?),
        status_file: args.status_file,
        metrics,
        worker: args.worker,
    };
    let who = if args.worker.is_single() {
        spec.name.clone()
    } else {
        format!("{} (worker {})", spec.name, args.worker)
    };
    let summary = match pipeline::run(&spec, &options) {
        Ok(summary) => summary,
        Err(e) => return failed(e.into(), &asked_to_stop, &who),
    };
    Ok(report(&summary, &who, &spec.dead_letter.path))
}

/// The run's last line (how it ended, what it counted, where the dead letters are, where
/// it resumes) and its exit code.
fn report(summary: &RunSummary, who: &str, dead_letter: &std::path::Path) -> ExitCode {
    let m = &summary.metrics;
    let mut counts = format!(
        "{} records in, {} out, {} dead letters ({} late)",
        m.records_in, m.records_out, m.dead_letters, m.late_records
    );
    if m.dead_letters > 0 {
        counts.push_str(&format!(" in {}", dead_letter.display()));
    }
    if m.records_skipped > 0 {
        counts.push_str(&format!(
            ", {} input records skipped (deleted by retention before they were read)",
            m.records_skipped
        ));
    }
    let resumed = match summary.restored_from {
        Some(id) => format!(" (resumed from checkpoint {id})"),
        None => String::new(),
    };
    match summary.end {
        RunEnd::Finished(last) => {
            eprintln!("weir: pipeline {who} finished: {counts}; last checkpoint {last}{resumed}");
            ExitCode::SUCCESS
        }
        RunEnd::Stopped { checkpoint, signal } => {
            eprintln!(
                "weir: pipeline {who} stopped by {}: {counts}{resumed}; checkpoint {checkpoint} committed, `weir run` resumes from it",
                signal_name(signal)
            );
            ExitCode::from(exit_code(signal))
        }
    }
}

/// A run that failed. Had SIGINT or SIGTERM asked it to stop before (a guest call
/// stuck until its deadline, say), it did end as asked, only without its stop
/// checkpoint: the error is said and the exit code is the signal's, as a shell expects;
/// otherwise the error is the run's.
fn failed(e: anyhow::Error, asked_to_stop: &AtomicUsize, who: &str) -> anyhow::Result<ExitCode> {
    match asked_to_stop.load(Ordering::SeqCst) {
        0 => Err(e),
        signal => {
            eprintln!("weir: error: {}", super::error_line(&e));
            eprintln!(
                "weir: pipeline {who} stopped by {} without its stop checkpoint (it failed first); `weir run` resumes from its last committed checkpoint",
                signal_name(signal)
            );
            Ok(ExitCode::from(exit_code(signal)))
        }
    }
}

/// A flag set to the signal's number by the first SIGINT or SIGTERM; the second one
/// exits the process at once.
fn stop_on_signals() -> anyhow::Result<Arc<AtomicUsize>> {
    let stop = Arc::new(AtomicUsize::new(0));
    let requested = Arc::new(AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM] {
        // Registered first, so it sees `requested` as it was before this signal.
        signal_hook::flag::register_conditional_shutdown(
            signal,
            i32::from(exit_code(signal as usize)),
            requested.clone(),
        )
        .and_then(|_| signal_hook::flag::register(signal, requested.clone()))
        .and_then(|_| signal_hook::flag::register_usize(signal, stop.clone(), signal as usize))
        .context("cannot install the SIGINT/SIGTERM handlers")?;
    }
    Ok(stop)
}

/// 128 + the signal number, as shells report a command ended by a signal.
fn exit_code(signal: usize) -> u8 {
    u8::try_from(128 + signal).unwrap_or(1)
}

fn signal_name(signal: usize) -> &'static str {
    match signal as i32 {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};
    use crate::cluster::Worker;

    fn worker_of(args: &[&str]) -> Result<Worker, String> {
        let argv = ["weir", "run", "spec.toml"].iter().chain(args);
        match Cli::try_parse_from(argv) {
            Ok(Cli {
                command: Command::Run(run),
                ..
            }) => Ok(run.worker),
            Ok(_) => Err("not a run".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn the_worker_flag_defaults_to_0_of_1_and_refuses_what_is_not_a_worker() {
        assert_eq!(worker_of(&[]), Ok(Worker::SINGLE));
        assert_eq!(
            worker_of(&["--worker", "2/3"]).map(|w| w.to_string()),
            Ok("2/3".into())
        );
        assert_eq!(worker_of(&["--worker=0/1"]), Ok(Worker::SINGLE));
        for (bad, says) in [
            (
                "3/3",
                "worker 3 does not exist among 3 workers (I counts from 0, so I < N)",
            ),
            ("0/0", "N must be at least 1"),
            ("x", "is not I/N"),
        ] {
            let error = worker_of(&["--worker", bad]).expect_err(bad);
            let first = error.lines().next().unwrap_or_default();
            assert!(
                first.starts_with(&format!(
                    "error: invalid value '{bad}' for '--worker <I/N>'"
                )) && first.contains(says),
                "{bad}: {error}"
            );
        }
    }
}
