//! `StateWriter`: the thread that writes a `KeyedState`'s dirty entries into RocksDB and
//! takes and uploads its checkpoints, so the task thread does neither (Flink's split of a
//! snapshot into a short synchronous part and an asynchronous one).
//!
//! Invariants:
//! - The writer thread is the ONLY writer of the live DB, and it runs jobs in the order
//!   they were sent. A write-back sent before checkpoint n's job is in checkpoint n; one
//!   sent after it is not. So a checkpoint holds exactly the state as of its barrier,
//!   whatever the task does meanwhile.
//! - A write-back ([`WriteLayer`]) is visible to the task's reads from the moment it is
//!   sent: the task keeps every layer it sent in [`InFlight`] until the writer reports
//!   it applied (`applied`, a sequence number stored with Release after the RocksDB
//!   write and loaded with Acquire), and looks keys up in those layers, newest first,
//!   before it asks RocksDB. A layer dropped from `InFlight` is in RocksDB.
//! - At most [`MAX_QUEUED`] jobs wait for the writer, and a new layer is only sent
//!   when it and the layers in flight hold at most the cache's byte bound together
//!   (else the task waits until the writer has applied them all): a task whose
//!   write-backs come faster than RocksDB absorbs them blocks (backpressure), and the
//!   layers in flight never hold more than the byte bound or one layer.
//! - The writer takes the RocksDB checkpoint in job order and hands it to its upload
//!   thread (uploads in checkpoint order, while later write-backs are applied). A
//!   checkpoint answers on its reply channel once every file of the snapshot is
//!   durable in checkpoint storage (or with the error that stopped it). The coordinator
//!   learns of the checkpoint only through that answer, so "complete" still means
//!   "every upload durable".
//! - Dropping the `StateWriter` asks its threads to stop (an upload in progress stops
//!   between two files and answers with an error), waits for them, and only then drops
//!   the DB: no thread of a dropped `KeyedState` touches its directory or its storage.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use rocksdb::checkpoint::Checkpoint;
use rocksdb::{DB, WriteBatch, WriteOptions};

use crate::record::CheckpointId;
use crate::state::pending::{PendingSnapshot, TempDir};
use crate::state::shared_names::SharedNames;
use crate::state::write_layer::{InFlight, WriteLayer};
use crate::state::{DbSnapshot, PrivateFile, SharedFile, StateError};
use crate::storage::CheckpointStorage;

/// Jobs that may wait for the writer before the task blocks.
pub(crate) const MAX_QUEUED: usize = 4;

/// Prefix of the temp directories holding a RocksDB checkpoint before upload.
pub(crate) const SNAPSHOT_DIR_PREFIX: &str = "snapshot-";
/// Extension of the files shared between checkpoints.
const SST_EXTENSION: &str = ".sst";

/// What the writer thread is asked to do.
enum Job {
    Write(Arc<WriteLayer>),
    Checkpoint {
        checkpoint_id: CheckpointId,
        task: String,
        storage: Arc<CheckpointStorage>,
        reply: Sender<Result<DbSnapshot, StateError>>,
    },
    /// Answered once every job sent before it is done.
    Sync(Sender<()>),
}

/// The writer thread of one `KeyedState`, and the task side of its bookkeeping.
pub(crate) struct StateWriter {
    db: Arc<DB>,
    db_dir: PathBuf,
    jobs: Option<Sender<Job>>,
    applied: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    /// Why the writer thread stopped, if it failed.
    failure: Arc<Mutex<Option<String>>>,
    thread: Option<JoinHandle<()>>,
    next_seq: u64,
}

impl std::fmt::Debug for StateWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateWriter")
            .field("db_dir", &self.db_dir)
            .field("sent", &self.next_seq)
            .field("applied", &self.applied.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A checkpoint the writer is taking and uploading.
#[derive(Debug)]
pub struct SnapshotInProgress {
    reply: Receiver<Result<DbSnapshot, StateError>>,
    task: String,
    checkpoint_id: CheckpointId,
}

impl SnapshotInProgress {
    /// Waits until the snapshot is durable in checkpoint storage.
    pub fn wait(self) -> Result<DbSnapshot, StateError> {
        self.reply.recv().unwrap_or_else(|_| {
            let stopped = StateError::WriterStopped {
                reason: "it ended before answering".into(),
            };
            Err(stopped.in_checkpoint("upload", &self.task, self.checkpoint_id))
        })
    }
}

/// A checkpoint asked for but not yet sent to the writer (see
/// [`StateWriter::send_checkpoint`]); its [`SnapshotInProgress`] already waits for it.
pub(crate) struct CheckpointRequest(Job);

impl std::fmt::Debug for CheckpointRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CheckpointRequest")
    }
}

