//! `FileSinkCommitter`: phase two of the file sink's two-phase commit, run by the
//! checkpoint coordinator (see `checkpoint::commit`).
//!
//! Invariants:
//! - `commit` of checkpoint n renames every staged file listed in the subtasks'
//!   snapshots of this sink in n's metadata to its committed name, then fsyncs the sink directory and its
//!   staging directory, so the renames survive a crash once it returns. A rename is
//!   atomic: a reader sees a committed file whole or not at all.
//! - It is idempotent: a file already renamed (staged name gone, committed name
//!   present) is done; both missing means output was lost and is an error naming them.
//! - `discard_uncommitted(c)` deletes everything this sink (`<name>-` prefix) left in
//!   `.staging/` (output of checkpoints after c, never to be committed) and any
//!   committed file of a checkpoint after c (only possible if recovery fell back to an
//!   older checkpoint than the last committed one; keeping it would duplicate output).
//!   It must run before the sink's subtasks start writing.
//! - Several sinks may share a directory if no sink's name is another's name followed
//!   by `-`: files are told apart by the `<name>-` prefix.

use std::path::{Path, PathBuf};

use crate::checkpoint::commit::{CommitError, Committer};
use crate::checkpoint::metadata::CheckpointMetadata;
use crate::connector::error::ConnectorError;
use crate::connector::file::sink::{FileSinkSnapshot, STAGING_DIR, snapshot_name};
use crate::record::CheckpointId;
use crate::record::OperatorSnapshot;
use crate::record::snapshot;

#[derive(Debug)]
pub struct FileSinkCommitter {
    operator_id: String,
    name: String,
    dir: PathBuf,
}

impl FileSinkCommitter {
    /// Commits the output of the `FileSink`s with operator id `operator_id` and
    /// file-name prefix `name` writing into `dir`.
    pub fn new(
        operator_id: impl Into<String>,
        name: impl Into<String>,
        dir: impl Into<PathBuf>,
    ) -> Self {
        FileSinkCommitter {
            operator_id: operator_id.into(),
            name: name.into(),
            dir: dir.into(),
        }
    }

    fn bad_snapshot(&self, id: CheckpointId, reason: impl Into<String>) -> ConnectorError {
        ConnectorError::BadSnapshot {
            operator: self.operator_id.clone(),
            checkpoint: id,
            reason: reason.into(),
        }
    }

    /// Commits checkpoint `id` given every subtask's snapshot of the sink (what the
    /// `Committer` impl does; callable directly by tests and tools).
    pub fn commit_files(
        &self,
        id: CheckpointId,
        snapshots: &[&OperatorSnapshot],
    ) -> Result<(), ConnectorError> {
        let mut renamed = false;
        for taken in snapshots {
            let snapshot: FileSinkSnapshot =
                snapshot::decode(&snapshot_name(&self.operator_id), &taken.state)?;
            for file in snapshot.files {
                let staged_name = file
                    .staged
                    .strip_prefix(STAGING_DIR)
                    .and_then(|s| s.strip_prefix('/'))
                    .filter(|s| is_plain_file_name(s))
                    .ok_or_else(|| {
                        self.bad_snapshot(id, format!("bad staged file name {:?}", file.staged))
                    })?;
                if !is_plain_file_name(&file.committed) {
                    return Err(self.bad_snapshot(
                        id,
                        format!("bad committed file name {:?}", file.committed),
                    ));
                }
                let staged = self.dir.join(STAGING_DIR).join(staged_name);
                let committed = self.dir.join(&file.committed);
                match std::fs::rename(&staged, &committed) {
                    Ok(()) => renamed = true,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        if !committed.is_file() {
                            return Err(ConnectorError::CommitMissing {
                                operator: self.operator_id.clone(),
                                checkpoint: id,
                                staged,
                                committed,
                            });
                        }
                    }
                    Err(error) => {
                        return Err(ConnectorError::Commit {
                            operator: self.operator_id.clone(),
                            checkpoint: id,
                            staged,
                            committed,
                            error,
                        });
                    }
                }
            }
        }
        if renamed {
            sync_dir(&self.dir)?;
            sync_dir(&self.dir.join(STAGING_DIR))?;
        }
        Ok(())
    }

    /// What `discard_uncommitted` does (see the module docs).
    pub fn discard(&self, restored: CheckpointId) -> Result<(), ConnectorError> {
        let staging = self.dir.join(STAGING_DIR);
        let prefix = format!("{}-", self.name);
        let mut removed = 0usize;
        for path in list_dir(&staging)? {
            if file_name_of(&path).is_some_and(|n| n.starts_with(&prefix)) {
                std::fs::remove_file(&path).map_err(|e| ConnectorError::write(&path, e))?;
                removed += 1;
            }
        }
        if removed > 0 {
            tracing::debug!(operator = %self.operator_id, removed, "discarded uncommitted staged files");
            sync_dir(&staging)?;
        }
        if restored != CheckpointId::NONE {
            let mut removed_committed = false;
            for (path, checkpoint) in committed_files_with_ids(&self.dir, &self.name)? {
                if checkpoint > restored {
                    tracing::warn!(
                        operator = %self.operator_id, file = %path.display(), %restored,
                        "removing output committed after the checkpoint being restored"
                    );
                    std::fs::remove_file(&path).map_err(|e| ConnectorError::write(&path, e))?;
                    removed_committed = true;
                }
            }
            if removed_committed {
                sync_dir(&self.dir)?;
            }
        }
        Ok(())
    }
}

