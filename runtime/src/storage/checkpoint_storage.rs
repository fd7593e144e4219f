//! `CheckpointStorage`: where checkpoints are kept, on one of two backends chosen by
//! `[checkpoint] dir`: a local directory (`storage::local`, the default) or a prefix in
//! an S3-compatible bucket (`storage::object`, `s3://bucket/prefix`). Both keep the
//! layout of `storage::names`.
//!
//! Invariants, kept by both backends:
//! - A checkpoint is complete iff `chk-<id>/_metadata` exists. [`write_metadata`] makes it
//!   appear atomically and never overwrites an existing one (local: temp file, fsync,
//!   rename, fsync dir after an existence check; object store: a conditional put,
//!   `PutMode::Create`, where one holding exactly the bytes written is our own retried
//!   put and success): a complete checkpoint is immutable. [`discard`] removes
//!   `_metadata` FIRST, so a half-deleted checkpoint never looks complete.
//! - Every file this storage accepted is durable when the `put_*` call returns, so
//!   `_metadata` is only ever written after the files it names.
//! - A file never appears under its final name half-written.
//! - Shared files are immutable and named uniquely by the caller; [`put_shared`] of a name
//!   that already exists is a no-op returning 0 bytes written.
//! - [`gc`] never removes a checkpoint listed in `keep`, a shared file in `referenced`, nor
//!   an incomplete checkpoint newer than the newest complete one (it may be in flight).
//!   It must not run concurrently with a checkpoint's upload: a freshly uploaded shared
//!   file is referenced by no metadata yet. The coordinator runs it after committing n
//!   and before triggering n+1 (at most one checkpoint is in flight). On an object
//!   store, where another instance may be uploading, gc also spares every shared object
//!   younger than a grace period (`storage::object`'s `SHARED_GC_GRACE`, 10 minutes).
//! - Metadata content is opaque bytes here (its format belongs to `checkpoint::metadata`).
//!   Names (tasks, shared names, private files) are single path components; task names
//!   may not start with `_` or `.` (reserved for `_metadata` and temp files).
//! - Weir deletes only what it made. [`open`] takes an empty or new directory or prefix
//!   (and writes the `.weir-checkpoints` marker into it), one holding that marker, or one
//!   holding nothing but Weir's own names; anything else is refused. [`remove_all`]
//!   (`--from-scratch`) removes only Weir's own entries, and only where `open` would;
//!   never a worker's own location below it (`worker-<I>-of-<N>/`, a storage of its
//!   own).
//! - A directory or prefix belongs to one pipeline: the marker names it (claimed
//!   without overwriting a racing opener's: a hard link, a conditional put), and
//!   [`open`] and [`remove_all`] refuse one whose marker names another pipeline
//!   ([`StorageError::OtherPipeline`]). An older marker naming none is adopted.
//!   [`open_read_only`] (listing) writes and creates nothing.
//! - A fenced storage (its [`Fence`] raised: this instance no longer owns the pipeline)
//!   refuses every write, discard and gc with [`StorageError::Fenced`]; reads still work.
//!   The fence is checked here, once, for both backends.
//!
//! The API is narrow and synchronous on purpose (put/has/fetch of named files, metadata
//! bytes, listing, discard, gc): task and uploader threads call it directly. The object
//! store backend bridges to its async client itself (`storage::blocking`), so any thread,
//! even one inside a tokio runtime, may call any method.
//!
//! [`open`]: CheckpointStorage::open
//! [`remove_all`]: CheckpointStorage::remove_all
//! [`open_read_only`]: CheckpointStorage::open_read_only
//! [`write_metadata`]: CheckpointStorage::write_metadata
//! [`discard`]: CheckpointStorage::discard
//! [`put_shared`]: CheckpointStorage::put_shared
//! [`gc`]: CheckpointStorage::gc

use std::collections::HashSet;
use std::path::Path;

