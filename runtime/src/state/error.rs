//! `StateError`: every failure of the keyed-state backend, with the path, task and
//! checkpoint it concerns.
//!
//! Invariant: the backend never panics on an I/O or RocksDB failure; it returns one of
//! these, and the operator fails the pipeline into recovery.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

use crate::record::CheckpointId;
use crate::storage::StorageError;

#[derive(Debug, Error)]
pub enum StateError {
    /// RocksDB reported an error.
    #[error("RocksDB at {}: {op} failed", path.display())]
    Db {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: rocksdb::Error,
    },
    /// A filesystem operation on the state's working directory failed.
    #[error("state directory: cannot {op} {}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Taking, uploading or restoring a snapshot failed; `source` says where.
    #[error("state of task {task}, checkpoint {checkpoint_id}: {stage} failed")]
    Checkpoint {
        stage: &'static str,
        task: String,
        checkpoint_id: CheckpointId,
        #[source]
        source: Box<StateError>,
    },
    /// The checkpoint storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A RocksDB checkpoint directory held something that is not a plain file.
    #[error("unexpected entry {} in a RocksDB checkpoint", path.display())]
    UnexpectedFile { path: PathBuf },
    /// The state writer thread stopped (a RocksDB write failed, or the operator is
    /// closing), so the state cannot take writes or checkpoints any more.
    #[error("the state writer thread stopped: {reason}")]
    WriterStopped { reason: String },
    /// A restore by key groups was given overlapping key groups.
    #[error(transparent)]
    Rescale(Box<crate::state::key_group_restore::OverlappingKeyGroups>),
    /// A stored key is shorter than the fixed key-group and window parts.
    #[error("malformed state key: {len} bytes, at least {min} needed")]
    KeyTooShort { len: usize, min: usize },
}

impl StateError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        StateError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn db(op: &'static str, path: impl Into<PathBuf>, source: rocksdb::Error) -> Self {
        StateError::Db {
            op,
            path: path.into(),
            source,
        }
    }

    /// Wraps `self` with the task and checkpoint it happened in.
    pub(crate) fn in_checkpoint(
        self,
        stage: &'static str,
        task: &str,
        checkpoint_id: CheckpointId,
    ) -> Self {
        StateError::Checkpoint {
            stage,
            task: task.to_owned(),
            checkpoint_id,
            source: Box::new(self),
        }
    }
}
