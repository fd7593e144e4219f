//! `ConnectorError`: why a source or sink failed, naming the file, directory or
//! checkpoint involved.
//!
//! Invariant: every variant's `Display` is one line that says what was being done and
//! to what (`cannot read input file data/a.txt: No such file or directory`); the OS
//! reason is part of that line rather than a separate `source()`, so a CLI printing the
//! error chain does not repeat it.

use std::io;
use std::path::{Path, PathBuf};

use crate::record::CheckpointId;
use crate::record::SnapshotError;

#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    #[error("cannot read input file {}: {}", .path.display(), io_reason(.error))]
    ReadInput { path: PathBuf, error: io::Error },

    #[error("input file {} line {line} is longer than max_line_bytes ({max} bytes): raise max_line_bytes or fix the input", .path.display())]
    LineTooLong {
        path: PathBuf,
        line: u64,
        max: usize,
    },

    #[error(
        "stdin line {line} is longer than max_line_bytes ({max} bytes): raise max_line_bytes or fix the input"
    )]
    StdinLineTooLong { line: u64, max: usize },

    #[error("input {} is {kind}, not a regular file or directory: a file source reads regular files only (use a stdin source for a pipe)", .path.display())]
    NotRegularInput { path: PathBuf, kind: &'static str },

    #[error("cannot list input directory {}: {}", .path.display(), io_reason(.error))]
    ListInput { path: PathBuf, error: io::Error },

    /// A file sink's (or the dead-letter output's) directory, or its staging directory.
    #[error("cannot list output directory {}: {}", .path.display(), io_reason(.error))]
    ListOutput { path: PathBuf, error: io::Error },

    #[error("cannot write {}: {}", .path.display(), io_reason(.error))]
    Write { path: PathBuf, error: io::Error },

    #[error("cannot read standard input: {}", io_reason(.0))]
    Stdin(io::Error),

    #[error("cannot write to standard output: {}", io_reason(.0))]
    Stdout(io::Error),

    #[error("cannot commit checkpoint {checkpoint} of {operator}: cannot rename {} to {}: {}",
        .staged.display(), .committed.display(), io_reason(.error))]
    Commit {
        operator: String,
        checkpoint: CheckpointId,
        staged: PathBuf,
        committed: PathBuf,
        error: io::Error,
    },

    #[error("cannot commit checkpoint {checkpoint} of {operator}: neither the staged file {} nor the committed file {} exists",
        .staged.display(), .committed.display())]
    CommitMissing {
        operator: String,
        checkpoint: CheckpointId,
        staged: PathBuf,
        committed: PathBuf,
    },

    #[error("{operator}: invalid snapshot for checkpoint {checkpoint}: {reason}")]
    BadSnapshot {
        operator: String,
        checkpoint: CheckpointId,
        reason: String,
    },

    /// A position or snapshot that does not decode (or comes from a newer weir).
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),

    #[error("{connector} source: cannot resume from position {position}: {reason}")]
    BadPosition {
        connector: &'static str,
        position: String,
        reason: String,
    },

    #[error("the {0} connector is not available yet")]
    Unavailable(&'static str),

    /// Boxed: `KafkaError`'s largest variants (several names and numbers for one line)
    /// would make every `Result<_, ConnectorError>` and `PipelineError` carry them.
    #[error(transparent)]
    Kafka(Box<crate::connector::kafka::KafkaError>),
}

impl From<crate::connector::kafka::KafkaError> for ConnectorError {
    fn from(e: crate::connector::kafka::KafkaError) -> Self {
        ConnectorError::Kafka(Box::new(e))
    }
}

impl ConnectorError {
    pub(crate) fn write(path: &Path, error: io::Error) -> Self {
        ConnectorError::Write {
            path: path.to_owned(),
            error,
        }
    }

    pub(crate) fn read(path: &Path, error: io::Error) -> Self {
        ConnectorError::ReadInput {
            path: path.to_owned(),
            error,
        }
    }
}

/// The OS's reason without Rust's " (os error N)" suffix: "No such file or directory".
pub fn io_reason(e: &io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) if s.ends_with(')') => s[..i].to_owned(),
        _ => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_clear_line() {
        let e = ConnectorError::read(Path::new("in/a.txt"), io::Error::from_raw_os_error(2));
        assert_eq!(
            e.to_string(),
            "cannot read input file in/a.txt: No such file or directory"
        );
        assert_eq!(
            ConnectorError::Unavailable("kafka").to_string(),
            "the kafka connector is not available yet"
        );
    }
}
