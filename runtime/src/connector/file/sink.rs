//! `FileSink`: the exactly-once file sink's writing side (phase one of its two-phase
//! commit; `FileSinkCommitter` is phase two).
//!
//! Invariants:
//! - Each subtask writes the records of checkpoint n (those between barrier n-1 and
//!   barrier n) into one staged file `<dir>/.staging/<name>-<task>-<n:010>.<ext>`,
//!   created on the first such record (a checkpoint without records leaves no file).
//! - At barrier n the staged file is flushed and fsynced before `barrier` returns, and the snapshot lists it with its committed name
//!   `<dir>/<name>-<task>-<n:010>.<ext>`. Nothing is ever visible under a committed
//!   name until the coordinator, after checkpoint n is complete, has the committer
//!   rename it; an aborted checkpoint's staged files are deleted on recovery by
//!   `FileSinkCommitter::discard_uncommitted`. Hence every record is in exactly one
//!   committed file once its checkpoint commits, and in none if it never does.
//! - Snapshot format (a `FileSinkSnapshot`):
//!   `{"v": 1, "files": [{"staged": ".staging/<file>", "committed": "<file>"}]}`, names
//!   relative to the sink directory, so a checkpoint stays valid if the directory is
//!   moved with it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::connector::error::ConnectorError;
use crate::connector::record_format::{OutputFormat, encode_record};
use crate::dataflow::operator::OperatorError;
use crate::dataflow::sink::Sink;
use crate::field::checks;
use crate::record::CheckpointId;
use crate::record::OperatorSnapshot;
use crate::record::batch::RecordBatch;
use crate::record::message::Barrier;
use crate::record::snapshot::{self, SnapshotState};

/// Subdirectory of a sink directory holding files not yet committed.
pub const STAGING_DIR: &str = ".staging";
/// Write buffer per staged file.
const WRITE_BUFFER_BYTES: usize = 256 << 10;

/// `type = "file"` sink.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSinkConfig {
    /// The output directory (created if missing). Relative paths are resolved against
    /// the spec file's directory by the spec.
    #[serde(deserialize_with = "checks::path")]
    pub path: PathBuf,
    #[serde(default)]
    pub format: OutputFormat,
}

/// One staged file and the name it takes when its checkpoint commits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedFile {
    /// Relative to the sink directory: `.staging/<file>`.
    pub staged: String,
    /// Relative to the sink directory: `<file>`.
    pub committed: String,
}

/// A file sink subtask's snapshot for one checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSinkSnapshot {
    pub files: Vec<StagedFile>,
}

impl SnapshotState for FileSinkSnapshot {
    const VERSION: u32 = 1;
}

/// How errors name the file sink `operator`'s snapshot.
pub fn snapshot_name(operator: &str) -> String {
    format!("file sink {operator} snapshot")
}

/// The file name (without directory) of `name`'s output for `task` and `checkpoint`.
pub fn output_file_name(
    name: &str,
    task: &str,
    checkpoint: CheckpointId,
    format: OutputFormat,
) -> String {
    format!("{name}-{task}-{:010}.{}", checkpoint.0, format.extension())
}

#[derive(Debug)]
struct OpenFile {
    path: PathBuf,
    writer: BufWriter<File>,
}

/// One subtask of an exactly-once file sink, as the last operator of its chain.
#[derive(Debug)]
pub struct FileSink {
    id: String,
    name: String,
    task: String,
    dir: PathBuf,
    staging: PathBuf,
    format: OutputFormat,
    file: Option<OpenFile>,
    line: Vec<u8>,
}

impl FileSink {
    /// `id`: the operator id (`sink-0`, `dead-letter`); `name`: the file-name prefix,
    /// unique among the sinks writing into `dir`; `task`: the subtask's id (`1-0`).
    ///
    /// Creates `dir` and its staging directory if missing.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        task: impl Into<String>,
        dir: impl Into<PathBuf>,
        format: OutputFormat,
    ) -> Result<Self, ConnectorError> {
        let dir = dir.into();
        let staging = dir.join(STAGING_DIR);
        std::fs::create_dir_all(&staging).map_err(|e| ConnectorError::write(&staging, e))?;
        Ok(FileSink {
            id: id.into(),
            name: name.into(),
            task: task.into(),
            dir,
            staging,
            format,
            file: None,
            line: Vec::with_capacity(256),
        })
    }

    /// The staged file of `checkpoint`, created on its first record.
    fn open_file(&mut self, checkpoint: CheckpointId) -> Result<&mut OpenFile, ConnectorError> {
        match &mut self.file {
            Some(open) => Ok(open),
            slot @ None => {
                let name = output_file_name(&self.name, &self.task, checkpoint, self.format);
                let path = self.staging.join(name);
                // Truncates what an earlier, aborted attempt at this checkpoint left.
                let file = File::create(&path).map_err(|e| ConnectorError::write(&path, e))?;
                Ok(slot.insert(OpenFile {
                    path,
                    writer: BufWriter::with_capacity(WRITE_BUFFER_BYTES, file),
                }))
            }
        }
    }

    /// Makes the staged file of checkpoint `id` durable and returns its snapshot.
    fn prepare_commit(&mut self, id: CheckpointId) -> Result<FileSinkSnapshot, ConnectorError> {
        let mut snapshot = FileSinkSnapshot::default();
        if let Some(mut open) = self.file.take() {
            open.writer
                .flush()
                .map_err(|e| ConnectorError::write(&open.path, e))?;
            let file = open
                .writer
                .into_inner()
                .map_err(|e| ConnectorError::write(&open.path, e.into_error()))?;
            file.sync_all()
                .map_err(|e| ConnectorError::write(&open.path, e))?;
            drop(file);
            // Named for `id` when it was created: the sink set writes and barriers the
            // same checkpoint (see `dataflow::sink`).
            let file_name = output_file_name(&self.name, &self.task, id, self.format);
            snapshot.files.push(StagedFile {
                staged: format!("{STAGING_DIR}/{file_name}"),
                committed: file_name,
            });
        }
        Ok(snapshot)
    }

    /// The sink's output directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Sink for FileSink {
    fn id(&self) -> &str {
        &self.id
    }

    fn write(
        &mut self,
        checkpoint: CheckpointId,
        batch: &RecordBatch,
    ) -> Result<(), OperatorError> {
        let format = self.format;
        let mut line = std::mem::take(&mut self.line);
        let file = self.open_file(checkpoint)?;
        for record in batch.iter() {
            line.clear();
            encode_record(format, record, &mut line);
            file.writer
                .write_all(&line)
                .map_err(|e| ConnectorError::write(&file.path, e))?;
        }
        self.line = line;
        Ok(())
    }

    fn barrier(&mut self, barrier: Barrier) -> Result<Option<OperatorSnapshot>, OperatorError> {
        let snapshot = self.prepare_commit(barrier.id)?;
        let state = snapshot::encode(&snapshot_name(&self.id), &snapshot)?;
        Ok(Some(OperatorSnapshot::new(state)))
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        // Records after the final barrier cannot exist (see `record::message`); if some
        // did, they stay staged and are discarded at the next start.
        if let Some(open) = self.file.as_mut() {
            open.writer
                .flush()
                .map_err(|e| ConnectorError::write(&open.path, e))?;
        }
        Ok(())
    }
}
