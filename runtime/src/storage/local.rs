//! Checkpoint storage on a local directory.
//!
//! Layout under the root directory:
//!
//! ```text
//! shared/<task>/<shared-name>.sst     SST files, shared between checkpoints
//! chk-<id:010>/<task>/<file>          files private to one checkpoint (CURRENT, MANIFEST-*, ...)
//! chk-<id:010>/_metadata              written LAST: a checkpoint is complete iff it exists
//! .weir-checkpoints                   says the directory is Weir's (see below)
//! ```
//!
//! Invariants:
//! - A checkpoint is complete iff `chk-<id>/_metadata` exists. [`write_metadata`] makes it
//!   appear atomically (temp file, fsync, rename, fsync dir) and never overwrites an
//!   existing one: a complete checkpoint is immutable. [`discard`] removes `_metadata`
//!   FIRST, so a half-deleted checkpoint never looks complete.
//! - Every file this storage accepted is durable (file and directory entry fsynced) when the
//!   `put_*` call returns, so `_metadata` is only ever written after the files it names.
//! - A file never appears under its final name half-written: it is hard-linked (atomic) or
//!   copied to a hidden temp name (`.<name>.tmp-*`) and renamed.
//! - Shared files are immutable and named uniquely by the caller; [`put_shared`] of a name
//!   that already exists is a no-op returning 0 bytes written.
//! - [`gc`] never removes a checkpoint listed in `keep`, a shared file in `referenced`, nor
//!   an incomplete checkpoint newer than the newest complete one (it may be in flight).
//!   It must not run concurrently with a checkpoint's upload: a freshly uploaded shared
//!   file is referenced by no metadata yet. The coordinator runs it after committing n
//!   and before triggering n+1 (at most one checkpoint is in flight).
//! - Metadata content is opaque bytes here (its format belongs to `checkpoint::metadata`).
//!   Names (tasks, shared names, private files) are single path components; task names
//!   may not start with `_` or `.` (reserved for `_metadata` and temp files).
//!
//! - Weir deletes only what it made. [`open`] takes an empty or new directory (and
//!   writes `.weir-checkpoints` into it), a directory holding that file, or one
//!   holding nothing but Weir's own names (an older Weir's storage, which it then
//!   marks); any other non-empty directory is refused. [`remove_all`] (`--from-scratch`)
//!   removes only Weir's own entries, and only from a directory that passes the same test.
//! - A fenced storage (its [`Fence`] raised: this instance no longer owns the pipeline)
//!   refuses every write, discard and gc with [`StorageError::Fenced`]; reads still work.
//!
//! The API is narrow on purpose (put/has/fetch of named files, metadata bytes, listing,
//! discard, gc) so an object store can implement the same operations later.
//!
//! [`open`]: CheckpointStorage::open
//! [`remove_all`]: CheckpointStorage::remove_all
//! [`write_metadata`]: CheckpointStorage::write_metadata
//! [`discard`]: CheckpointStorage::discard
//! [`put_shared`]: CheckpointStorage::put_shared
//! [`gc`]: CheckpointStorage::gc

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use thiserror::Error;

use crate::record::CheckpointId;
use crate::storage::Fence;

/// Directory (under the root) holding the files shared between checkpoints.
const SHARED_DIR: &str = "shared";
/// Prefix of a checkpoint directory: `chk-<id:010>`.
const CHECKPOINT_DIR_PREFIX: &str = "chk-";
/// Name of the file whose presence makes a checkpoint complete.
const METADATA_FILE: &str = "_metadata";
/// The file that marks a directory as Weir's checkpoint storage.
const OWNER_FILE: &str = ".weir-checkpoints";
/// Extension of shared files (RocksDB SSTs).
const SHARED_EXTENSION: &str = "sst";

