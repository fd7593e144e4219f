//! `StateDirLock`: one instance per state dir.
//!
//! Invariants: a run takes an exclusive advisory lock (`flock`) on `<state_dir>/weir.lock`
//! before it touches Kafka, checkpoint storage or any working directory, and holds it
//! for the life of the process; the kernel releases it when the process exits, however
//! it exits (a SIGKILLed instance leaves no stale lock). A second instance on the same
//! state dir is refused with the holder's pid, read from the lock file, instead of
//! fencing the first and deleting its RocksDB working files.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Name of the lock file inside the state dir.
pub const LOCK_FILE: &str = "weir.lock";

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "state dir {} is in use by another weir process (pid {holder}): stop it first, or give this run its own state_dir",
        dir.display()
    )]
    InUse { dir: PathBuf, holder: String },
    #[error("cannot lock state dir {}: {source}", dir.display())]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Held for the life of a run; dropping it releases the lock.
#[derive(Debug)]
pub struct StateDirLock {
    _file: File,
}

impl StateDirLock {
    /// Creates `dir` if needed and locks it, or says who holds it.
    pub fn acquire(dir: &Path) -> Result<Self, LockError> {
        let io = |source| LockError::Io {
            dir: dir.to_owned(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK_FILE))
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                // The holder wrote its pid right after locking; an empty file means it
                // is between the two.
                let _ = file.read_to_string(&mut holder);
                let holder = match holder.trim() {
                    "" => "unknown".to_owned(),
                    pid => pid.to_owned(),
                };
                return Err(LockError::InUse {
                    dir: dir.to_owned(),
                    holder,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        file.sync_data().map_err(io)?;
        Ok(StateDirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_holder_and_a_released_lock_is_free_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let first = StateDirLock::acquire(&state).expect("first lock");
        // flock locks belong to the open file description: a second open in the same
        // process conflicts like another process would.
        match StateDirLock::acquire(&state) {
            Err(LockError::InUse { holder, .. }) => {
                assert_eq!(holder, std::process::id().to_string())
            }
            other => panic!("second lock must be refused, got {other:?}"),
        }
        drop(first);
        StateDirLock::acquire(&state).expect("free again after the holder is gone");
    }
}
