//! `weir checkpoints SPEC.toml [--worker I/N]`: lists a pipeline's (or one of its
//! workers') complete checkpoints. Without `--worker` over a checkpoint dir of
//! workers, it names every worker location with its newest checkpoint and layout
//! generation, and says which layout is current (several are kept after a rescale).
//! Reads only, on a local dir or an `s3://` prefix alike.

use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use crate::checkpoint::metadata::CheckpointMetadata;
use crate::cluster::Worker;
use crate::pipeline::worker_layout;
use crate::pipeline::worker_plan::WorkerPlan;
use crate::spec::PipelineSpec;
use crate::storage::CheckpointStorage;

#[derive(Debug, clap::Args)]
pub struct CheckpointsArgs {
    /// The pipeline spec (TOML) whose checkpoints to list.
    pub spec: PathBuf,
    /// The checkpoints of worker I of N (`weir run --worker I/N`), which keeps its own.
    #[arg(long, value_name = "I/N", default_value_t = Worker::SINGLE)]
    pub worker: Worker,
}

pub fn execute(args: CheckpointsArgs) -> anyhow::Result<()> {
    let whole = PipelineSpec::load(&args.spec)?;
    if args.worker.is_single() {
        let locations = worker_layout::worker_locations(&whole.name, &whole.checkpoint.dir)?;
        if !locations.is_empty() {
            print_worker_locations(&whole, &locations);
            return Ok(());
        }
    }
    let spec = WorkerPlan::new(&whole, args.worker)?.spec;
    let storage = CheckpointStorage::open_read_only(&spec.checkpoint.dir)?;
    let ids = storage.complete_checkpoints()?;
    if ids.is_empty() {
        let worker = match args.worker.dir_name() {
            Some(_) => format!(", worker {}", args.worker),
            None => String::new(),
        };
        println!(
            "pipeline {}{worker}: no checkpoints in {}",
            spec.name, spec.checkpoint.dir
        );
        return Ok(());
    }
    println!(
        "{:>8}  {:<24}  {:>12}  {:>11}  {:>12}  duration",
        "id", "completed (UTC)", "state bytes", "files added", "bytes added"
    );
    for id in ids {
        let metadata = CheckpointMetadata::read(&storage, id)?;
        let time = UNIX_EPOCH + Duration::from_millis(metadata.completed_at_ms);
        println!(
            "{:>8}  {:<24}  {:>12}  {:>11}  {:>12}  {} ms{}",
            id.0,
            humantime::format_rfc3339_millis(time).to_string(),
            metadata.state_bytes,
            metadata.files_added,
            metadata.bytes_added,
            metadata.duration_ms,
            if metadata.is_final { "  (final)" } else { "" }
        );
    }
    Ok(())
}

/// The worker locations of a checkpoint dir, each with its newest checkpoint and
/// layout generation; the highest generation is the current layout (see
/// `cluster::layout`), the others are kept from before a rescale.
fn print_worker_locations(spec: &PipelineSpec, locations: &[worker_layout::WorkerLocation]) {
    let names: Vec<&str> = locations.iter().map(|l| l.name.as_str()).collect();
    println!(
        "pipeline {} runs as workers, each with its own checkpoints: {} in {} (list one with --worker I/N)",
        spec.name,
        names.join(", "),
        spec.checkpoint.dir
    );
    let current = locations
        .iter()
        .filter_map(|l| l.newest.map(|(_, stamp)| stamp.generation))
        .max();
    for l in locations {
        let status = match l.newest {
            None => "no complete checkpoint".to_owned(),
            Some((id, stamp)) => {
                let role = if Some(stamp.generation) == current {
                    "the current layout"
                } else {
                    "an earlier layout, kept from before a rescale"
                };
                format!(
                    "newest checkpoint {id}, layout generation {} ({role})",
                    stamp.generation
                )
            }
        };
        println!("  {}: {status}", l.name);
    }
}