/// Distinguishes temp files created by concurrent calls within one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Errors of the checkpoint storage, each naming the path or checkpoint involved.
#[derive(Debug, Error)]
pub enum StorageError {
    /// A filesystem operation failed.
    #[error("checkpoint storage: cannot {op} {}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A file asked for (to restore from) is not in the storage.
    #[error("checkpoint storage: missing file {}", path.display())]
    MissingFile { path: PathBuf },
    /// A task, shared or private file name is not a single, plain path component.
    #[error("checkpoint storage: invalid {kind} name {name:?}")]
    InvalidName { kind: &'static str, name: String },
    /// `_metadata` already exists: a complete checkpoint is immutable.
    #[error("checkpoint {checkpoint_id} is already complete ({})", path.display())]
    AlreadyComplete {
        checkpoint_id: CheckpointId,
        path: PathBuf,
    },
    /// The directory holds things Weir did not put there.
    #[error(
        "{}: not a weir checkpoint directory (it holds {entry:?} and no {OWNER_FILE} file); weir neither writes nor deletes there: point [checkpoint] dir at an empty or new directory",
        root.display()
    )]
    NotOurs { root: PathBuf, entry: String },
    /// This instance was fenced: another one owns the pipeline and its storage now.
    #[error("{}: not written: {reason}", root.display())]
    Fenced { root: PathBuf, reason: String },
    /// The checkpoint has no `_metadata` (it is incomplete or does not exist).
    #[error("checkpoint {checkpoint_id} is not complete: no {}", path.display())]
    NotComplete {
        checkpoint_id: CheckpointId,
        path: PathBuf,
    },
}

/// Completion and size of one checkpoint, as tests inspect it.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointInfo {
    pub checkpoint_id: CheckpointId,
    /// Whether `_metadata` exists.
    pub complete: bool,
    /// Modification time of `_metadata` (when the checkpoint completed).
    pub completed_at: Option<std::time::SystemTime>,
    /// Bytes under `chk-<id>/` (private files and metadata). Shared files are not counted:
    /// they belong to several checkpoints; the metadata lists them with their sizes.
    pub private_bytes: u64,
}

/// What [`CheckpointStorage::gc`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Checkpoint directories removed, ascending.
    pub checkpoints_removed: Vec<CheckpointId>,
    /// Shared files removed.
    pub shared_files_removed: usize,
    /// Bytes of the shared files removed.
    pub shared_bytes_removed: u64,
}

/// Checkpoint storage rooted at a local directory. Cheap to clone; all methods take `&self`.
#[derive(Debug, Clone)]
pub struct CheckpointStorage {
    root: PathBuf,
    fence: Fence,
}

impl CheckpointStorage {
    /// Opens (creating if needed) the storage rooted at `root`; refuses a non-empty
    /// directory that is not Weir's (see the module docs).
    pub fn open(root: impl AsRef<Path>) -> Result<Self, StorageError> {
        let root = root.as_ref().to_path_buf();
        ensure_dir(&root)?;
        check_ours(&root)?;
        let owner = root.join(OWNER_FILE);
        if !exists(&owner)? {
            fs::write(&owner, b"weir checkpoint storage\n")
                .map_err(|e| io_err("create", &owner, e))?;
        }
        ensure_dir(&root.join(SHARED_DIR))?;
        Ok(Self {
            root,
            fence: Fence::default(),
        })
    }

    /// Deletes every checkpoint and shared file under `root`, and nothing else: refused
    /// (with nothing deleted) if `root` is not Weir's. A missing `root` is fine.
    pub fn remove_all(root: &Path) -> Result<(), StorageError> {
        if !root.exists() {
            return Ok(());
        }
        check_ours(root)?;
        for entry in read_dir(root)? {
            let entry = entry.map_err(|e| io_err("list", root, e))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if is_weir_entry(&name) && name != OWNER_FILE {
                let path = entry.path();
                let removed = if path.is_dir() {
                    fs::remove_dir_all(&path)
                } else {
                    fs::remove_file(&path)
                };
                removed.map_err(|e| io_err("remove", &path, e))?;
            }
        }
        sync_dir(root)
    }

    /// The same storage, refusing writes once `fence` is raised.
    pub fn with_fence(mut self, fence: Fence) -> Self {
        self.fence = fence;
        self
    }

    fn check_fence(&self) -> Result<(), StorageError> {
        if let Some(reason) = self.fence.reason() {
            return Err(StorageError::Fenced {
                root: self.root.clone(),
                reason: reason.to_owned(),
            });
        }
        Ok(())
    }