use crate::record::CheckpointId;
use crate::storage::backend::{CheckpointInfo, GcReport, StorageBackend};
use crate::storage::local::LocalStorage;
use crate::storage::object::ObjectStorage;
use crate::storage::{CheckpointLocation, Fence, StorageError};

/// The two backends: which one, for opening and for the tests' looks inside; every
/// operation goes through [`StorageBackend`].
#[derive(Debug, Clone)]
enum Backend {
    Local(LocalStorage),
    Object(ObjectStorage),
}

impl Backend {
    fn get(&self) -> &dyn StorageBackend {
        match self {
            Backend::Local(b) => b,
            Backend::Object(b) => b,
        }
    }
}

/// `Damaged` (naming the file at `location`) unless a restored file's size `found` is
/// the `expected` one; the restored copy at `dest` is removed then.
fn check_size(
    dest: &Path,
    expected: u64,
    found: u64,
    location: impl FnOnce() -> Result<String, StorageError>,
) -> Result<(), StorageError> {
    if found == expected {
        return Ok(());
    }
    let _ = std::fs::remove_file(dest);
    Err(StorageError::Damaged {
        location: location()?,
        expected,
        found,
    })
}

/// Checkpoint storage. Cheap to clone; all methods take `&self`.
#[derive(Debug, Clone)]
pub struct CheckpointStorage {
    backend: Backend,
    location: CheckpointLocation,
    fence: Fence,
}

impl CheckpointStorage {
    /// Opens (creating if needed) the storage at `location`, a directory or an
    /// `s3://` prefix, for pipeline `pipeline`; refuses one that is not Weir's or is
    /// another pipeline's (see the module docs). For an object store this is where bad
    /// configuration shows: no credentials, an unreachable endpoint, a missing bucket.
    pub fn open(
        location: impl Into<CheckpointLocation>,
        pipeline: &str,
    ) -> Result<Self, StorageError> {
        let location = location.into();
        let backend = match &location {
            CheckpointLocation::Local(dir) => Backend::Local(LocalStorage::open(dir, pipeline)?),
            CheckpointLocation::S3(s3) => Backend::Object(ObjectStorage::open(s3, pipeline)?),
        };
        Ok(Self {
            backend,
            location,
            fence: Fence::default(),
        })
    }

    /// Opens the storage at `location` to read it (list checkpoints, read metadata):
    /// refuses one that is not Weir's, and writes or creates nothing (a missing
    /// directory reads as empty). Writes through it are not refused; do not make any.
    pub fn open_read_only(location: impl Into<CheckpointLocation>) -> Result<Self, StorageError> {
        let location = location.into();
        let backend = match &location {
            CheckpointLocation::Local(dir) => Backend::Local(LocalStorage::open_read_only(dir)?),
            CheckpointLocation::S3(s3) => Backend::Object(ObjectStorage::open_read_only(s3)?),
        };
        Ok(Self {
            backend,
            location,
            fence: Fence::default(),
        })
    }

    /// Deletes every checkpoint and shared file at `location`, and nothing else: refused
    /// (with nothing deleted) if it is not Weir's or is another pipeline's than
    /// `pipeline`. A missing directory is fine.
    pub fn remove_all(
        location: impl Into<CheckpointLocation>,
        pipeline: &str,
    ) -> Result<(), StorageError> {
        match location.into() {
            CheckpointLocation::Local(dir) => LocalStorage::remove_all(&dir, pipeline),
            CheckpointLocation::S3(s3) => ObjectStorage::remove_all(&s3, pipeline),
        }
    }

    /// The names of the locations directly below `location` (its subdirectories, or
    /// the prefixes one level below it), sorted: where a pipeline's workers keep their
    /// own checkpoints (`worker-<I>-of-<N>`). Reads only; a missing directory has none.
    pub fn child_names(location: &CheckpointLocation) -> Result<Vec<String>, StorageError> {
        match location {
            CheckpointLocation::Local(dir) => LocalStorage::child_names(dir),
            CheckpointLocation::S3(s3) => ObjectStorage::child_names(s3),
        }
    }

