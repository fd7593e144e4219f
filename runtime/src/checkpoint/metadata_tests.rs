//! A whole `_metadata` as weir wrote it before snapshots carried versions still reads,
//! and its states decode into their typed forms and restore.

use super::*;
use crate::connector::file::FileSinkCommitter;
use crate::connector::file::sink::FileSinkSnapshot;
use crate::connector::file::source::FilePosition;
use crate::connector::file::{FileSource, FileSourceConfig};
use crate::connector::record_format::InputFormat;
use crate::dataflow::operators::aggregate::AggregateSnapshot;
use crate::record::snapshot;

/// `_metadata` of checkpoint 3 of a pipeline `file source -> aggregate -> file sink`,
/// byte for byte in the layout `CheckpointMetadata::write` produced before versions
/// (pretty JSON, no `"v"` in any state).
const UNVERSIONED_METADATA: &str = r#"{
  "format": 1,
  "pipeline": "wc",
  "id": 3,
  "completed_at_ms": 1764547200000,
  "parallelism": 1,
  "max_parallelism": 128,
  "is_final": false,
  "duration_ms": 14,
  "files_added": 1,
  "bytes_added": 1024,
  "state_bytes": 1240,
  "committed_before": 2,
  "tasks": {
    "src0-0": {
      "source-0": {
        "state": {
          "file": 0,
          "offset": 4,
          "line": 3,
          "name": "in.txt"
        },
        "files_added": 0,
        "bytes_added": 0,
        "state_bytes": 0
      }
    },
    "stage1-0": {
      "sink-0": {
        "state": {
          "files": [
            {
              "staged": ".staging/out-stage1-0-0000000003.txt",
              "committed": "out-stage1-0-0000000003.txt"
            }
          ]
        },
        "files_added": 0,
        "bytes_added": 0,
        "state_bytes": 0
      },
      "step-0": {
        "state": {
          "watermark": 5000,
          "db": {
            "task": "stage1-0",
            "checkpoint_id": 3,
            "shared": [
              {
                "local_name": "000012.sst",
                "shared_name": "stage1-0-a1b2-000012",
                "size": 1024
              }
            ],
            "private": [
              {
                "name": "CURRENT",
                "size": 16
              },
              {
                "name": "MANIFEST-000005",
                "size": 200
              }
            ],
            "stats": {
              "files_added": 1,
              "bytes_added": 1024,
              "private_bytes": 216
            }
          }
        },
        "files_added": 1,
        "bytes_added": 1024,
        "state_bytes": 1240,
        "shared_files": [
          [
            "stage1-0",
            "stage1-0-a1b2-000012"
          ]
        ]
      }
    }
  }
}"#;

/// Catches: any state type, or the metadata around them, no longer reading what an
/// older weir wrote, so that upgrading weir would strand every existing checkpoint.
#[test]
fn metadata_written_before_versions_decodes_and_restores() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let storage = CheckpointStorage::open(tmp.path().join("checkpoints"), "test").expect("storage");
    storage
        .write_metadata(CheckpointId(3), UNVERSIONED_METADATA.as_bytes())
        .expect("write");
    let metadata = CheckpointMetadata::read(&storage, CheckpointId(3)).expect("read");
    assert_eq!(metadata.id, CheckpointId(3));
    assert_eq!(metadata.committed_before, CheckpointId(2));

    // Every state decodes into its typed form.
    let source = metadata.snapshot("src0-0", "source-0").expect("source");
    let position: FilePosition =
        snapshot::decode("file source position", &source.state).expect("file position");
    assert_eq!(
        position,
        FilePosition {
            file: 0,
            offset: 4,
            line: Some(3),
            name: Some("in.txt".into()),
        }
    );
    let aggregate = metadata.snapshot("stage1-0", "step-0").expect("aggregate");
    let state: AggregateSnapshot =
        snapshot::decode("aggregate operator step-0 state", &aggregate.state).expect("aggregate");
    assert_eq!(state.watermark, 5000);
    assert_eq!(state.db.checkpoint_id, CheckpointId(3));
    assert_eq!(state.db.shared.len(), 1);
    assert_eq!(state.db.total_bytes(), aggregate.state_bytes);
    assert_eq!(
        state.db.shared_refs().collect::<Vec<_>>(),
        aggregate.shared_files
    );
    let sink = metadata.snapshot("stage1-0", "sink-0").expect("sink");
    let staged: FileSinkSnapshot =
        snapshot::decode("file sink sink-0 snapshot", &sink.state).expect("sink");
    assert_eq!(staged.files.len(), 1);

    // The source resumes at line 3 of in.txt ...
    let input = tmp.path().join("input");
    std::fs::create_dir_all(&input).expect("mkdir");
    std::fs::write(input.join("in.txt"), "a\nb\nc\nd\n").expect("input");
    let config = FileSourceConfig::new(&input, InputFormat::Lines);
    let mut reader = FileSource::open(&config, 0, 1, Some(&source.state)).expect("restore");
    let mut batch = crate::record::RecordBatch::default();
    crate::dataflow::source::Source::poll(
        &mut reader,
        &mut batch,
        crate::record::BatchLimit::records(10),
    )
    .expect("poll");
    let values: Vec<_> = batch.iter().map(|r| r.value.to_vec()).collect();
    assert_eq!(values, [b"c".to_vec(), b"d".to_vec()]);

    // ... and the sink's staged output of the checkpoint commits.
    let out = tmp.path().join("out");
    std::fs::create_dir_all(out.join(".staging")).expect("mkdir");
    std::fs::write(out.join(".staging/out-stage1-0-0000000003.txt"), "x\n").expect("staged");
    FileSinkCommitter::new("sink-0", "out", &out)
        .commit_files(metadata.id, &metadata.snapshots_of("sink-0"))
        .expect("commit");
    assert!(out.join("out-stage1-0-0000000003.txt").is_file());
}
