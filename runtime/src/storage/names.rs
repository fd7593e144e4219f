//! The layout of checkpoint storage, the same on every backend: the names under its
//! root (a directory, or a key prefix in a bucket) and the checks on names callers give.
//!
//! ```text
//! shared/<task>/<shared-name>.sst     SST files, shared between checkpoints
//! chk-<id:010>/<task>/<file>          files private to one checkpoint (CURRENT, MANIFEST-*, ...)
//! chk-<id:010>/_metadata              written LAST: a checkpoint is complete iff it exists
//! .weir-checkpoints                   says the root is Weir's, and whose: one pipeline's
//! worker-<I>-of-<N>/                  worker I of N's own checkpoints, the same layout
//! ```
//!
//! The marker (`.weir-checkpoints`) is two lines, `weir checkpoint storage` and
//! `pipeline: <name>`: a root belongs to exactly one pipeline, and a second pipeline (or
//! a worker of another one) pointed at it is refused instead of deleting the first's
//! checkpoints. A marker without the second line (written by an older Weir) names no
//! pipeline; the first pipeline to open it adopts it by rewriting it.
//!
//! Invariants: every name a caller gives (task, shared name, private file) is one plain
//! path component, so no name can reach outside its place under the root on either
//! backend; task names may not start with `_` or `.` (reserved for `_metadata` and temp
//! files); checkpoint directories are spelled canonically (`chk-` and at least ten
//! digits, no other padding), and anything else under the root is not a checkpoint.

use crate::record::CheckpointId;
use crate::storage::StorageError;

/// Directory (under the root) holding the files shared between checkpoints.
pub const SHARED_DIR: &str = "shared";
/// Prefix of a checkpoint directory: `chk-<id:010>`.
pub const CHECKPOINT_DIR_PREFIX: &str = "chk-";
/// Name of the file whose presence makes a checkpoint complete.
pub const METADATA_FILE: &str = "_metadata";
/// The file that marks a root as Weir's checkpoint storage.
pub const OWNER_FILE: &str = ".weir-checkpoints";
/// The owner file's first line (all an older Weir wrote into it).
const OWNER_HEADER: &str = "weir checkpoint storage";
/// Prefix of the owner file's line naming the pipeline.
const OWNER_PIPELINE: &str = "pipeline: ";
/// Extension of shared files (RocksDB SSTs).
pub const SHARED_EXTENSION: &str = "sst";

/// `chk-0000000042` for checkpoint 42.
pub fn checkpoint_dir_name(checkpoint_id: CheckpointId) -> String {
    format!("{CHECKPOINT_DIR_PREFIX}{:010}", checkpoint_id.0)
}

/// `<shared-name>.sst`.
pub fn shared_file_name(shared_name: &str) -> String {
    format!("{shared_name}.{SHARED_EXTENSION}")
}

/// `abc-000007.sst` -> `abc-000007`; anything else -> None.
pub fn parse_shared_file_name(file_name: &str) -> Option<&str> {
    file_name
        .strip_suffix(SHARED_EXTENSION)
        .and_then(|stem| stem.strip_suffix('.'))
}

/// `chk-0000000042` -> 42; anything else (including non-canonical padding) -> None.
pub fn parse_checkpoint_dir(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(CHECKPOINT_DIR_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let id: u64 = digits.parse().ok()?;
    (format!("{id:010}") == digits).then_some(id)
}

/// Whether `name` is one Weir creates directly under a storage root.
pub fn is_weir_entry(name: &str) -> bool {
    name == OWNER_FILE
        || name == SHARED_DIR
        || parse_checkpoint_dir(name).is_some()
        || is_worker_location(name)
        || (name.starts_with('.') && name.contains(".tmp-"))
}

/// Whether `name` is a worker's own location below the pipeline's root
/// (`worker-<I>-of-<N>`, see `cluster::Worker::dir_name`): a storage of its own,
/// which the root's `remove_all` leaves alone.
pub fn is_worker_location(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    name.strip_prefix("worker-")
        .and_then(|rest| rest.split_once("-of-"))
        .is_some_and(|(i, n)| digits(i) && digits(n))
}

/// What the owner file holds for `pipeline`.
pub fn owner_content(pipeline: &str) -> Vec<u8> {
    format!("{OWNER_HEADER}\n{OWNER_PIPELINE}{pipeline}\n").into_bytes()
}

/// The pipeline an owner file names; `None` for an older Weir's marker, which names none.
pub fn parse_owner(content: &[u8]) -> Option<String> {
    String::from_utf8_lossy(content)
        .lines()
        .find_map(|line| line.strip_prefix(OWNER_PIPELINE))
        .map(|name| name.trim_end().to_owned())
}

/// Checks an existing owner file's `content` lets `pipeline` use `root`: refused if it
/// names another pipeline. Returns whether it names none (an older Weir's marker, to be
/// adopted by rewriting it for `pipeline`).
pub fn check_owner(root: &str, content: &[u8], pipeline: &str) -> Result<bool, StorageError> {
    match parse_owner(content) {
        Some(owner) if owner == pipeline => Ok(false),
        Some(owner) => Err(StorageError::OtherPipeline(Box::new(
            crate::storage::error::OtherPipeline {
                root: root.to_owned(),
                owner,
                pipeline: pipeline.to_owned(),
            },
        ))),
        None => Ok(true),
    }
}

/// One plain path component: not empty, not `.`/`..`, no separator, not hidden.
pub fn validate_component(kind: &'static str, name: &str) -> Result<(), StorageError> {
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

/// A task name: a plain component not starting with `_`.
pub fn validate_task(task: &str) -> Result<(), StorageError> {
    validate_component("task", task)?;
    if task.starts_with('_') {
        return Err(StorageError::InvalidName {
            kind: "task",
            name: task.to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_dirs_are_canonical() {
        assert_eq!(parse_checkpoint_dir("chk-0000000042"), Some(42));
        assert_eq!(
            parse_checkpoint_dir("chk-12345678901"),
            Some(12_345_678_901)
        );
        for bad in ["chk-1", "chk-abc", "chk-", "other", "chk-00000000042"] {
            assert_eq!(parse_checkpoint_dir(bad), None, "{bad}");
        }
        assert_eq!(checkpoint_dir_name(CheckpointId(42)), "chk-0000000042");
        assert_eq!(parse_shared_file_name("a-7.sst"), Some("a-7"));
        assert_eq!(parse_shared_file_name("a-7sst"), None);
        assert_eq!(parse_shared_file_name(".a.sst.tmp-1"), None);
    }

    #[test]
    fn the_owner_file_names_its_pipeline() {
        assert_eq!(
            parse_owner(&owner_content("orders-agg")).as_deref(),
            Some("orders-agg")
        );
        // An older Weir's marker names no pipeline.
        assert_eq!(parse_owner(b"weir checkpoint storage\n"), None);
    }
}