    /// The same storage, refusing writes once `fence` is raised.
    pub fn with_fence(mut self, fence: Fence) -> Self {
        self.fence = fence;
        self
    }

    /// Where this storage is.
    pub fn location(&self) -> &CheckpointLocation {
        &self.location
    }

    /// The root directory of a local storage (tests look inside it).
    #[cfg(test)]
    pub fn local_root(&self) -> &Path {
        match &self.backend {
            Backend::Local(b) => b.root(),
            Backend::Object(_) => panic!("not a local storage: {}", self.location),
        }
    }

    /// The same storage, its object store's gc sparing shared objects younger than
    /// `grace` (instead of ten minutes); a local storage is returned as it is.
    #[cfg(test)]
    pub fn with_shared_gc_grace(mut self, grace: std::time::Duration) -> Self {
        if let Backend::Object(object) = self.backend {
            self.backend = Backend::Object(object.with_shared_gc_grace(grace));
        }
        self
    }

    fn check_fence(&self) -> Result<(), StorageError> {
        if let Some(reason) = self.fence.reason() {
            return Err(StorageError::Fenced {
                root: self.location.to_string(),
                reason: reason.to_owned(),
            });
        }
        Ok(())
    }

    /// Stores `src` as shared file `shared_name` of `task`. Idempotent: returns the bytes
    /// added, 0 if it already existed.
    pub fn put_shared(
        &self,
        task: &str,
        shared_name: &str,
        src: &Path,
    ) -> Result<u64, StorageError> {
        self.check_fence()?;
        self.backend.get().put_shared(task, shared_name, src)
    }

    /// Whether shared file `shared_name` of `task` is stored.
    pub fn has_shared(&self, task: &str, shared_name: &str) -> Result<bool, StorageError> {
        self.backend.get().has_shared(task, shared_name)
    }

    /// Stores `src` as private file `name` of `task` in checkpoint `checkpoint_id`, replacing
    /// a previous attempt's file of that name; refused once the checkpoint is complete.
    /// Returns the bytes stored.
    pub fn put_private(
        &self,
        checkpoint_id: CheckpointId,
        task: &str,
        name: &str,
        src: &Path,
    ) -> Result<u64, StorageError> {
        self.check_fence()?;
        if self.is_complete(checkpoint_id)? {
            return Err(StorageError::AlreadyComplete {
                checkpoint_id,
                location: self.backend.get().metadata_location(checkpoint_id),
            });
        }
        self.backend
            .get()
            .put_private(checkpoint_id, task, name, src)
    }

    /// Materialises shared file `shared_name` of `task` at local path `dest`, which must
    /// not exist (restore: a hard link or copy from a directory, a download from an
    /// object store). Returns its size.
    pub fn fetch_shared_into(
        &self,
        task: &str,
        shared_name: &str,
        dest: &Path,
    ) -> Result<u64, StorageError> {
        self.backend
            .get()
            .fetch_shared_into(task, shared_name, dest)
    }

    /// `fetch_shared_into`, refused with `Damaged` (and `dest` removed) unless the file
    /// holds `expected` bytes, the size its checkpoint recorded: a truncated or replaced
    /// file is named as such, on every backend, before anything opens it.
    pub fn restore_shared(
        &self,
        task: &str,
        shared_name: &str,
        dest: &Path,
        expected: u64,
    ) -> Result<(), StorageError> {
        let found = self.fetch_shared_into(task, shared_name, dest)?;
        check_size(dest, expected, found, || {
            self.backend.get().shared_location(task, shared_name)
        })
    }

    /// `fetch_private_into`, checked like [`restore_shared`](Self::restore_shared).
    pub fn restore_private(
        &self,
        checkpoint_id: CheckpointId,
        (task, name): (&str, &str),
        dest: &Path,
        expected: u64,
    ) -> Result<(), StorageError> {
        let found = self.fetch_private_into(checkpoint_id, task, name, dest)?;
        check_size(dest, expected, found, || {
            self.backend
                .get()
                .private_location(checkpoint_id, task, name)
        })
    }