/// Checkpoint `checkpoint_id` of `task` into `storage`, to send when the state is ready,
/// and what answers once it is durable.
pub(crate) fn checkpoint_request(
    storage: Arc<CheckpointStorage>,
    checkpoint_id: CheckpointId,
    task: &str,
) -> (CheckpointRequest, SnapshotInProgress) {
    let (reply, answer) = crossbeam_channel::bounded(1);
    let job = Job::Checkpoint {
        checkpoint_id,
        task: task.to_owned(),
        storage,
        reply,
    };
    let progress = SnapshotInProgress {
        reply: answer,
        task: task.to_owned(),
        checkpoint_id,
    };
    (CheckpointRequest(job), progress)
}

impl StateWriter {
    /// Starts the writer thread of `db` (a DB opened in `work_dir/db`), whose SSTs are
    /// shared under `names`.
    pub(crate) fn start(
        db: DB,
        work_dir: PathBuf,
        db_dir: PathBuf,
        names: SharedNames,
    ) -> Result<Self, StateError> {
        let db = Arc::new(db);
        let (jobs, queue) = crossbeam_channel::bounded(MAX_QUEUED);
        let applied = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let failure = Arc::new(Mutex::new(None));
        let mut write_options = WriteOptions::default();
        write_options.disable_wal(true);
        let worker = Worker {
            db: db.clone(),
            work_dir,
            db_dir: db_dir.clone(),
            names,
            write_options,
            applied: applied.clone(),
            stop: stop.clone(),
            failure: failure.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("weir-state-writer".into())
            .spawn(move || worker.run(queue))
            .map_err(|e| StateError::io("start the state writer thread for", &db_dir, e))?;
        Ok(Self {
            db,
            db_dir,
            jobs: Some(jobs),
            applied,
            stop,
            failure,
            thread: Some(thread),
            next_seq: 0,
        })
    }

    /// The live DB, for reads.
    pub(crate) fn db(&self) -> &DB {
        &self.db
    }

    /// The highest layer sequence number RocksDB holds.
    pub(crate) fn applied(&self) -> u64 {
        self.applied.load(Ordering::Acquire)
    }

    /// Hands `layer` to the writer; `in_flight` serves it to reads until the writer has
    /// applied it. Blocks while the queue is full, and first until the writer has caught
    /// up if `in_flight` holds more than `max_bytes`.
    pub(crate) fn write_back(
        &mut self,
        mut layer: WriteLayer,
        in_flight: &mut InFlight,
        max_bytes: usize,
    ) -> Result<(), StateError> {
        if layer.is_empty() {
            return Ok(());
        }
        in_flight.prune(self.applied());
        if !in_flight.is_empty() && in_flight.bytes() + layer.bytes() > max_bytes {
            self.sync()?;
            in_flight.prune(self.applied());
        }
        self.next_seq += 1;
        layer.seq = self.next_seq;
        let layer = Arc::new(layer);
        in_flight.push(layer.clone());
        self.send(Job::Write(layer))
    }

    /// Asks for a checkpoint of everything written back so far.
    pub(crate) fn checkpoint(
        &self,
        storage: Arc<CheckpointStorage>,
        checkpoint_id: CheckpointId,
        task: &str,
    ) -> Result<SnapshotInProgress, StateError> {
        let (request, progress) = checkpoint_request(storage, checkpoint_id, task);
        self.send_checkpoint(request)?;
        Ok(progress)
    }

    /// Asks for the checkpoint `request` stands for, of everything written back so far.
    pub(crate) fn send_checkpoint(&self, request: CheckpointRequest) -> Result<(), StateError> {
        self.send(request.0)
    }

    /// Waits until every job sent so far is done (RocksDB holds every write-back).
    pub(crate) fn sync(&self) -> Result<(), StateError> {
        let (done, wait) = crossbeam_channel::bounded(1);
        self.send(Job::Sync(done))?;
        wait.recv().map_err(|_| self.stopped())
    }

    fn send(&self, job: Job) -> Result<(), StateError> {
        let jobs = self.jobs.as_ref().ok_or_else(|| self.stopped())?;
        jobs.send(job).map_err(|_| self.stopped())
    }

    fn stopped(&self) -> StateError {
        let reason = self.failure.lock().ok().and_then(|f| f.clone());
        StateError::WriterStopped {
            reason: reason.unwrap_or_else(|| "it is closing".into()),
        }
    }
}

impl Drop for StateWriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A checkpoint taken, for the upload thread.
struct Upload {
    pending: PendingSnapshot,
    storage: Arc<CheckpointStorage>,
    reply: Sender<Result<DbSnapshot, StateError>>,
}

/// The writer thread's side.
struct Worker {
    db: Arc<DB>,
    work_dir: PathBuf,
    db_dir: PathBuf,
    names: SharedNames,
    write_options: WriteOptions,
    applied: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    failure: Arc<Mutex<Option<String>>>,
}

impl Worker {
    /// Runs jobs until the task side hangs up. A failed write is fatal to the writer:
    /// it stops, and the task sees `WriterStopped` at its next send or wait. Uploads run
    /// on a thread of their own, in checkpoint order, so write-backs keep being applied
    /// while a checkpoint uploads; the writer only takes the RocksDB checkpoint.
    fn run(mut self, queue: Receiver<Job>) {
        let stop = self.stop.clone();
        std::thread::scope(|scope| {
            let (uploads, to_upload) = crossbeam_channel::unbounded::<Upload>();
            scope.spawn(move || {
                for upload in to_upload {
                    let result = upload
                        .pending
                        .upload_unless(&upload.storage, &|| stop.load(Ordering::Relaxed));
                    let _ = upload.reply.send(result);
                }
            });
            for job in queue {
                match job {
                    Job::Write(layer) => {
                        if let Err(e) = self.write(&layer) {
                            if let Ok(mut failure) = self.failure.lock() {
                                *failure = Some(one_line(&e));
                            }
                            return;
                        }
                        self.applied.store(layer.seq, Ordering::Release);
                    }
                    Job::Checkpoint {
                        checkpoint_id,
                        task,
                        storage,
                        reply,
                    } => match self.checkpoint_locally(checkpoint_id, &task) {
                        Ok(pending) => {
                            let _ = uploads.send(Upload {
                                pending,
                                storage,
                                reply,
                            });
                        }
                        Err(e) => {
                            let _ =
                                reply.send(Err(e.in_checkpoint("snapshot", &task, checkpoint_id)));
                        }
                    },
                    Job::Sync(done) => {
                        let _ = done.send(());
                    }
                }
            }
        });
    }

