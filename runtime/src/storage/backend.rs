//! `StorageBackend`: what a checkpoint storage backend does (a local directory,
//! `storage::local`; an S3-compatible prefix, `storage::object`). `CheckpointStorage`
//! holds one and adds what is the same for both: the fence, the refusal to change a
//! complete checkpoint, size checks on restore, and gc's choice of checkpoints.
//!
//! Invariants every implementation keeps (the module doc of `checkpoint_storage` says
//! why): a checkpoint is complete iff its `_metadata` exists, which appears atomically
//! and is never overwritten; a file is durable when its `put_*` returns and never
//! visible half-written under its final name; shared files are immutable, a second put
//! of one is a no-op; `discard` removes `_metadata` first. Names reaching a backend are
//! validated and the fence checked already.

use std::collections::HashSet;
use std::path::Path;

use crate::record::CheckpointId;
use crate::storage::StorageError;

/// Completion and size of one checkpoint, as tests inspect it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointInfo {
    pub checkpoint_id: CheckpointId,
    /// Whether `_metadata` exists.
    pub complete: bool,
    /// When `_metadata` was written (modification time), if it was.
    pub completed_at: Option<std::time::SystemTime>,
    /// Bytes under `chk-<id>/` (private files and metadata). Shared files are not counted:
    /// they belong to several checkpoints; the metadata lists them with their sizes.
    pub private_bytes: u64,
}

/// What `CheckpointStorage::gc` removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Checkpoints removed, ascending.
    pub checkpoints_removed: Vec<CheckpointId>,
    /// Shared files removed.
    pub shared_files_removed: usize,
    /// Bytes of the shared files removed.
    pub shared_bytes_removed: u64,
}

/// One checkpoint storage backend; see the module doc.
pub(crate) trait StorageBackend: std::fmt::Debug + Send + Sync {
    /// Stores local file `src` as shared file `shared_name` of `task`: the bytes added,
    /// 0 if it was stored already.
    fn put_shared(&self, task: &str, shared_name: &str, src: &Path) -> Result<u64, StorageError>;

    /// Whether shared file `shared_name` of `task` is stored.
    fn has_shared(&self, task: &str, shared_name: &str) -> Result<bool, StorageError>;

    /// Stores `src` as private file `name` of `task` in checkpoint `checkpoint_id`,
    /// replacing a previous attempt's file of that name: the bytes stored.
    fn put_private(
        &self,
        checkpoint_id: CheckpointId,
        task: &str,
        name: &str,
        src: &Path,
    ) -> Result<u64, StorageError>;

    /// Materialises shared file `shared_name` of `task` at local path `dest`, which must
    /// not exist: its size.
    fn fetch_shared_into(
        &self,
        task: &str,
        shared_name: &str,
        dest: &Path,
    ) -> Result<u64, StorageError>;

    /// Materialises private file `name` of `task` in checkpoint `checkpoint_id` at local
    /// path `dest`, which must not exist, as a copy of its own: its size.
    fn fetch_private_into(
        &self,
        checkpoint_id: CheckpointId,
        task: &str,
        name: &str,
        dest: &Path,
    ) -> Result<u64, StorageError>;

    /// Completes checkpoint `checkpoint_id` by writing its metadata atomically;
    /// `AlreadyComplete` if it has some.
    fn write_metadata(&self, checkpoint_id: CheckpointId, bytes: &[u8])
    -> Result<(), StorageError>;

    /// The metadata of a complete checkpoint.
    fn read_metadata(&self, checkpoint_id: CheckpointId) -> Result<Vec<u8>, StorageError>;

    /// Whether checkpoint `checkpoint_id` is complete (its `_metadata` exists).
    fn is_complete(&self, checkpoint_id: CheckpointId) -> Result<bool, StorageError>;

    /// Every checkpoint, complete or not, ascending.
    fn checkpoint_ids(&self) -> Result<Vec<CheckpointId>, StorageError>;

    /// Removes checkpoint `checkpoint_id`, `_metadata` first: whether it existed.
    fn discard(&self, checkpoint_id: CheckpointId) -> Result<bool, StorageError>;

    /// Removes every shared file not in `referenced` (pairs of task and shared name),
    /// counting them into `report`. Checkpoints are the caller's to remove first.
    fn gc_shared(
        &self,
        referenced: &HashSet<(String, String)>,
        report: &mut GcReport,
    ) -> Result<(), StorageError>;

    /// Completion time and size of checkpoint `checkpoint_id`.
    fn checkpoint_info(&self, checkpoint_id: CheckpointId) -> Result<CheckpointInfo, StorageError>;

    /// Where checkpoint `checkpoint_id`'s metadata is (or would be), for messages.
    fn metadata_location(&self, checkpoint_id: CheckpointId) -> String;

    /// Where shared file `shared_name` of `task` is, for messages.
    fn shared_location(&self, task: &str, shared_name: &str) -> Result<String, StorageError>;

    /// Where private file `name` of `task` in checkpoint `checkpoint_id` is, for messages.
    fn private_location(
        &self,
        checkpoint_id: CheckpointId,
        task: &str,
        name: &str,
    ) -> Result<String, StorageError>;
}