    /// The root directory.
    #[cfg(test)]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Stores `src` as shared file `shared_name` of `task` (hard link when on the same
    /// filesystem, else a copy). Idempotent: returns the bytes added, 0 if it already existed.
    pub fn put_shared(
        &self,
        task: &str,
        shared_name: &str,
        src: &Path,
    ) -> Result<u64, StorageError> {
        self.check_fence()?;
        let dest = self.shared_path(task, shared_name)?;
        if exists(&dest)? {
            return Ok(0);
        }
        let dir = self.root.join(SHARED_DIR).join(task);
        ensure_dir(&dir)?;
        let size = file_size(src)?;
        match fs::hard_link(src, &dest) {
            Ok(()) => sync_file(&dest)?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(0),
            Err(e) if e.kind() == io::ErrorKind::NotFound && !exists(src)? => {
                return Err(StorageError::MissingFile {
                    path: src.to_path_buf(),
                });
            }
            // Cross-device (EXDEV) or a filesystem without hard links: copy.
            Err(_) => copy_durably(src, &dest)?,
        }
        sync_dir(&dir)?;
        Ok(size)
    }

    /// Whether shared file `shared_name` of `task` is stored.
    #[cfg(test)]
    pub fn has_shared(&self, task: &str, shared_name: &str) -> Result<bool, StorageError> {
        exists(&self.shared_path(task, shared_name)?)
    }

    /// Stores `src` as private file `name` of `task` in checkpoint `checkpoint_id`, replacing
    /// a previous attempt's file of that name. Returns the bytes stored.
    pub fn put_private(
        &self,
        checkpoint_id: CheckpointId,
        task: &str,
        name: &str,
        src: &Path,
    ) -> Result<u64, StorageError> {
        self.check_fence()?;
        let dest = self.private_path(checkpoint_id, task, name)?;
        if self.is_complete(checkpoint_id)? {
            return Err(StorageError::AlreadyComplete {
                checkpoint_id,
                path: self.metadata_path(checkpoint_id),
            });
        }
        let dir = self.checkpoint_dir(checkpoint_id).join(task);
        ensure_dir(&dir)?;
        let size = file_size(src)?;
        remove_file_if_exists(&dest)?;
        match fs::hard_link(src, &dest) {
            Ok(()) => sync_file(&dest)?,
            Err(_) => copy_durably(src, &dest)?,
        }
        sync_dir(&dir)?;
        Ok(size)
    }

    /// Materialises shared file `shared_name` of `task` at `dest` (hard link, else copy).
    /// `dest` must not exist. Returns its size.
    pub fn fetch_shared_into(
        &self,
        task: &str,
        shared_name: &str,
        dest: &Path,
    ) -> Result<u64, StorageError> {
        let src = self.shared_path(task, shared_name)?;
        fetch(&src, dest, true)
    }

    /// Copies private file `name` of `task` in checkpoint `checkpoint_id` to `dest`, which
    /// must not exist. Private files are always copied: the restored DB may rewrite them.
    /// Returns its size.
    pub fn fetch_private_into(
        &self,
        checkpoint_id: CheckpointId,
        task: &str,
        name: &str,
        dest: &Path,
    ) -> Result<u64, StorageError> {
        let src = self.private_path(checkpoint_id, task, name)?;
        fetch(&src, dest, false)
    }

    /// Completes checkpoint `checkpoint_id` by writing its metadata atomically: temp file,
    /// fsync, rename to `_metadata`, fsync the directory. Refuses to overwrite.
    pub fn write_metadata(
        &self,
        checkpoint_id: CheckpointId,
        bytes: &[u8],
    ) -> Result<(), StorageError> {
        self.check_fence()?;
        let dir = self.checkpoint_dir(checkpoint_id);
        let path = self.metadata_path(checkpoint_id);
        ensure_dir(&dir)?;
        if exists(&path)? {
            return Err(StorageError::AlreadyComplete {
                checkpoint_id,
                path,
            });
        }
        let tmp = temp_path(&path);
        let write = || -> io::Result<()> {
            let mut file = File::create(&tmp)?;
            file.write_all(bytes)?;
            file.sync_all()
        };
        if let Err(source) = write() {
            let _ = fs::remove_file(&tmp);
            return Err(io_err("write", &tmp, source));
        }
        fs::rename(&tmp, &path).map_err(|e| io_err("rename into place", &path, e))?;
        sync_dir(&dir)
    }