impl Committer for FileSinkCommitter {
    fn operator_id(&self) -> &str {
        &self.operator_id
    }

    fn commit(
        &mut self,
        metadata: &CheckpointMetadata,
        _deadline: std::time::Instant,
    ) -> Result<(), CommitError> {
        let snapshots = metadata.snapshots_of(&self.operator_id);
        Ok(self.commit_files(metadata.id, &snapshots)?)
    }

    fn discard_uncommitted(&mut self, restored: CheckpointId) -> Result<(), CommitError> {
        Ok(self.discard(restored)?)
    }
}

/// The committed files of the sink `name` in `dir`, sorted by name (an empty list if
/// `dir` does not exist).
pub fn committed_files(dir: &Path, name: &str) -> Result<Vec<PathBuf>, ConnectorError> {
    Ok(committed_files_with_ids(dir, name)?
        .into_iter()
        .map(|(p, _)| p)
        .collect())
}

/// Deletes the committed and staged files of the sink `name` in `dir` (for a run
/// `--from-scratch`); returns how many files were removed.
pub fn remove_committed(dir: &Path, name: &str) -> Result<usize, ConnectorError> {
    let mut removed = 0;
    let prefix = format!("{name}-");
    let staged = list_dir(&dir.join(STAGING_DIR))?
        .into_iter()
        .filter(|p| file_name_of(p).is_some_and(|n| n.starts_with(&prefix)));
    for path in committed_files(dir, name)?.into_iter().chain(staged) {
        std::fs::remove_file(&path).map_err(|e| ConnectorError::write(&path, e))?;
        removed += 1;
    }
    if removed > 0 {
        sync_dir(dir)?;
    }
    Ok(removed)
}

fn committed_files_with_ids(
    dir: &Path,
    name: &str,
) -> Result<Vec<(PathBuf, CheckpointId)>, ConnectorError> {
    let mut files: Vec<_> = list_dir(dir)?
        .into_iter()
        .filter_map(|p| {
            let id = file_name_of(&p).and_then(|n| parse_output_name(n, name))?;
            Some((p, id))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// The checkpoint of `<name>-<task>-<10 digits>.<txt|jsonl>`, if `file` is named so.
fn parse_output_name(file: &str, name: &str) -> Option<CheckpointId> {
    let rest = file.strip_prefix(name)?.strip_prefix('-')?;
    let (stem, ext) = rest.rsplit_once('.')?;
    if ext != "txt" && ext != "jsonl" {
        return None;
    }
    let (task, digits) = stem.rsplit_once('-')?;
    if task.is_empty() || digits.len() != 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(CheckpointId)
}

/// Regular files directly in `dir`; empty if `dir` does not exist.
fn list_dir(dir: &Path) -> Result<Vec<PathBuf>, ConnectorError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => {
            return Err(ConnectorError::ListOutput {
                path: dir.to_owned(),
                error,
            });
        }
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|error| ConnectorError::ListOutput {
            path: dir.to_owned(),
            error,
        })?;
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            files.push(entry.path());
        }
    }
    Ok(files)
}

fn file_name_of(path: &Path) -> Option<&str> {
    path.file_name().and_then(|n| n.to_str())
}

fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\'])
}

