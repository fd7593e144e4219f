//! One worker process: `weir run` of a hosted pipeline's generated spec (as worker
//! `I/N` when the pipeline runs as N > 1 workers), started by the supervisor, and what
//! it left behind (its status file, the last error in its log, its checkpoints).
//!
//! Invariants:
//! - A worker is the same program and code path as `weir run` (`recover`, then
//!   `start`); exactly-once does not depend on the server at all.
//! - Its environment is cleared and rebuilt: `PATH`, `HOME`, logging variables,
//!   `WEIR_CACHE_DIR` (its tenant's own compiled-code cache, `ModuleStore::tenant_cache`)
//!   and, for a tenant with a Kafka principal, that tenant's password. The server's admin
//!   token and other tenants' passwords never reach it.
//! - It runs with `--supervised-by <server pid>`: the kernel kills it when the thread
//!   that started it ends, so a SIGKILLed server leaves no orphan. That thread is the
//!   supervisor's own for this pipeline, which lives exactly as long as the worker.
//! - Its stderr is appended to its own log (`PipelineDir::log`: `worker.log` for a
//!   pipeline of one worker, `worker-<I>-of-<N>.log` for each of N); the last `weir:
//!   error:` line there is the worker's `last_error`.
//! - With walls (`walls`), it enters its tenant's cgroup right after the spawn, or is
//!   killed.
//! - Worker I of N > 1 is started with `--worker I/N` and never with
//!   `--from-checkpoint`: it resumes from its own last committed checkpoint, or, as the
//!   first start of a new number of workers, rescales from the old workers' ones.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::cluster::Worker;
use crate::metrics::MetricsSnapshot;
use crate::server::error::ServerError;
use crate::server::namespace::PipelineDir;
use crate::server::walls::TenantWall;

/// Variables a worker inherits from the server (all others are dropped).
#[cfg(not(feature = "fault-injection"))]
const INHERITED_ENV: [&str; 6] = [
    "PATH",
    "HOME",
    "TMPDIR",
    "LANG",
    "RUST_LOG",
    "RUST_BACKTRACE",
];

/// Variables a worker inherits from the server (all others are dropped); in a build with
/// fault injection, the armed fault too (`fault`), so crash tests reach hosted workers.
#[cfg(feature = "fault-injection")]
const INHERITED_ENV: [&str; 7] = [
    "PATH",
    "HOME",
    "TMPDIR",
    "LANG",
    "RUST_LOG",
    "RUST_BACKTRACE",
    "WEIR_FAULT",
];

/// What a worker is started with.
#[derive(Debug, Clone)]
pub struct Launch {
    pub program: PathBuf,
    pub dir: PipelineDir,
    /// Which worker of the pipeline (`Worker::SINGLE`: the whole pipeline).
    pub worker: Worker,
    /// Extra environment (the tenant's compiled-code cache and Kafka password).
    pub env: Vec<(String, String)>,
    /// Resume from this checkpoint explicitly (after an upgrade of a pipeline of one
    /// worker; ignored for worker I of N > 1, see the module invariants).
    pub from_checkpoint: Option<u64>,
    /// Bytes the pipeline's directory (state, checkpoints, log) may hold.
    pub disk_quota: Option<u64>,
    /// The tenant's CPU and memory wall the worker runs in (none: the host has none).
    pub wall: Option<TenantWall>,
}

impl Launch {
    pub fn spawn(&self) -> Result<Child, ServerError> {
        let log = self.dir.log(self.worker);
        let stderr = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| ServerError::io("cannot open worker log", &log, e))?;
        let mut command = tenant_command(&self.program, &self.env);
        command
            .arg("run")
            .arg(self.dir.spec())
            .arg("--quiet")
            .arg("--status-file")
            .arg(self.dir.status(self.worker))
            .arg("--supervised-by")
            .arg(std::process::id().to_string());
        if !self.worker.is_single() {
            command.arg("--worker").arg(self.worker.to_string());
        } else if let Some(n) = self.from_checkpoint {
            command.arg("--from-checkpoint").arg(n.to_string());
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .current_dir(self.dir.root())
            .spawn()
            .map_err(|e| ServerError::io("cannot start worker", &self.program, e))?;
        if let Some(wall) = &self.wall {
            wall.admit(&mut child)?;
        }
        Ok(child)
    }
}

/// `program` with a worker's environment (see the module invariants): the inherited
/// variables and `env` (the tenant's Kafka password), nothing else.
pub fn tenant_command(program: &Path, env: &[(String, String)]) -> Command {
    let mut command = Command::new(program);
    command.env_clear();
    for var in INHERITED_ENV {
        if let Some(value) = std::env::var_os(var) {
            command.env(var, value);
        }
    }
    command.envs(env.iter().map(|(k, v)| (k, v)));
    command
}

/// The workers of a pipeline run as `count` processes (`Worker::SINGLE` for one).
pub fn workers(count: u32) -> impl Iterator<Item = Worker> {
    (0..count).filter_map(move |i| Worker::new(i, count).ok())
}

