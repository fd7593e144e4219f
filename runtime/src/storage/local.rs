//! `LocalStorage`: the checkpoint storage backend on a local directory (the default).
//!
//! Layout under the root directory: see `storage::names`.
//!
//! Invariants (the ones `CheckpointStorage` promises, and how this backend keeps them):
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
//! - Weir deletes only what it made. [`open`] takes an empty or new directory (and
//!   writes `.weir-checkpoints` into it), a directory holding that file, or one
//!   holding nothing but Weir's own names (an older Weir's storage, which it then
//!   marks); any other non-empty directory is refused. [`remove_all`] (`--from-scratch`)
//!   removes only Weir's own entries, and only from a directory that passes the same test.
//!
//! Names are validated and the fence checked by `CheckpointStorage` before a call
//! gets here.
//!
//! [`open`]: LocalStorage::open
//! [`remove_all`]: LocalStorage::remove_all
//! [`write_metadata`]: LocalStorage::write_metadata
//! [`discard`]: LocalStorage::discard
//! [`put_shared`]: LocalStorage::put_shared
//! [`gc`]: LocalStorage::gc

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::record::CheckpointId;
use crate::storage::StorageError;
use crate::storage::backend::{CheckpointInfo, GcReport, StorageBackend};
use crate::storage::local_files::{
    copy_durably, dir_size, ensure_dir, exists, fetch, file_size, io_err, missing, read_dir,
    read_if_exists, remove_file_if_exists, sync_dir, sync_file, temp_path,
};
use crate::storage::names::{
    self, METADATA_FILE, OWNER_FILE, SHARED_DIR, is_weir_entry, is_worker_location,
    parse_checkpoint_dir, validate_component, validate_task,
};

/// Checkpoint storage rooted at a local directory.
#[derive(Debug, Clone)]
pub struct LocalStorage {
    root: PathBuf,
}

impl LocalStorage {
    /// Opens (creating if needed) the storage rooted at `root` for pipeline `pipeline`;
    /// refuses a non-empty directory that is not Weir's, or whose marker names another
    /// pipeline (see the module docs).
    pub fn open(root: &Path, pipeline: &str) -> Result<Self, StorageError> {
        let root = root.to_path_buf();
        ensure_dir(&root)?;
        check_ours(&root)?;
        claim(&root, pipeline)?;
        ensure_dir(&root.join(SHARED_DIR))?;
        Ok(Self { root })
    }