    /// Reads the metadata of a complete checkpoint.
    pub fn read_metadata(&self, checkpoint_id: CheckpointId) -> Result<Vec<u8>, StorageError> {
        let path = self.metadata_path(checkpoint_id);
        fs::read(&path).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                StorageError::NotComplete {
                    checkpoint_id,
                    path: path.clone(),
                }
            } else {
                io_err("read", &path, e)
            }
        })
    }

    /// Whether checkpoint `checkpoint_id` is complete (its `_metadata` exists).
    pub fn is_complete(&self, checkpoint_id: CheckpointId) -> Result<bool, StorageError> {
        exists(&self.metadata_path(checkpoint_id))
    }

    /// Every checkpoint directory, complete or not, ascending.
    pub fn checkpoint_ids(&self) -> Result<Vec<CheckpointId>, StorageError> {
        let mut ids = Vec::new();
        for entry in read_dir(&self.root)? {
            let entry = entry.map_err(|e| io_err("list", &self.root, e))?;
            if let Some(id) = entry.file_name().to_str().and_then(parse_checkpoint_dir) {
                ids.push(CheckpointId(id));
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }

    /// Complete checkpoints, ascending. Directories without `_metadata` are ignored.
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

    /// Removes checkpoint `checkpoint_id`'s directory (`_metadata` first, so it never looks
    /// complete half-deleted). Shared files are left to [`gc`](Self::gc). Returns whether
    /// it existed.
    pub fn discard(&self, checkpoint_id: CheckpointId) -> Result<bool, StorageError> {
        self.check_fence()?;
        let dir = self.checkpoint_dir(checkpoint_id);
        if !exists(&dir)? {
            return Ok(false);
        }
        let metadata = self.metadata_path(checkpoint_id);
        if remove_file_if_exists(&metadata)? {
            sync_dir(&dir)?;
        }
        match fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("remove", &dir, e)),
        }
        sync_dir(&self.root)?;
        Ok(true)
    }

    /// Removes every checkpoint directory not in `keep` (complete ones, and incomplete ones
    /// older than the newest complete checkpoint), then every shared file not in
    /// `referenced` (pairs of task and shared name). Incomplete checkpoints newer than the
    /// newest complete one are left alone: one may be in flight. Must not run while a
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

        let shared_root = self.root.join(SHARED_DIR);
        for task_entry in read_dir(&shared_root)? {
            let task_entry = task_entry.map_err(|e| io_err("list", &shared_root, e))?;
            let task_dir = task_entry.path();
            if !task_dir.is_dir() {
                continue;
            }
            let task = task_entry.file_name().to_string_lossy().into_owned();
            let mut removed_any = false;
            let mut remaining = 0_usize;
            for file_entry in read_dir(&task_dir)? {
                let file_entry = file_entry.map_err(|e| io_err("list", &task_dir, e))?;
                let file_name = file_entry.file_name().to_string_lossy().into_owned();
                let shared_name = file_name
                    .strip_suffix(SHARED_EXTENSION)
                    .and_then(|stem| stem.strip_suffix('.'));
                let is_referenced = shared_name
                    .is_some_and(|name| referenced.contains(&(task.clone(), name.to_owned())));
                if is_referenced {
                    remaining += 1;
                    continue;
                }
                // Unreferenced SSTs and leftover temp files of interrupted uploads.
                let path = file_entry.path();
                let size = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                if remove_file_if_exists(&path)? {
                    removed_any = true;
                    if shared_name.is_some() {
                        report.shared_files_removed += 1;
                        report.shared_bytes_removed += size;
                    }
                }
            }
            if remaining == 0 {
                // Failing means it is not empty after all, or already gone: keep going.
                if fs::remove_dir(&task_dir).is_ok() {
                    sync_dir(&shared_root)?;
                }
            } else if removed_any {
                sync_dir(&task_dir)?;
            }
        }
        Ok(report)
    }

    /// Completion time and size of checkpoint `checkpoint_id`.
    #[cfg(test)]
    pub fn checkpoint_info(
        &self,
        checkpoint_id: CheckpointId,
    ) -> Result<CheckpointInfo, StorageError> {
        let dir = self.checkpoint_dir(checkpoint_id);
        if !exists(&dir)? {
            return Err(StorageError::MissingFile { path: dir });
        }
        let metadata_path = self.metadata_path(checkpoint_id);
        let completed_at = match fs::metadata(&metadata_path) {
            Ok(m) => Some(
                m.modified()
                    .map_err(|e| io_err("stat", &metadata_path, e))?,
            ),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err("stat", &metadata_path, e)),
        };
        Ok(CheckpointInfo {
            checkpoint_id,
            complete: completed_at.is_some(),
            completed_at,
            private_bytes: dir_size(&dir)?,
        })
    }

    fn checkpoint_dir(&self, checkpoint_id: CheckpointId) -> PathBuf {
        self.root
            .join(format!("{CHECKPOINT_DIR_PREFIX}{:010}", checkpoint_id.0))
    }

    fn metadata_path(&self, checkpoint_id: CheckpointId) -> PathBuf {
        self.checkpoint_dir(checkpoint_id).join(METADATA_FILE)
    }

    fn shared_path(&self, task: &str, shared_name: &str) -> Result<PathBuf, StorageError> {
        validate_task(task)?;
        validate_component("shared file", shared_name)?;
        Ok(self
            .root
            .join(SHARED_DIR)
            .join(task)
            .join(format!("{shared_name}.{SHARED_EXTENSION}")))
    }

    fn private_path(
        &self,
        checkpoint_id: CheckpointId,
        task: &str,
        name: &str,
    ) -> Result<PathBuf, StorageError> {
        validate_task(task)?;
        validate_component("private file", name)?;
        Ok(self.checkpoint_dir(checkpoint_id).join(task).join(name))
    }
}

