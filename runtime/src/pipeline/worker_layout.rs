//! `refuse_other_layouts`: a worker never starts over checkpoints of another number of
//! workers.
//!
//! Invariant: worker I of N starts only if the spec's checkpoint dir holds no complete
//! checkpoint of a different N (`worker-*-of-<M>/` for M != N, or checkpoints directly
//! in the dir, which are the pipeline's as one worker). Such checkpoints mean the
//! pipeline was rescaled; each worker's checkpoint holds only its own partitions'
//! positions, so starting anyway would read the other partitions from wherever
//! `start` says (duplicates or loss). Until rescaling exists, that is refused with one
//! line saying what was found. Checked for local checkpoint dirs; an object-store
//! prefix is not listed here (see README, "Workers").

use std::path::Path;

use crate::cluster::Worker;
use crate::pipeline::error::PipelineError;
use crate::storage::CheckpointLocation;
use crate::storage::layout::{METADATA_FILE, parse_checkpoint_dir};

/// Refuses `worker` of `pipeline` if `root` (the spec's checkpoint dir, before the
/// worker's own subdirectory is added) holds another layout's complete checkpoints.
pub fn refuse_other_layouts(
    pipeline: &str,
    worker: Worker,
    root: &CheckpointLocation,
) -> Result<(), PipelineError> {
    let Some(dir) = root.as_local() else {
        return Ok(());
    };
    let mut found: Vec<String> = worker_dirs(root)
        .into_iter()
        .filter(|(name, other)| {
            other.count() != worker.count() && holds_complete_checkpoint(&dir.join(name))
        })
        .map(|(name, _)| name)
        .collect();
    if !worker.is_single() && holds_complete_checkpoint(dir) {
        found.push("the pipeline run as one worker".to_owned());
    }
    if found.is_empty() {
        return Ok(());
    }
    found.sort();
    Err(PipelineError::OtherWorkerLayout {
        pipeline: pipeline.to_owned(),
        worker,
        storage: root.to_string(),
        found: found.join(", "),
    })
}

/// The workers' locations (`worker-I-of-N/`) in the local checkpoint dir `root`, by
/// name, sorted; none for an object-store prefix or a dir that does not exist.
pub fn worker_dirs(root: &CheckpointLocation) -> Vec<(String, Worker)> {
    let Some(Ok(entries)) = root.as_local().map(std::fs::read_dir) else {
        return Vec::new();
    };
    let mut found: Vec<(String, Worker)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            Worker::parse_dir_name(&name).map(|w| (name, w))
        })
        .collect();
    found.sort();
    found
}

/// Whether `dir` holds a complete checkpoint (`chk-*/_metadata`).
fn holds_complete_checkpoint(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name()
                .to_str()
                .and_then(parse_checkpoint_dir)
                .is_some()
                && e.path().join(METADATA_FILE).is_file()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(dir: &Path, id: u64) {
        let chk = dir.join(format!("chk-{id:010}"));
        std::fs::create_dir_all(&chk).expect("mkdir");
        std::fs::write(chk.join(METADATA_FILE), b"{}").expect("metadata");
    }

    #[test]
    fn another_number_of_workers_is_refused_the_same_number_is_not() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = CheckpointLocation::Local(tmp.path().to_owned());
        let w = |i, n| Worker::new(i, n).expect("worker");
        // Nothing yet, or only this layout's checkpoints: fine.
        refuse_other_layouts("p", w(1, 3), &root).expect("empty");
        complete(&tmp.path().join("worker-0-of-3"), 1);
        complete(&tmp.path().join("worker-2-of-3"), 4);
        refuse_other_layouts("p", w(1, 3), &root).expect("same N");
        // An incomplete checkpoint of another N does not count.
        std::fs::create_dir_all(tmp.path().join("worker-1-of-2/chk-0000000001")).expect("mkdir");
        refuse_other_layouts("p", w(1, 3), &root).expect("incomplete");
        let error = refuse_other_layouts("p", w(0, 2), &root).expect_err("3 -> 2");
        assert_eq!(
            error.to_string(),
            format!(
                "pipeline p, worker 0/2: checkpoint storage {} holds complete checkpoints of worker-0-of-3, worker-2-of-3: changing the number of workers (rescaling) is not supported yet; run with the same number of workers as before, or with --from-scratch on a fresh checkpoint dir",
                tmp.path().display()
            )
        );
        assert!(
            refuse_other_layouts("p", Worker::SINGLE, &root).is_err(),
            "3 -> 1"
        );
        // A single worker's checkpoints refuse N > 1 but not another single run.
        let single = tempfile::tempdir().expect("tempdir");
        let root = CheckpointLocation::Local(single.path().to_owned());
        complete(single.path(), 7);
        refuse_other_layouts("p", Worker::SINGLE, &root).expect("1 -> 1");
        let error = refuse_other_layouts("p", w(0, 2), &root).expect_err("1 -> 2");
        assert!(
            error.to_string().contains("the pipeline run as one worker"),
            "{error}"
        );
    }
}
