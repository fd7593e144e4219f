//! `PendingSnapshot`: a RocksDB checkpoint taken into a temp directory, not yet uploaded.
//!
//! The state writer thread (see `writer`) takes it, after every write-back the task sent
//! before the barrier, by letting RocksDB hard-link a consistent checkpoint into a temp
//! directory, then uploads it ([`PendingSnapshot::upload_unless`]). Neither runs on the
//! task thread.
//!
//! Invariants:
//! - The temp directory holds hard links to immutable SSTs plus RocksDB's fresh copies of
//!   CURRENT / MANIFEST / OPTIONS: later writes or compactions of the live DB cannot
//!   change it.
//! - The temp directory is removed when the `PendingSnapshot` is dropped, uploaded or not.
//! - Every SST goes through `put_shared`, which skips files the storage already holds;
//!   only those not yet held count in `files_added`/`bytes_added`. So a failed upload is
//!   healed by the next checkpoint, and a file removed by GC is uploaded again if needed.

use std::fs;
use std::path::{Path, PathBuf};

use crate::fault::{self, FaultPoint};
use crate::record::CheckpointId;
use crate::state::{DbSnapshot, PrivateFile, SharedFile, SnapshotStats, StateError};
use crate::storage::CheckpointStorage;

/// A RocksDB checkpoint waiting in a temp directory to be uploaded.
#[derive(Debug)]
pub struct PendingSnapshot {
    pub(crate) task: String,
    pub(crate) checkpoint_id: CheckpointId,
    pub(crate) dir: TempDir,
    /// Sorted by local name.
    pub(crate) shared: Vec<SharedFile>,
    /// Sorted by name.
    pub(crate) private: Vec<PrivateFile>,
}

impl PendingSnapshot {
    /// Hands the storage the SSTs it does not hold yet and every private file, unless
    /// `stop` says to give up (checked before each file).
    pub(crate) fn upload_unless(
        self,
        storage: &CheckpointStorage,
        stop: &dyn Fn() -> bool,
    ) -> Result<DbSnapshot, StateError> {
        let (task, checkpoint_id) = (self.task.clone(), self.checkpoint_id);
        self.upload_files(storage, stop)
            .map_err(|e| e.in_checkpoint("upload", &task, checkpoint_id))
    }

    fn upload_files(
        self,
        storage: &CheckpointStorage,
        stop: &dyn Fn() -> bool,
    ) -> Result<DbSnapshot, StateError> {
        let (mut files_added, mut bytes_added, mut private_bytes) = (0, 0, 0);
        let stopped = || StateError::WriterStopped {
            reason: "the operator closed during the upload".into(),
        };
        for file in &self.shared {
            if stop() {
                return Err(stopped());
            }
            let src = self.dir.path().join(&file.local_name);
            let added = storage.put_shared(&self.task, &file.shared_name, &src)?;
            if added > 0 {
                files_added += 1;
                bytes_added += added;
                fault::hit(FaultPoint::StateUpload);
            }
        }
        for file in &self.private {
            if stop() {
                return Err(stopped());
            }
            let src = self.dir.path().join(&file.name);
            private_bytes +=
                storage.put_private(self.checkpoint_id, &self.task, &file.name, &src)?;
        }
        tracing::debug!(
            task = %self.task,
            checkpoint = %self.checkpoint_id,
            sst_files = self.shared.len(),
            sst_files_added = files_added,
            sst_bytes_added = bytes_added,
            private_bytes,
            "state snapshot uploaded"
        );
        Ok(DbSnapshot {
            task: self.task.clone(),
            checkpoint_id: self.checkpoint_id,
            shared: self.shared.clone(),
            private: self.private.clone(),
            stats: SnapshotStats {
                files_added,
                bytes_added,
                private_bytes,
            },
        })
    }
}

/// A directory removed (best effort, logged) on drop.
#[derive(Debug)]
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    /// Takes ownership of an existing directory.
    pub(crate) fn adopt(path: PathBuf) -> Self {
        TempDir(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        match fs::remove_dir_all(&self.0) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %self.0.display(), error = %e, "cannot remove temp snapshot directory");
            }
        }
    }
}