/// `chk-0000000042` -> 42; anything else (including non-canonical padding) -> None.
/// Whether `name` is one Weir creates directly under a storage root.
fn is_weir_entry(name: &str) -> bool {
    name == OWNER_FILE
        || name == SHARED_DIR
        || parse_checkpoint_dir(name).is_some()
        || (name.starts_with('.') && name.contains(".tmp-"))
}

/// Refuses a directory that is neither marked as Weir's nor holds only Weir's names.
fn check_ours(root: &Path) -> Result<(), StorageError> {
    if exists(&root.join(OWNER_FILE))? {
        return Ok(());
    }
    for entry in read_dir(root)? {
        let entry = entry.map_err(|e| io_err("list", root, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !is_weir_entry(&name) {
            return Err(StorageError::NotOurs {
                root: root.to_owned(),
                entry: name,
            });
        }
    }
    Ok(())
}

fn parse_checkpoint_dir(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(CHECKPOINT_DIR_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let id: u64 = digits.parse().ok()?;
    (format!("{id:010}") == digits).then_some(id)
}

fn validate_component(kind: &'static str, name: &str) -> Result<(), StorageError> {
    let ok = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0']);
    if ok {
        Ok(())
    } else {
        Err(StorageError::InvalidName {
            kind,
            name: name.to_owned(),
        })
    }
}

fn validate_task(task: &str) -> Result<(), StorageError> {
    validate_component("task", task)?;
    if task.starts_with('_') {
        return Err(StorageError::InvalidName {
            kind: "task",
            name: task.to_owned(),
        });
    }
    Ok(())
}

fn io_err(op: &'static str, path: &Path, source: io::Error) -> StorageError {
    StorageError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn exists(path: &Path) -> Result<bool, StorageError> {
    path.try_exists().map_err(|e| io_err("stat", path, e))
}

fn file_size(path: &Path) -> Result<u64, StorageError> {
    match fs::metadata(path) {
        Ok(m) => Ok(m.len()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(StorageError::MissingFile {
            path: path.to_path_buf(),
        }),
        Err(e) => Err(io_err("stat", path, e)),
    }
}

fn read_dir(dir: &Path) -> Result<fs::ReadDir, StorageError> {
    fs::read_dir(dir).map_err(|e| io_err("list", dir, e))
}

/// Removes a file; Ok(false) if it was not there.
fn remove_file_if_exists(path: &Path) -> Result<bool, StorageError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err("remove", path, e)),
    }
}

/// Creates `dir` (and missing parents), fsyncing each new directory's parent.
fn ensure_dir(dir: &Path) -> Result<(), StorageError> {
    if dir.is_dir() {
        return Ok(());
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(parent) = parent {
        ensure_dir(parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => return Ok(()),
        Err(e) => return Err(io_err("create directory", dir, e)),
    }
    match parent {
        Some(parent) => sync_dir(parent),
        None => Ok(()),
    }
}

fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err("fsync directory", dir, e))
}

fn sync_file(path: &Path) -> Result<(), StorageError> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_err("fsync", path, e))
}

