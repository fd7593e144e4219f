//! Durable local file operations: what the local backend stores with, and what the
//! object store backend downloads into (a restore's files are local either way).
//!
//! Invariants:
//! - A file written here never appears under its final name half-written: it is
//!   copied to a hidden temp name next to it (`.<name>.tmp-<pid>-<n>`, unique within
//!   the process), fsynced, and renamed; a new directory's parent is fsynced.
//! - Every error names the operation and the path (`StorageError::Io`), and a missing
//!   file is `StorageError::MissingFile`, not an I/O error.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::storage::StorageError;

/// Distinguishes temp files created by concurrent calls within one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The bytes of `path`, `None` if it does not exist.
pub(super) fn read_if_exists(path: &Path) -> Result<Option<Vec<u8>>, StorageError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("read", path, e)),
    }
}

pub(super) fn io_err(op: &'static str, path: &Path, source: io::Error) -> StorageError {
    StorageError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

pub(super) fn missing(path: &Path) -> StorageError {
    StorageError::MissingFile {
        location: path.display().to_string(),
    }
}

pub(super) fn exists(path: &Path) -> Result<bool, StorageError> {
    path.try_exists().map_err(|e| io_err("stat", path, e))
}

/// The size of local file `path`; `MissingFile` if it is not there.
pub(super) fn file_size(path: &Path) -> Result<u64, StorageError> {
    match fs::metadata(path) {
        Ok(m) => Ok(m.len()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(missing(path)),
        Err(e) => Err(io_err("stat", path, e)),
    }
}

pub(super) fn read_dir(dir: &Path) -> Result<fs::ReadDir, StorageError> {
    fs::read_dir(dir).map_err(|e| io_err("list", dir, e))
}

/// Removes a file; Ok(false) if it was not there.
pub(super) fn remove_file_if_exists(path: &Path) -> Result<bool, StorageError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err("remove", path, e)),
    }
}

/// Creates `dir` (and missing parents), fsyncing each new directory's parent.
pub(super) fn ensure_dir(dir: &Path) -> Result<(), StorageError> {
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

pub(super) fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err("fsync directory", dir, e))
}

pub(super) fn sync_file(path: &Path) -> Result<(), StorageError> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_err("fsync", path, e))
}

/// A hidden temp name next to `path`, unique within this process.
pub(super) fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// Copies `src` to a temp name next to `dest`, fsyncs it and renames it to `dest`.
pub(super) fn copy_durably(src: &Path, dest: &Path) -> Result<(), StorageError> {
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
pub(super) fn fetch(src: &Path, dest: &Path, link_ok: bool) -> Result<u64, StorageError> {
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
pub(super) fn dir_size(dir: &Path) -> Result<u64, StorageError> {
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
