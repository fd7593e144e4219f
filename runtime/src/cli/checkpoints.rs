//! `weir checkpoints SPEC.toml`: lists a pipeline's complete checkpoints.

use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use crate::checkpoint::metadata::CheckpointMetadata;
use crate::spec::PipelineSpec;
use crate::storage::CheckpointStorage;

#[derive(Debug, clap::Args)]
pub struct CheckpointsArgs {
    /// The pipeline spec (TOML) whose checkpoints to list.
    pub spec: PathBuf,
}

pub fn execute(args: CheckpointsArgs) -> anyhow::Result<()> {
    let spec = PipelineSpec::load(&args.spec)?;
    let storage = CheckpointStorage::open_read_only(&spec.checkpoint.dir)?;
    let ids = storage.complete_checkpoints()?;
    if ids.is_empty() {
        println!(
            "pipeline {}: no checkpoints in {}",
            spec.name, spec.checkpoint.dir
        );
        return Ok(());
    }
    println!(
        "{:>8}  {:<24}  {:>12}  {:>11}  {:>12}  {}",
        "id", "completed (UTC)", "state bytes", "files added", "bytes added", "duration"
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