    /// Copies private file `name` of `task` in checkpoint `checkpoint_id` to `dest`, which
    /// must not exist. Returns its size.
    pub fn fetch_private_into(
        &self,
        checkpoint_id: CheckpointId,
        task: &str,
        name: &str,
        dest: &Path,
    ) -> Result<u64, StorageError> {
        self.backend
            .get()
            .fetch_private_into(checkpoint_id, task, name, dest)
    }

    /// Completes checkpoint `checkpoint_id` by writing its metadata atomically; refuses
    /// to overwrite (`AlreadyComplete`). On an object store, metadata already there with
    /// exactly `bytes` (a retried put of ours that had landed) is success.
    pub fn write_metadata(
        &self,
        checkpoint_id: CheckpointId,
        bytes: &[u8],
    ) -> Result<(), StorageError> {
        self.check_fence()?;
        self.backend.get().write_metadata(checkpoint_id, bytes)
    }

    /// Reads the metadata of a complete checkpoint.
    pub fn read_metadata(&self, checkpoint_id: CheckpointId) -> Result<Vec<u8>, StorageError> {
        self.backend.get().read_metadata(checkpoint_id)
    }

    /// Whether checkpoint `checkpoint_id` is complete (its `_metadata` exists).
    pub fn is_complete(&self, checkpoint_id: CheckpointId) -> Result<bool, StorageError> {
        self.backend.get().is_complete(checkpoint_id)
    }

    /// Every checkpoint, complete or not, ascending.
    pub fn checkpoint_ids(&self) -> Result<Vec<CheckpointId>, StorageError> {
        self.backend.get().checkpoint_ids()
    }

    /// Complete checkpoints, ascending. Checkpoints without `_metadata` are ignored.
    pub fn complete_checkpoints(&self) -> Result<Vec<CheckpointId>, StorageError> {
        let mut complete = Vec::new();
        for id in self.checkpoint_ids()? {
            if self.is_complete(id)? {
                complete.push(id);
            }
        }
        Ok(complete)
    }

    /// The newest complete checkpoint, if any.
    pub fn latest_complete(&self) -> Result<Option<CheckpointId>, StorageError> {
        Ok(self.complete_checkpoints()?.pop())
    }

    /// Removes checkpoint `checkpoint_id` (`_metadata` first, so it never looks complete
    /// half-deleted). Shared files are left to [`gc`](Self::gc). Returns whether it
    /// existed.
    pub fn discard(&self, checkpoint_id: CheckpointId) -> Result<bool, StorageError> {
        self.check_fence()?;
        self.backend.get().discard(checkpoint_id)
    }

    /// Removes every checkpoint not in `keep` (complete ones, and incomplete ones older
    /// than the newest complete checkpoint), then every shared file not in `referenced`
    /// (pairs of task and shared name). Incomplete checkpoints newer than the newest
    /// complete one are left alone: one may be in flight. Must not run while a
    /// checkpoint is being uploaded (see the module doc).
    pub fn gc(
        &self,
        keep: &[CheckpointId],
        referenced: &HashSet<(String, String)>,
    ) -> Result<GcReport, StorageError> {
        self.check_fence()?;
        let mut report = GcReport::default();
        let newest_complete = self.latest_complete()?;
        for id in self.checkpoint_ids()? {
            if keep.contains(&id) {
                continue;
            }
            let removable =
                self.is_complete(id)? || newest_complete.is_some_and(|newest| id < newest);
            if removable && self.discard(id)? {
                report.checkpoints_removed.push(id);
            }
        }
        self.backend.get().gc_shared(referenced, &mut report)?;
        Ok(report)
    }

    /// Completion time and size of checkpoint `checkpoint_id`.
    pub fn checkpoint_info(
        &self,
        checkpoint_id: CheckpointId,
    ) -> Result<CheckpointInfo, StorageError> {
        self.backend.get().checkpoint_info(checkpoint_id)
    }
}
