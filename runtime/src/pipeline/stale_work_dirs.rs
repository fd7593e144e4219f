//! Other layouts' working directories on this machine, removed when a run starts.
//!
//! Invariants:
//! - Only scratch is removed: the `work/` directory of a state dir (`build::work_dir`),
//!   which holds the RocksDB working copies a run wipes and rebuilds from checkpoint
//!   storage whenever it opens them (`state::backend`). Checkpoints, local ones
//!   included, live in checkpoint storage and only `checkpoint::layout_cleanup` removes
//!   them; the state dir itself and its lock file stay.
//! - A state dir's `work/` is removed only under that dir's lock (`StateDirLock`, taken
//!   without waiting and released at once): a process still running in it, an old
//!   worker not yet stopped, keeps it.
//! - Which: of the pipeline's root state dir `R`, the pipeline as one process uses `R`
//!   itself and worker I of N uses `R/worker-I-of-N` (`WorkerPlan::new`). A run
//!   as worker I of N removes the work of `R` and of every `R/worker-J-of-M` with
//!   M != N; a run as one process, that of every `R/worker-J-of-M`. The workers of its
//!   own layout are its siblings and are left alone.
//! - Started at the end of `recover`, once the run is the current layout (a refused
//!   run, handed over or locked out, removes nothing), on a thread of its own: the run
//!   does not wait for it. What cannot be removed is logged; it never fails the run. A
//!   run that ends before it finished leaves the rest to the next start.

use std::path::{Path, PathBuf};

use crate::cluster::Worker;
use crate::pipeline::build::WORK_DIR;
use crate::pipeline::state_dir_lock::StateDirLock;

/// [`remove_other_layouts`] on a thread of its own, not waited for.
pub fn remove_other_layouts_in_background(root: PathBuf, worker: Worker) {
    let started = std::thread::Builder::new()
        .name("weir-stale-work".into())
        .spawn(move || remove_other_layouts(&root, worker));
    if let Err(e) = started {
        tracing::warn!(error = %e, "cannot start the removal of other layouts' working directories");
    }
}

/// Removes the work of the state dirs under `root` that belong to other layouts than
/// `worker`'s (see the module docs); returns the `work/` directories removed.
fn remove_other_layouts(root: &Path, worker: Worker) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    for dir in other_layouts(root, worker) {
        let work = dir.join(WORK_DIR);
        if !work.is_dir() {
            continue;
        }
        let Ok(_lock) = StateDirLock::acquire(&dir) else {
            tracing::debug!(dir = %dir.display(), "another layout's state dir is in use: its work stays");
            continue;
        };
        match std::fs::remove_dir_all(&work) {
            Ok(()) => {
                tracing::info!(work = %work.display(), "removed another layout's working directory");
                removed.push(work);
            }
            Err(e) => {
                tracing::warn!(work = %work.display(), error = %e, "cannot remove another layout's working directory")
            }
        }
    }
    removed
}

/// The state dirs under `root` of layouts other than `worker`'s.
fn other_layouts(root: &Path, worker: Worker) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if !worker.is_single() {
        dirs.push(root.to_path_buf());
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return dirs;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(other) = name.to_str().and_then(Worker::parse_dir_name) else {
            continue;
        };
        if other.count() != worker.count() {
            dirs.push(entry.path());
        }
    }
    dirs.sort();
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(index: u32, count: u32) -> Worker {
        Worker::new(index, count).expect("worker")
    }

    /// `root/<dir>/work/db/file` for each dir ("" is the root itself).
    fn with_work(root: &Path, dirs: &[&str]) {
        for dir in dirs {
            let db = root.join(dir).join(WORK_DIR).join("db");
            std::fs::create_dir_all(&db).expect("mkdir");
            std::fs::write(db.join("000001.sst"), b"sst").expect("write");
        }
    }

    fn has_work(root: &Path, dir: &str) -> bool {
        root.join(dir).join(WORK_DIR).exists()
    }

    /// Catches: a worker removing its own layout's or a running process's work, or
    /// leaving an older layout's (or the process's) behind; anything but `work/`
    /// removed.
    #[test]
    fn a_worker_removes_the_unlocked_work_of_other_layouts_only() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        with_work(
            root,
            &[
                "",
                "worker-0-of-3",
                "worker-1-of-3",
                "worker-2-of-3",
                "worker-0-of-2",
                "worker-1-of-2",
            ],
        );
        std::fs::create_dir_all(root.join("checkpoints/chk-0000000001")).expect("mkdir");
        // Old worker 2 of 3 is still running (fenced, not yet stopped).
        let running = StateDirLock::acquire(&root.join("worker-2-of-3")).expect("lock");

        let removed = remove_other_layouts(root, worker(0, 2));
        assert_eq!(
            removed,
            [
                root.join(WORK_DIR),
                root.join("worker-0-of-3").join(WORK_DIR),
                root.join("worker-1-of-3").join(WORK_DIR),
            ]
        );
        assert!(has_work(root, "worker-2-of-3"), "in use: kept");
        assert!(has_work(root, "worker-0-of-2") && has_work(root, "worker-1-of-2"));
        assert!(root.join("checkpoints/chk-0000000001").is_dir());
        assert!(root.join("worker-0-of-3").join("weir.lock").is_file());

        // Once it stopped, the next start removes its work too.
        drop(running);
        let removed = remove_other_layouts(root, worker(1, 2));
        assert_eq!(removed, [root.join("worker-2-of-3").join(WORK_DIR)]);
    }

    /// Catches: the pipeline as one process removing its own work, or keeping the
    /// workers' after a way back (`--from-scratch` as one process).
    #[test]
    fn one_process_removes_every_workers_work_and_keeps_its_own() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        with_work(root, &["", "worker-0-of-2", "worker-1-of-2"]);
        std::fs::create_dir_all(root.join("worker-not-a-layout").join(WORK_DIR)).expect("mkdir");
        let removed = remove_other_layouts(root, Worker::SINGLE);
        assert_eq!(
            removed,
            [
                root.join("worker-0-of-2").join(WORK_DIR),
                root.join("worker-1-of-2").join(WORK_DIR),
            ]
        );
        assert!(has_work(root, ""));
        assert!(has_work(root, "worker-not-a-layout"), "not a worker's dir");
    }
}
