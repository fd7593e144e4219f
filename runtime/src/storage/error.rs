//! `StorageError`: every failure of checkpoint storage, on either backend, naming the
//! path or URL (and the checkpoint) involved. Nothing in `storage` panics on an
//! external failure: a missing bucket, refused credentials or an unreachable endpoint
//! are errors like a full disk.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

use crate::record::CheckpointId;
use crate::storage::names::OWNER_FILE;

/// Errors of the checkpoint storage. `location` fields are a path or an `s3://` URL.
#[derive(Debug, Error)]
pub enum StorageError {
    /// A filesystem operation failed (local backend, or a local file being uploaded
    /// or restored into).
    #[error("checkpoint storage: cannot {op} {}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// An object store request failed (after the client's bounded retries).
    #[error("checkpoint storage: cannot {op} {url}: {source}")]
    ObjectStore {
        op: &'static str,
        url: String,
        /// Boxed: the client's error is large, and this one travels up every layer.
        #[source]
        source: Box<object_store::Error>,
    },
    /// The object store is misconfigured: no credentials, a bad endpoint, a bucket
    /// that does not exist.
    #[error("{url}: {reason}")]
    Config { url: String, reason: String },
    /// A file asked for (to restore from) is not in the storage.
    #[error("checkpoint storage: missing file {location}")]
    MissingFile { location: String },
    /// A file restored from the storage does not hold the bytes its checkpoint recorded.
    #[error(
        "checkpoint storage: {location} holds {found} bytes, but its checkpoint recorded {expected}: the file was truncated or replaced outside Weir; nothing was restored or deleted: put the file back from a copy of the storage"
    )]
    Damaged {
        location: String,
        expected: u64,
        found: u64,
    },
    /// A task, shared or private file name is not a single, plain path component.
    #[error("checkpoint storage: invalid {kind} name {name:?}")]
    InvalidName { kind: &'static str, name: String },
    /// `_metadata` already exists: a complete checkpoint is immutable.
    #[error("checkpoint {checkpoint_id} is already complete ({location})")]
    AlreadyComplete {
        checkpoint_id: CheckpointId,
        location: String,
    },
    /// The root holds things Weir did not put there.
    #[error(
        "{root}: not a weir checkpoint directory (it holds {entry:?} and no {OWNER_FILE} file); weir neither writes nor deletes there: point [checkpoint] dir at an empty or new directory or prefix"
    )]
    NotOurs { root: String, entry: String },
    /// The root's marker names another pipeline: a root holds one pipeline's checkpoints.
    /// (Boxed: it keeps this error as small as its other variants.)
    #[error("{0}")]
    OtherPipeline(Box<OtherPipeline>),
    /// The object store client's runtime stopped, the request's future panicked, or the
    /// call outlived its deadline, before an answer came. `reason` says which, and what
    /// was being done.
    #[error("checkpoint storage: {url}: {reason}")]
    Interrupted { url: String, reason: String },
    /// This instance was fenced: another one owns the pipeline and its storage now.
    #[error("{root}: not written: {reason}")]
    Fenced { root: String, reason: String },
    /// The checkpoint has no `_metadata` (it is incomplete or does not exist).
    #[error("checkpoint {checkpoint_id} is not complete: no {location}")]
    NotComplete {
        checkpoint_id: CheckpointId,
        location: String,
    },
}

/// A storage root claimed by pipeline `owner`, opened for pipeline `pipeline`.
#[derive(Debug, Error)]
#[error(
    "{root} holds the checkpoints of pipeline {owner:?}, not of pipeline {pipeline:?}: give each pipeline its own [checkpoint] dir"
)]
pub struct OtherPipeline {
    pub root: String,
    pub owner: String,
    pub pipeline: String,
}
