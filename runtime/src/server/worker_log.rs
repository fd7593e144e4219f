//! A worker's log on the server: bounded on disk, and its tail for the status.
//!
//! Invariants:
//! - A worker's stderr is appended to its log (`PipelineDir::log`) through a file the
//!   worker holds open with `O_APPEND`. Once the log passes `[workers] log_max_bytes`,
//!   its supervisor thread copies it to `<log>.1` (replacing the older copy) and
//!   truncates it to zero; the worker's next write lands at the new end. The copy is
//!   written under another name and renamed, so `<log>.1`, once there, is always a
//!   whole copy; it appears before the log is emptied. So a worker's
//!   logs take at most about twice `log_max_bytes` on disk, whatever its guests write
//!   (they are held to `[limits] guest_log_rate` besides). Lines written between the
//!   copy and the truncation are lost: the rotation of `logrotate`'s `copytruncate`.
//! - `tail` reads at most the last `TAIL_BYTES` of the log, whatever its size.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// How much of the end of a log `tail` reads.
const TAIL_BYTES: u64 = 16 << 10;
/// Longest line `tail` returns (a longer one is cut).
const TAIL_LINE: usize = 1024;

/// The older copy of `log`.
pub fn rotated(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

/// Rotates `log` if it is larger than `max` bytes (see the module invariants); whether
/// it did.
pub fn rotate_if_over(log: &Path, max: u64) -> std::io::Result<bool> {
    let len = match std::fs::metadata(log) {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if len <= max {
        return Ok(false);
    }
    let mut partial = rotated(log).into_os_string();
    partial.push(".partial");
    std::fs::copy(log, &partial)?;
    std::fs::rename(&partial, rotated(log))?;
    OpenOptions::new().write(true).open(log)?.set_len(0)?;
    Ok(true)
}

/// The last `lines` lines of `log` (from its last `TAIL_BYTES`), each at most
/// `TAIL_LINE` bytes; empty if there is no log.
pub fn tail(log: &Path, lines: usize) -> Vec<String> {
    let Ok(mut file) = std::fs::File::open(log) else {
        return Vec::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let start = len.saturating_sub(TAIL_BYTES);
    if file.seek(SeekFrom::Start(start)).is_err() {
        return Vec::new();
    }
    let mut bytes = Vec::new();
    let _ = file.take(TAIL_BYTES).read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let mut all: Vec<&str> = text.lines().collect();
    if start > 0 && !all.is_empty() {
        all.remove(0); // cut mid-line
    }
    let from = all.len().saturating_sub(lines);
    all[from..]
        .iter()
        .map(|l| {
            let end = l.floor_char_boundary(l.len().min(TAIL_LINE));
            l[..end].to_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_log_over_its_bound_is_copied_and_emptied_and_writes_go_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("worker.log");
        let mut writer = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("open");
        writer.write_all(&[b'a'; 100]).expect("write");
        assert!(!rotate_if_over(&log, 100).expect("rotate"));
        writer.write_all(b"\nlast line\n").expect("write");
        assert!(rotate_if_over(&log, 100).expect("rotate"));
        assert_eq!(std::fs::metadata(&log).expect("log").len(), 0);
        assert_eq!(
            std::fs::read(rotated(&log)).expect("copy").len(),
            111,
            "the copy has everything"
        );
        let files = std::fs::read_dir(dir.path()).expect("dir").count();
        assert_eq!(files, 2, "the log and its copy, nothing written on the way");
        writer.write_all(b"after\n").expect("write");
        assert_eq!(std::fs::read_to_string(&log).expect("log"), "after\n");
        assert!(!rotate_if_over(&dir.path().join("none.log"), 1).expect("missing"));
    }

    #[test]
    fn the_tail_is_the_last_lines_cut_to_length() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("worker.log");
        assert!(tail(&log, 5).is_empty());
        let mut text = String::new();
        for i in 0..10_000 {
            text.push_str(&format!("line {i}\n"));
        }
        text.push_str(&"y".repeat(5000));
        text.push('\n');
        std::fs::write(&log, text).expect("write");
        let got = tail(&log, 3);
        assert_eq!(got[0], "line 9998");
        assert_eq!(got[1], "line 9999");
        assert_eq!(got[2].len(), TAIL_LINE);
    }
}