/// A worker's last written counters, if any.
pub fn read_status(dir: &PipelineDir, worker: Worker) -> Option<MetricsSnapshot> {
    let text = std::fs::read(dir.status(worker)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Bytes under `root`, each file counted once however many hard links it has (RocksDB
/// checkpoints hard-link the state's files).
pub fn disk_usage(root: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let mut total = 0;
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                dirs.push(entry.path());
            } else if meta.is_file() && seen.insert((meta.dev(), meta.ino())) {
                total += meta.len();
            }
        }
    }
    total
}

/// A worker's last complete checkpoint, if its storage holds one.
pub fn last_complete_checkpoint(dir: &PipelineDir, worker: Worker) -> Option<u64> {
    let root = dir.worker_checkpoints(worker);
    if !root.exists() {
        return None;
    }
    let storage = crate::storage::CheckpointStorage::open_read_only(root).ok()?;
    storage.complete_checkpoints().ok()?.last().map(|id| id.0)
}

/// The last complete checkpoint of a pipeline of `count` workers: the worker's own for
/// one; for several, the smallest of theirs, and none unless every worker has one
/// (each checkpoints on its own; a savepoint needs a final checkpoint of each).
pub fn pipeline_checkpoint(dir: &PipelineDir, count: u32) -> Option<u64> {
    smallest_of_every_worker(workers(count).map(|w| last_complete_checkpoint(dir, w)))
}

/// The pipeline's checkpoint from its workers' own: the smallest, and none unless every
/// worker has one.
pub fn smallest_of_every_worker(ids: impl IntoIterator<Item = Option<u64>>) -> Option<u64> {
    let every: Option<Vec<u64>> = ids.into_iter().collect();
    every?.into_iter().min()
}

/// The last error line of a worker log (`weir: error: ...`), from its last 64 KiB.
pub fn last_error(log: &Path) -> Option<String> {
    let mut file = std::fs::File::open(log).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(64 << 10)))
        .ok()?;
    let lines = BufReader::new(file).lines().map_while(Result::ok);
    last_error_line(lines)
}

/// Of a weir process's stderr `lines`, the last `weir: error:` line, without its prefix.
pub fn last_error_line<S: AsRef<str>>(lines: impl IntoIterator<Item = S>) -> Option<String> {
    lines
        .into_iter()
        .filter_map(|line| {
            line.as_ref()
                .strip_prefix("weir: error: ")
                .map(str::to_owned)
        })
        .last()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_usage_counts_a_hard_linked_file_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("sub")).expect("sub");
        std::fs::write(dir.path().join("a"), [0u8; 1000]).expect("a");
        std::fs::hard_link(dir.path().join("a"), dir.path().join("sub/a")).expect("link");
        std::fs::write(dir.path().join("sub/b"), [0u8; 24]).expect("b");
        assert_eq!(disk_usage(dir.path()), 1024);
    }

    #[test]
    fn the_last_error_line_of_the_log_is_the_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("worker.log");
        assert_eq!(last_error(&log), None);
        std::fs::write(
            &log,
            "weir: error: first\nsome log line\nweir: error: pipeline p: guest exceeded its 1s deadline\nweir: pipeline p stopped\n",
        )
        .expect("write");
        assert_eq!(
            last_error(&log).as_deref(),
            Some("pipeline p: guest exceeded its 1s deadline")
        );
    }

    /// Makes checkpoint `id` of `worker` complete (its `_metadata` is what counts).
    fn complete(dir: &PipelineDir, worker: Worker, id: u64) {
        let chk = dir
            .worker_checkpoints(worker)
            .join(crate::storage::names::checkpoint_dir_name(
                crate::record::CheckpointId(id),
            ));
        std::fs::create_dir_all(&chk).expect("checkpoint dir");
        std::fs::write(chk.join("_metadata"), b"{}").expect("metadata");
    }

    #[test]
    fn the_pipeline_checkpoint_is_the_smallest_of_every_workers_own() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir =
            crate::server::namespace::TenantNamespace::new(root.path(), "t").pipeline_dir("p");
        let single = Worker::new(0, 1).expect("0/1");
        assert_eq!(pipeline_checkpoint(&dir, 1), None);
        complete(&dir, single, 4);
        assert_eq!(pipeline_checkpoint(&dir, 1), Some(4));

        let [w0, w1, w2] = [0, 1, 2].map(|i| Worker::new(i, 3).expect("i/3"));
        complete(&dir, w0, 7);
        complete(&dir, w2, 5);
        assert_eq!(pipeline_checkpoint(&dir, 3), None, "worker 1 has none yet");
        complete(&dir, w1, 9);
        complete(&dir, w0, 8);
        assert_eq!(pipeline_checkpoint(&dir, 3), Some(5));
        assert_eq!(last_complete_checkpoint(&dir, w0), Some(8));
    }
}