/// Makes the directory entries of `dir` (creations, renames, removals) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), ConnectorError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| ConnectorError::write(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::file::sink::FileSink;
    use crate::connector::record_format::OutputFormat;
    use crate::dataflow::sink::Sink;
    use crate::record::batch::RecordBatch;
    use crate::record::message::Barrier;

    /// Catches: a file sink snapshot written before versions no longer committing
    /// (the type denies unknown fields, so the version must be stripped), or a newer
    /// weir's snapshot committed by guesswork.
    #[test]
    fn snapshot_is_versioned() {
        let old = serde_json::json!({"files": [{
            "staged": ".staging/wc-0-1-0-0000000001.txt",
            "committed": "wc-0-1-0-0000000001.txt",
        }]});
        let what = snapshot_name("sink-0");
        snapshot::assert_versioned(
            &what,
            old.clone(),
            &FileSinkSnapshot {
                files: vec![crate::connector::file::sink::StagedFile {
                    staged: ".staging/wc-0-1-0-0000000001.txt".into(),
                    committed: "wc-0-1-0-0000000001.txt".into(),
                }],
            },
        );
        snapshot::assert_versioned(
            &what,
            serde_json::json!({"files": []}),
            &FileSinkSnapshot::default(),
        );

        // Committed from the old format; refused from a newer one, before any rename.
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("out");
        std::fs::create_dir_all(dir.join(STAGING_DIR)).expect("mkdir");
        std::fs::write(dir.join(".staging/wc-0-1-0-0000000001.txt"), "a\n").expect("stage");
        let committer = FileSinkCommitter::new("sink-0", "wc-0", &dir);
        let mut newer = old.clone();
        newer["v"] = serde_json::json!(2);
        let err = committer
            .commit_files(CheckpointId(1), &[&OperatorSnapshot::new(newer)])
            .expect_err("newer");
        assert_eq!(
            err.to_string(),
            "checkpoint written by a newer weir: file sink sink-0 snapshot version 2, this weir reads up to 1"
        );
        assert!(dir.join(".staging/wc-0-1-0-0000000001.txt").exists());
        committer
            .commit_files(CheckpointId(1), &[&OperatorSnapshot::new(old)])
            .expect("commit the old format");
        assert_eq!(read(&dir.join("wc-0-1-0-0000000001.txt")), "a\n");
    }

    fn batch(values: &[&str]) -> RecordBatch {
        let mut b = RecordBatch::default();
        for v in values {
            b.push(b"k", v.as_bytes(), 1);
        }
        b
    }

    fn barrier(n: u64) -> Barrier {
        Barrier {
            id: CheckpointId(n),
            is_final: false,
        }
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).expect("read")
    }

    /// The sink's snapshot at barrier `n`.
    fn staged(sink: &mut FileSink, n: u64) -> OperatorSnapshot {
        sink.barrier(barrier(n))
            .expect("barrier")
            .expect("snapshot")
    }

    /// Subtask `1-0` of file sink `sink-0` of pipeline `wc-0` writing into `out` under
    /// `tmp`, and its committer.
    fn sink_and_committer(tmp: &Path) -> (PathBuf, FileSink, FileSinkCommitter) {
        let dir = tmp.join("out");
        let sink = FileSink::new("sink-0", "wc-0", "1-0", &dir, OutputFormat::Value).expect("sink");
        let committer = FileSinkCommitter::new("sink-0", "wc-0", &dir);
        (dir, sink, committer)
    }

    #[test]
    fn stage_commit_and_recommit() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (dir, mut sink, committer) = sink_and_committer(tmp.path());

        sink.write(CheckpointId(1), &batch(&["a", "b"]))
            .expect("write");
        let s1 = staged(&mut sink, 1);
        assert_eq!(
            s1.state,
            serde_json::json!({"v": 1, "files": [{
                "staged": ".staging/wc-0-1-0-0000000001.txt",
                "committed": "wc-0-1-0-0000000001.txt",
            }]})
        );
        // Staged, durable, but not visible before the commit.
        assert!(committed_files(&dir, "wc-0").expect("list").is_empty());
        assert_eq!(
            read(&dir.join(".staging/wc-0-1-0-0000000001.txt")),
            "a\nb\n"
        );

        // Checkpoint 2 has no records: no file, nothing to commit.
        let s2 = staged(&mut sink, 2);
        assert_eq!(s2.state, serde_json::json!({"v": 1, "files": []}));

        committer
            .commit_files(CheckpointId(1), &[&s1])
            .expect("commit");
        committer
            .commit_files(CheckpointId(2), &[&s2])
            .expect("commit");
        let committed = committed_files(&dir, "wc-0").expect("list");
        assert_eq!(committed, [dir.join("wc-0-1-0-0000000001.txt")]);
        assert_eq!(read(&committed[0]), "a\nb\n");

        // Redoing a commit after recovery is a no-op.
        committer
            .commit_files(CheckpointId(1), &[&s1])
            .expect("idempotent commit");
        assert_eq!(read(&committed[0]), "a\nb\n");
    }

    /// Checkpoint 3 is staged but never completes: discarded on recovery from 2 (a
    /// committed file of a later checkpoint removed too, another sink's left alone);
    /// its commit cannot be redone then, and a restarted sink stages it again.
    #[test]
    fn a_discard_drops_later_checkpoints_and_a_restarted_sink_stages_them_again() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (dir, mut sink, committer) = sink_and_committer(tmp.path());
        sink.write(CheckpointId(1), &batch(&["a"])).expect("write");
        let s1 = staged(&mut sink, 1);
        committer
            .commit_files(CheckpointId(1), &[&s1])
            .expect("commit");

        sink.write(CheckpointId(3), &batch(&["c"])).expect("write");
        let s3 = staged(&mut sink, 3);
        sink.write(CheckpointId(4), &batch(&["d"])).expect("write");
        sink.close().expect("close");
        std::fs::write(dir.join("wc-0-1-0-0000000007.txt"), "zombie\n").expect("write");
        std::fs::write(
            dir.join(".staging/other-1-0-0000000003.txt"),
            "other sink\n",
        )
        .expect("write");
        committer.discard(CheckpointId(2)).expect("discard");
        assert_eq!(
            list_dir(&dir.join(".staging")).expect("list"),
            [dir.join(".staging/other-1-0-0000000003.txt")]
        );
        assert_eq!(
            committed_files(&dir, "wc-0").expect("list"),
            [dir.join("wc-0-1-0-0000000001.txt")]
        );

        // Both names gone: the commit of 3 cannot be redone, and says which file.
        let err = committer
            .commit_files(CheckpointId(3), &[&s3])
            .expect_err("lost output");
        assert!(err.to_string().contains("wc-0-1-0-0000000003.txt"), "{err}");

        // A restarted sink writes checkpoint 3 again, into a fresh staged file.
        let mut sink =
            FileSink::new("sink-0", "wc-0", "1-0", &dir, OutputFormat::Json).expect("sink");
        sink.write(CheckpointId(3), &batch(&["c"])).expect("write");
        let s3 = staged(&mut sink, 3);
        committer
            .commit_files(CheckpointId(3), &[&s3])
            .expect("commit");
        assert_eq!(
            read(&dir.join("wc-0-1-0-0000000003.jsonl")),
            "{\"key\":\"k\",\"value\":\"c\",\"timestamp\":1}\n"
        );

        assert_eq!(remove_committed(&dir, "wc-0").expect("remove"), 2);
        assert!(committed_files(&dir, "wc-0").expect("list").is_empty());
    }

    #[test]
    fn commit_gathers_every_subtask_and_refuses_bad_snapshots() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        let mut snapshots = Vec::new();
        for task in ["2-0", "2-1"] {
            let mut sink =
                FileSink::new("sink-1", "p-1", task, dir, OutputFormat::Value).expect("sink");
            sink.write(CheckpointId(5), &batch(&[task])).expect("write");
            snapshots.push(
                sink.barrier(barrier(5))
                    .expect("barrier")
                    .expect("snapshot"),
            );
        }
        let committer = FileSinkCommitter::new("sink-1", "p-1", dir);
        committer
            .commit_files(CheckpointId(5), &snapshots.iter().collect::<Vec<_>>())
            .expect("commit");
        assert_eq!(committed_files(dir, "p-1").expect("list").len(), 2);

        let evil = OperatorSnapshot::new(
            serde_json::json!({"files": [{"staged": ".staging/../../x", "committed": "y"}]}),
        );
        assert!(committer.commit_files(CheckpointId(6), &[&evil]).is_err());
        let garbage = OperatorSnapshot::new(serde_json::json!({"nope": 1}));
        assert!(
            committer
                .commit_files(CheckpointId(6), &[&garbage])
                .is_err()
        );
    }

    #[test]
    fn parses_output_names() {
        assert_eq!(
            parse_output_name("wc-0-1-0-0000000012.txt", "wc-0"),
            Some(CheckpointId(12))
        );
        assert_eq!(
            parse_output_name("wc-0-1-0-0000000012.jsonl", "wc-0"),
            Some(CheckpointId(12))
        );
        assert_eq!(parse_output_name("wc-0-1-0-12.txt", "wc-0"), None);
        assert_eq!(parse_output_name("wc-00-1-0-0000000012.txt", "wc-0"), None);
        assert_eq!(parse_output_name("wc-0-0000000012.txt", "wc-0"), None);
    }
}
