//! The local backend through `CheckpointStorage`: the storage invariants on a real
//! directory in a temp dir (the same cases run against an S3-compatible server in
//! `object_tests`).

use std::collections::HashSet;
use std::fs;
use std::path::Path;

use crate::record::CheckpointId;
use crate::storage::names::OWNER_FILE;
use crate::storage::{CheckpointStorage, Fence, StorageError};

/// The pipeline every test's storage belongs to.
const PIPELINE: &str = "wc";

fn ids(ids: &[u64]) -> Vec<CheckpointId> {
    ids.iter().copied().map(CheckpointId).collect()
}

fn storage() -> (tempfile::TempDir, CheckpointStorage) {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = CheckpointStorage::open(dir.path().join("checkpoints"), PIPELINE).expect("open");
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
    assert!(
        storage
            .local_root()
            .join("shared/agg-0/abc-000007.sst")
            .is_file()
    );

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
    let leftovers: Vec<_> = fs::read_dir(storage.local_root().join("chk-0000000001"))
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
        CheckpointStorage::open(&theirs, PIPELINE).map(|_| ()),
        CheckpointStorage::remove_all(&theirs, PIPELINE),
        CheckpointStorage::open_read_only(&theirs).map(|_| ()),
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
    let storage = CheckpointStorage::open(&ours, PIPELINE).expect("open");
    assert!(ours.join(OWNER_FILE).exists());
    let src = dir.path().join("f");
    write(&src, b"x");
    storage.put_shared("agg-0", "a", &src).expect("shared");
    storage.write_metadata(CheckpointId(1), b"m1").expect("m1");
    write(&ours.join("notes.txt"), b"left by a user later");
    // A worker's own location below the root is Weir's, and a storage of its own.
    let worker = CheckpointStorage::open(ours.join("worker-1-of-3"), PIPELINE).expect("worker");
    worker.write_metadata(CheckpointId(4), b"m4").expect("m4");
    CheckpointStorage::open_read_only(&ours).expect("a root with workers is Weir's");
    assert_eq!(
        CheckpointStorage::child_names(&ours.clone().into()).expect("children"),
        vec!["chk-0000000001", "shared", "worker-1-of-3"]
    );
    CheckpointStorage::remove_all(&ours, PIPELINE).expect("remove");
    let mut left: Vec<String> = fs::read_dir(&ours)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        vec![
            OWNER_FILE.to_owned(),
            "notes.txt".to_owned(),
            "worker-1-of-3".to_owned()
        ]
    );
    assert_eq!(
        worker.complete_checkpoints().expect("list"),
        vec![CheckpointId(4)]
    );

    // An older Weir's storage (no mark, only Weir's names) is adopted.
    let old = dir.path().join("old");
    fs::create_dir_all(old.join("shared")).expect("mkdir");
    fs::create_dir_all(old.join("chk-0000000003")).expect("mkdir");
    CheckpointStorage::open(&old, PIPELINE).expect("adopted");
    assert!(old.join(OWNER_FILE).exists());
    CheckpointStorage::remove_all(dir.path().join("missing").as_path(), PIPELINE)
        .expect("missing is fine");
}

#[test]
fn a_directory_belongs_to_one_pipeline() {
    let (dir, storage) = storage();
    let root = storage.local_root().to_path_buf();
    storage.write_metadata(CheckpointId(1), b"m1").expect("m1");
    // The same pipeline opens it again; another is refused, naming both, and can
    // neither write the marker nor empty the directory.
    CheckpointStorage::open(&root, PIPELINE).expect("reopen");
    let marker = fs::read(root.join(OWNER_FILE)).expect("marker");
    for refused in [
        CheckpointStorage::open(&root, "other").map(|_| ()),
        CheckpointStorage::remove_all(&root, "other"),
    ] {
        match refused {
            Err(e @ StorageError::OtherPipeline(_)) => {
                let line = e.to_string();
                assert!(
                    line.contains("\"wc\"") && line.contains("\"other\""),
                    "{line}"
                );
            }
            other => panic!("another pipeline must be refused: {other:?}"),
        }
    }
    assert_eq!(fs::read(root.join(OWNER_FILE)).expect("marker"), marker);
    assert_eq!(storage.complete_checkpoints().expect("list"), ids(&[1]));

    // An older Weir's marker (naming no pipeline) is adopted by the first opener.
    let old = dir.path().join("old");
    fs::create_dir(&old).expect("mkdir");
    write(&old.join(OWNER_FILE), b"weir checkpoint storage\n");
    CheckpointStorage::open(&old, "first").expect("adopted");
    assert!(matches!(
        CheckpointStorage::open(&old, "second"),
        Err(StorageError::OtherPipeline(_))
    ));
}

#[test]
fn a_read_only_open_creates_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing");
    let storage = CheckpointStorage::open_read_only(&missing).expect("open");
    assert!(storage.complete_checkpoints().expect("list").is_empty());
    assert!(!missing.exists());

    let empty = dir.path().join("empty");
    fs::create_dir(&empty).expect("mkdir");
    let storage = CheckpointStorage::open_read_only(&empty).expect("open");
    assert!(storage.checkpoint_ids().expect("ids").is_empty());
    assert_eq!(fs::read_dir(&empty).expect("list").count(), 0);
}

#[test]
fn stray_directories_are_not_checkpoints() {
    let (_dir, storage) = storage();
    for name in ["chk-1", "chk-abc", "chk-", "other"] {
        fs::create_dir(storage.local_root().join(name)).expect("mkdir");
    }
    assert!(storage.checkpoint_ids().expect("ids").is_empty());
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
    assert!(!storage.local_root().join("shared/agg-1").exists());
}