/// A hidden temp name next to `path`, unique within this process.
fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// Copies `src` to a temp name next to `dest`, fsyncs it and renames it to `dest`.
fn copy_durably(src: &Path, dest: &Path) -> Result<(), StorageError> {
    let tmp = temp_path(dest);
    let copy = || -> io::Result<()> {
        fs::copy(src, &tmp)?;
        File::open(&tmp)?.sync_all()
    };
    if let Err(e) = copy() {
        let _ = fs::remove_file(&tmp);
        return Err(io_err("copy", src, e));
    }
    fs::rename(&tmp, dest).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io_err("rename into place", dest, e)
    })
}

/// Materialises stored file `src` at `dest` (must not exist): hard link if `link_ok`,
/// falling back to a copy.
fn fetch(src: &Path, dest: &Path, link_ok: bool) -> Result<u64, StorageError> {
    let size = file_size(src)?;
    if link_ok {
        match fs::hard_link(src, dest) {
            Ok(()) => return Ok(size),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(io_err("restore into (already exists)", dest, e));
            }
            Err(_) => {}
        }
    }
    if exists(dest)? {
        return Err(io_err(
            "restore into (already exists)",
            dest,
            io::Error::from(io::ErrorKind::AlreadyExists),
        ));
    }
    fs::copy(src, dest).map_err(|e| io_err("copy", src, e))?;
    Ok(size)
}