    /// Opens the storage at `root` to read it only: nothing is created or written. A
    /// missing `root` reads as empty.
    pub fn open_read_only(root: &Path) -> Result<Self, StorageError> {
        if exists(root)? {
            check_ours(root)?;
        }
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    /// Deletes every checkpoint and shared file under `root`, and nothing else: refused
    /// (with nothing deleted) if `root` is not Weir's or belongs to another pipeline than
    /// `pipeline`. A missing `root` is fine.
    pub fn remove_all(root: &Path, pipeline: &str) -> Result<(), StorageError> {
        if !root.exists() {
            return Ok(());
        }
        check_ours(root)?;
        let owner = root.join(OWNER_FILE);
        if let Some(content) = read_if_exists(&owner)? {
            names::check_owner(&root.display().to_string(), &content, pipeline)?;
        }
        for entry in read_dir(root)? {
            let entry = entry.map_err(|e| io_err("list", root, e))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if is_weir_entry(&name) && name != OWNER_FILE && !is_worker_location(&name) {
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

    /// The names of the directories directly in `root`, sorted; none if `root` does
    /// not exist. Reads only.
    pub fn child_names(root: &Path) -> Result<Vec<String>, StorageError> {
        if !exists(root)? {
            return Ok(Vec::new());
        }
        let mut names = Vec::new();
        for entry in read_dir(root)? {
            let entry = entry.map_err(|e| io_err("list", root, e))?;
            let is_dir = entry
                .file_type()
                .map_err(|e| io_err("stat", &entry.path(), e))?
                .is_dir();
            if is_dir {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    /// The root directory.
    #[cfg(test)]
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn checkpoint_dir(&self, checkpoint_id: CheckpointId) -> PathBuf {
        self.root.join(names::checkpoint_dir_name(checkpoint_id))
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
            .join(names::shared_file_name(shared_name)))
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

impl StorageBackend for LocalStorage {
    /// Stores `src` as shared file `shared_name` of `task` (hard link when on the same
    /// filesystem, else a copy). Idempotent: returns the bytes added, 0 if it already existed.
    fn put_shared(&self, task: &str, shared_name: &str, src: &Path) -> Result<u64, StorageError> {
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
                return Err(missing(src));
            }
            // Cross-device (EXDEV) or a filesystem without hard links: copy.
            Err(_) => copy_durably(src, &dest)?,
        }
        sync_dir(&dir)?;
        Ok(size)
    }

    fn has_shared(&self, task: &str, shared_name: &str) -> Result<bool, StorageError> {
        exists(&self.shared_path(task, shared_name)?)
    }

    /// Stores `src` as private file `name` of `task` in checkpoint `checkpoint_id`, replacing
    /// a previous attempt's file of that name. Returns the bytes stored.
    fn put_private(
        &self,
        checkpoint_id: CheckpointId,
        task: &str,
        name: &str,
        src: &Path,
    ) -> Result<u64, StorageError> {
        let dest = self.private_path(checkpoint_id, task, name)?;
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
    fn fetch_shared_into(
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
    fn fetch_private_into(
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
    fn write_metadata(
        &self,
        checkpoint_id: CheckpointId,
        bytes: &[u8],
    ) -> Result<(), StorageError> {
        let dir = self.checkpoint_dir(checkpoint_id);
        let path = self.metadata_path(checkpoint_id);
        ensure_dir(&dir)?;
        if exists(&path)? {
            return Err(StorageError::AlreadyComplete {
                checkpoint_id,
                location: self.metadata_location(checkpoint_id),
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

    fn read_metadata(&self, checkpoint_id: CheckpointId) -> Result<Vec<u8>, StorageError> {
        let path = self.metadata_path(checkpoint_id);
        fs::read(&path).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                StorageError::NotComplete {
                    checkpoint_id,
                    location: path.display().to_string(),
                }
            } else {
                io_err("read", &path, e)
            }
        })
    }

    fn is_complete(&self, checkpoint_id: CheckpointId) -> Result<bool, StorageError> {
        exists(&self.metadata_path(checkpoint_id))
    }

    /// Every checkpoint directory, complete or not, ascending.
    fn checkpoint_ids(&self) -> Result<Vec<CheckpointId>, StorageError> {
        let mut ids = Vec::new();
        if !exists(&self.root)? {
            // Opened read-only where nothing was ever written.
            return Ok(ids);
        }
        for entry in read_dir(&self.root)? {
            let entry = entry.map_err(|e| io_err("list", &self.root, e))?;
            if let Some(id) = entry.file_name().to_str().and_then(parse_checkpoint_dir) {
                ids.push(CheckpointId(id));
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }

    /// Removes checkpoint `checkpoint_id`'s directory (`_metadata` first, so it never looks
    /// complete half-deleted). Returns whether it existed.
    fn discard(&self, checkpoint_id: CheckpointId) -> Result<bool, StorageError> {
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

    /// Removes every shared file not in `referenced` (and leftover temp files of
    /// interrupted uploads), then task directories left empty. Checkpoints are the
    /// caller's (`CheckpointStorage::gc`) to remove first.
    fn gc_shared(
        &self,
        referenced: &HashSet<(String, String)>,
        report: &mut GcReport,
    ) -> Result<(), StorageError> {
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
                let shared_name = names::parse_shared_file_name(&file_name);
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
        Ok(())
    }

    fn checkpoint_info(&self, checkpoint_id: CheckpointId) -> Result<CheckpointInfo, StorageError> {
        let dir = self.checkpoint_dir(checkpoint_id);
        if !exists(&dir)? {
            return Err(missing(&dir));
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

    fn metadata_location(&self, checkpoint_id: CheckpointId) -> String {
        self.metadata_path(checkpoint_id).display().to_string()
    }

    /// Where shared file `shared_name` of `task` is (for messages).
    fn shared_location(&self, task: &str, shared_name: &str) -> Result<String, StorageError> {
        Ok(self.shared_path(task, shared_name)?.display().to_string())
    }

    /// Where private file `name` of `task` in checkpoint `checkpoint_id` is.
    fn private_location(
        &self,
        checkpoint_id: CheckpointId,
        task: &str,
        name: &str,
    ) -> Result<String, StorageError> {
        Ok(self
            .private_path(checkpoint_id, task, name)?
            .display()
            .to_string())
    }
}

/// Refuses a directory that is neither marked as Weir's nor holds only Weir's names.
/// Makes `root` (already checked to be Weir's) `pipeline`'s: writes the owner file if it
/// is missing (whole, and never over one a racing opener wrote: a temp file hard-linked
/// into place), refuses one naming another pipeline, and rewrites one naming none.
fn claim(root: &Path, pipeline: &str) -> Result<(), StorageError> {
    let owner = root.join(OWNER_FILE);
    let shown = root.display().to_string();
    let content = names::owner_content(pipeline);
    let write_temp = || -> Result<PathBuf, StorageError> {
        let tmp = temp_path(&owner);
        let mut file = File::create(&tmp).map_err(|e| io_err("create", &tmp, e))?;
        file.write_all(&content)
            .and_then(|()| file.sync_all())
            .map_err(|e| io_err("write", &tmp, e))?;
        Ok(tmp)
    };
    match read_if_exists(&owner)? {
        Some(existing) => {
            if names::check_owner(&shown, &existing, pipeline)? {
                // An older Weir's marker: adopt it.
                let tmp = write_temp()?;
                fs::rename(&tmp, &owner).map_err(|e| io_err("rename into place", &owner, e))?;
            } else {
                return Ok(());
            }
        }
        None => {
            let tmp = write_temp()?;
            let linked = fs::hard_link(&tmp, &owner);
            let _ = fs::remove_file(&tmp);
            match linked {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    // Another opener won the race: it must have been this pipeline.
                    let existing = read_if_exists(&owner)?.unwrap_or_default();
                    names::check_owner(&shown, &existing, pipeline)?;
                    return Ok(());
                }
                Err(e) => return Err(io_err("create", &owner, e)),
            }
        }
    }
    sync_dir(root)
}

fn check_ours(root: &Path) -> Result<(), StorageError> {
    if exists(&root.join(OWNER_FILE))? {
        return Ok(());
    }
    for entry in read_dir(root)? {
        let entry = entry.map_err(|e| io_err("list", root, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !is_weir_entry(&name) {
            return Err(StorageError::NotOurs {
                root: root.display().to_string(),
                entry: name,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "local_tests.rs"]
mod tests;