    fn write(&self, layer: &WriteLayer) -> Result<(), StateError> {
        let mut batch = WriteBatch::default();
        for (key, value) in layer.sorted() {
            match value {
                Some(value) => batch.put(key, value),
                None => batch.delete(key),
            }
        }
        self.db
            .write_opt(batch, &self.write_options)
            .map_err(|e| StateError::db("write batch", &self.db_dir, e))
    }

    /// Takes a RocksDB checkpoint (hard links; flushes the memtable) into a temp dir.
    fn checkpoint_locally(
        &mut self,
        checkpoint_id: CheckpointId,
        task: &str,
    ) -> Result<PendingSnapshot, StateError> {
        let path = self
            .work_dir
            .join(format!("{SNAPSHOT_DIR_PREFIX}{:010}", checkpoint_id.0));
        remove_dir_if_exists(&path)?;
        let checkpoint = Checkpoint::new(&self.db)
            .map_err(|e| StateError::db("create checkpoint object", &self.db_dir, e))?;
        checkpoint
            .create_checkpoint(&path)
            .map_err(|e| StateError::db("create checkpoint", &path, e))?;
        let dir = TempDir::adopt(path);

        let mut shared = Vec::new();
        let mut private = Vec::new();
        let entries =
            fs::read_dir(dir.path()).map_err(|e| StateError::io("list", dir.path(), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| StateError::io("list", dir.path(), e))?;
            let path = entry.path();
            let meta = entry
                .metadata()
                .map_err(|e| StateError::io("stat", &path, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                return Err(StateError::UnexpectedFile { path });
            };
            if !meta.is_file() {
                return Err(StateError::UnexpectedFile { path });
            }
            if name.ends_with(SST_EXTENSION) {
                let shared_name = self.names.shared_name(&name);
                shared.push(SharedFile {
                    local_name: name,
                    shared_name,
                    size: meta.len(),
                });
            } else {
                private.push(PrivateFile {
                    name,
                    size: meta.len(),
                });
            }
        }
        shared.sort_by(|a, b| a.local_name.cmp(&b.local_name));
        private.sort_by(|a, b| a.name.cmp(&b.name));
        self.names.replace(
            shared
                .iter()
                .map(|f| (f.local_name.clone(), f.shared_name.clone())),
        );
        Ok(PendingSnapshot {
            task: task.to_owned(),
            checkpoint_id,
            dir,
            shared,
            private,
        })
    }
}

pub(crate) fn remove_dir_if_exists(path: &Path) -> Result<(), StateError> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StateError::io("remove", path, e)),
    }
}

/// `e` and its causes on one line, for the task's `WriterStopped` error.
fn one_line(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        line.push_str(": ");
        line.push_str(&c.to_string());
        cause = c.source();
    }
    line
}