/// Total bytes of the regular files under `dir`.
#[cfg(test)]
fn dir_size(dir: &Path) -> Result<u64, StorageError> {
    let mut total = 0;
    for entry in read_dir(dir)? {
        let entry = entry.map_err(|e| io_err("list", dir, e))?;
        let path = entry.path();
        let meta = entry.metadata().map_err(|e| io_err("stat", &path, e))?;
        if meta.is_dir() {
            total += dir_size(&path)?;
        } else {
            total += meta.len();
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(ids: &[u64]) -> Vec<CheckpointId> {
        ids.iter().copied().map(CheckpointId).collect()
    }

    fn storage() -> (tempfile::TempDir, CheckpointStorage) {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = CheckpointStorage::open(dir.path().join("checkpoints")).expect("open");
        (dir, storage)
    }

    fn write(path: &Path, bytes: &[u8]) {
        fs::write(path, bytes).expect("write");
    }

    #[test]
    fn put_shared_is_idempotent_and_has_shared_sees_it() {
        let (dir, storage) = storage();
        let src = dir.path().join("000007.sst");
        write(&src, b"sst bytes");
        assert!(!storage.has_shared("agg-0", "abc-000007").expect("has"));
        assert_eq!(
            storage
                .put_shared("agg-0", "abc-000007", &src)
                .expect("put"),
            9
        );
        assert!(storage.has_shared("agg-0", "abc-000007").expect("has"));
        assert_eq!(
            storage
                .put_shared("agg-0", "abc-000007", &src)
                .expect("put again"),
            0
        );
        assert!(storage.root().join("shared/agg-0/abc-000007.sst").is_file());

        let dest = dir.path().join("restored.sst");
        assert_eq!(
            storage
                .fetch_shared_into("agg-0", "abc-000007", &dest)
                .expect("fetch"),
            9
        );
        assert_eq!(fs::read(&dest).expect("read"), b"sst bytes");
        assert!(matches!(
            storage.fetch_shared_into("agg-0", "nope", &dir.path().join("x")),
            Err(StorageError::MissingFile { .. })
        ));
    }

    #[test]
    fn names_that_escape_their_directory_are_refused() {
        let (dir, storage) = storage();
        let src = dir.path().join("f");
        write(&src, b"x");
        for bad in ["", ".", "..", "a/b", "_metadata", ".hidden"] {
            assert!(
                matches!(
                    storage.put_private(CheckpointId(1), bad, "CURRENT", &src),
                    Err(StorageError::InvalidName { .. })
                ),
                "task {bad:?} accepted"
            );
        }
        assert!(matches!(
            storage.put_shared("t", "../x", &src),
            Err(StorageError::InvalidName { .. })
        ));
    }

    #[test]
    fn metadata_is_written_atomically_and_marks_completion() {
        let (dir, storage) = storage();
        let src = dir.path().join("CURRENT");
        write(&src, b"MANIFEST-000005\n");
        storage
            .put_private(CheckpointId(1), "agg-0", "CURRENT", &src)
            .expect("private");
        storage
            .put_private(CheckpointId(2), "agg-0", "CURRENT", &src)
            .expect("private");
        // chk 2 has files but no _metadata: incomplete.
        storage
            .write_metadata(CheckpointId(1), b"{\"one\":1}")
            .expect("metadata");
        storage
            .write_metadata(CheckpointId(3), b"{\"three\":3}")
            .expect("metadata");

        assert_eq!(storage.checkpoint_ids().expect("ids"), ids(&[1, 2, 3]));
        assert_eq!(
            storage.complete_checkpoints().expect("complete"),
            ids(&[1, 3])
        );
        assert_eq!(
            storage.latest_complete().expect("latest"),
            Some(CheckpointId(3))
        );
        assert_eq!(
            storage.read_metadata(CheckpointId(1)).expect("read"),
            b"{\"one\":1}"
        );
        assert!(matches!(
            storage.read_metadata(CheckpointId(2)),
            Err(StorageError::NotComplete { .. })
        ));
        assert!(matches!(
            storage.write_metadata(CheckpointId(1), b"again"),
            Err(StorageError::AlreadyComplete {
                checkpoint_id: CheckpointId(1),
                ..
            })
        ));
        assert!(matches!(
            storage.put_private(CheckpointId(1), "agg-0", "CURRENT", &src),
            Err(StorageError::AlreadyComplete { .. })
        ));
        // No temp file left behind.
        let leftovers: Vec<_> = fs::read_dir(storage.root().join("chk-0000000001"))
            .expect("list")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(leftovers.is_empty());

        let info = storage.checkpoint_info(CheckpointId(1)).expect("info");
        assert!(info.complete && info.completed_at.is_some());
        assert_eq!(info.private_bytes, 16 + 9);
        assert!(
            !storage
                .checkpoint_info(CheckpointId(2))
                .expect("info")
                .complete
        );

        assert!(storage.discard(CheckpointId(3)).expect("discard"));
        assert!(!storage.discard(CheckpointId(3)).expect("discard twice"));
        assert_eq!(storage.complete_checkpoints().expect("complete"), ids(&[1]));
    }

    #[test]
    fn a_fenced_storage_refuses_every_write_but_still_reads() {
        let (dir, storage) = storage();
        let src = dir.path().join("f");
        write(&src, b"x");
        storage.write_metadata(CheckpointId(1), b"m1").expect("m1");
        let fence = Fence::default();
        let storage = storage.with_fence(fence.clone());
        storage
            .put_shared("agg-0", "a", &src)
            .expect("not fenced yet");
        fence.raise("another instance owns the pipeline");
        let fenced = |r: Result<(), StorageError>| matches!(r, Err(StorageError::Fenced { .. }));
        assert!(fenced(storage.put_shared("agg-0", "b", &src).map(|_| ())));
        assert!(fenced(
            storage
                .put_private(CheckpointId(2), "agg-0", "CURRENT", &src)
                .map(|_| ())
        ));
        assert!(fenced(storage.write_metadata(CheckpointId(2), b"m2")));
        assert!(fenced(storage.discard(CheckpointId(1)).map(|_| ())));
        assert!(fenced(storage.gc(&[], &HashSet::new()).map(|_| ())));
        assert_eq!(storage.read_metadata(CheckpointId(1)).expect("read"), b"m1");
        assert_eq!(storage.complete_checkpoints().expect("list"), ids(&[1]));
    }

    #[test]
    fn only_weirs_own_directories_are_opened_and_emptied() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Someone else's directory: refused, and nothing in it is touched.
        let theirs = dir.path().join("theirs");
        fs::create_dir(&theirs).expect("mkdir");
        write(&theirs.join("thesis.tex"), b"years of work");
        for refused in [
            CheckpointStorage::open(&theirs).map(|_| ()),
            CheckpointStorage::remove_all(&theirs),
        ] {
            match refused {
                Err(StorageError::NotOurs { entry, .. }) => assert_eq!(entry, "thesis.tex"),
                other => panic!("must be refused: {other:?}"),
            }
        }
        assert!(theirs.join("thesis.tex").exists());
        assert!(!theirs.join(OWNER_FILE).exists());

        // Ours: marked on creation; emptied of checkpoints, shared files only.
        let ours = dir.path().join("ours");
        let storage = CheckpointStorage::open(&ours).expect("open");
        assert!(ours.join(OWNER_FILE).exists());
        let src = dir.path().join("f");
        write(&src, b"x");
        storage.put_shared("agg-0", "a", &src).expect("shared");
        storage.write_metadata(CheckpointId(1), b"m1").expect("m1");
        write(&ours.join("notes.txt"), b"left by a user later");
        CheckpointStorage::remove_all(&ours).expect("remove");
        let mut left: Vec<String> = fs::read_dir(&ours)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, vec![OWNER_FILE.to_owned(), "notes.txt".to_owned()]);

        // An older Weir's storage (no mark, only Weir's names) is adopted.
        let old = dir.path().join("old");
        fs::create_dir_all(old.join("shared")).expect("mkdir");
        fs::create_dir_all(old.join("chk-0000000003")).expect("mkdir");
        CheckpointStorage::open(&old).expect("adopted");
        assert!(old.join(OWNER_FILE).exists());
        CheckpointStorage::remove_all(dir.path().join("missing").as_path())
            .expect("missing is fine");
    }

    #[test]
    fn stray_directories_are_not_checkpoints() {
        let (_dir, storage) = storage();
        for name in ["chk-1", "chk-abc", "chk-", "other"] {
            fs::create_dir(storage.root().join(name)).expect("mkdir");
        }
        assert!(storage.checkpoint_ids().expect("ids").is_empty());
        assert_eq!(parse_checkpoint_dir("chk-0000000042"), Some(42));
        assert_eq!(
            parse_checkpoint_dir("chk-12345678901"),
            Some(12_345_678_901)
        );
    }

    #[test]
    fn gc_keeps_referenced_shared_files_and_in_flight_checkpoints() {
        let (dir, storage) = storage();
        let src = dir.path().join("f");
        write(&src, b"0123456789");
        for name in ["a", "b", "c"] {
            storage.put_shared("agg-0", name, &src).expect("shared");
        }
        storage.put_shared("agg-1", "z", &src).expect("shared");
        for id in 1..=4 {
            storage
                .put_private(CheckpointId(id), "agg-0", "CURRENT", &src)
                .expect("private");
        }
        storage.write_metadata(CheckpointId(2), b"m2").expect("m2");
        storage.write_metadata(CheckpointId(4), b"m4").expect("m4");
        storage
            .put_private(CheckpointId(5), "agg-0", "CURRENT", &src)
            .expect("in flight");
        // 1, 3: incomplete, older than the newest complete (4): failed -> removed.
        // 2: complete, not kept -> removed. 4: kept.
        // 5: incomplete, newer than 4: may be in flight -> kept.
        let referenced: HashSet<(String, String)> =
            [("agg-0".to_owned(), "b".to_owned())].into_iter().collect();
        let report = storage.gc(&[CheckpointId(4)], &referenced).expect("gc");
        assert_eq!(report.checkpoints_removed, ids(&[1, 2, 3]));
        assert_eq!(report.shared_files_removed, 3);
        assert_eq!(report.shared_bytes_removed, 30);
        assert_eq!(storage.checkpoint_ids().expect("ids"), ids(&[4, 5]));
        assert!(storage.has_shared("agg-0", "b").expect("has"));
        assert!(!storage.has_shared("agg-0", "a").expect("has"));
        assert!(!storage.has_shared("agg-1", "z").expect("has"));
        assert!(!storage.root().join("shared/agg-1").exists());
    }
}
