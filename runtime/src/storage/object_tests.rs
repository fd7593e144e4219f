//! The object store backend against a real S3-compatible server: the local moto server
//! `scripts/s3/s3.sh up` starts (`make test` does), found through the variables it
//! prints (`AWS_ENDPOINT_URL`, the dummy credentials, `WEIR_S3_BUCKET`). Each test works
//! under a prefix of its own. Without those variables each test fails, saying how to
//! start the server, unless `WEIR_SKIP_S3=1` asks to skip them (the harness always sets
//! the variables).

use std::collections::HashSet;
use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{ObjectStorage, aws_env};
use crate::record::CheckpointId;
use crate::storage::backend::StorageBackend;
use crate::storage::names::OWNER_FILE;
use crate::storage::{CheckpointLocation, CheckpointStorage, Fence, S3Location, StorageError};

/// The pipeline every test's storage belongs to.
const PIPELINE: &str = "wc";

/// The bucket `s3.sh up` creates. Without the server's environment: a failure, or
/// `None` (skip the test) if `WEIR_SKIP_S3=1`.
fn bucket() -> Option<String> {
    let endpoint = std::env::var("AWS_ENDPOINT_URL").ok();
    let bucket = std::env::var("WEIR_S3_BUCKET").ok();
    match (endpoint, bucket) {
        (Some(_), Some(bucket)) => Some(bucket),
        _ if std::env::var("WEIR_SKIP_S3").as_deref() == Ok("1") => {
            eprintln!("\n*** SKIPPED (WEIR_SKIP_S3=1): no S3-compatible server ***\n");
            None
        }
        _ => panic!(
            "no S3-compatible server: AWS_ENDPOINT_URL / WEIR_S3_BUCKET unset; run \
             `eval \"$(bash scripts/s3/s3.sh up)\"` and export its variables first (make test \
             does), or set WEIR_SKIP_S3=1 to skip the object store tests"
        ),
    }
}

/// A prefix no other test (or earlier run: moto lives as long as its process) uses.
fn fresh_location(bucket: &str, test: &str) -> S3Location {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    S3Location {
        bucket: bucket.to_owned(),
        prefix: format!(
            "unit/{test}-{}-{nanos}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ),
    }
}

fn open(location: &S3Location) -> CheckpointStorage {
    CheckpointStorage::open(CheckpointLocation::S3(location.clone()), PIPELINE).expect("open")
}

fn ids(ids: &[u64]) -> Vec<CheckpointId> {
    ids.iter().copied().map(CheckpointId).collect()
}

fn write(path: &Path, bytes: &[u8]) {
    fs::write(path, bytes).expect("write");
}

/// A raw object, put behind the storage's back.
fn put_raw(location: &S3Location, rel: &str, bytes: &'static [u8]) {
    let storage = ObjectStorage::connect(location, &aws_env()).expect("connect");
    let key = storage.key(rel);
    let store = storage.inner.store.clone();
    let put_key = key.clone();
    storage
        .run("write", &put_key, async move {
            object_store::ObjectStoreExt::put(
                store.as_ref(),
                &key,
                object_store::PutPayload::from_static(bytes),
            )
            .await
        })
        .expect("run")
        .expect("put raw object");
}

/// Keys below the prefix, sorted.
fn listing(location: &S3Location) -> Vec<String> {
    let storage = ObjectStorage::connect(location, &aws_env()).expect("connect");
    let root = storage.inner.root.clone();
    let mut keys: Vec<String> = storage
        .list(&root)
        .expect("list")
        .into_iter()
        .map(|meta| storage.relative(&meta.location).join("/"))
        .collect();
    keys.sort();
    keys
}

#[test]
fn metadata_is_a_conditional_put_and_marks_completion() {
    let Some(bucket) = bucket() else { return };
    let location = fresh_location(&bucket, "metadata");
    let storage = open(&location);
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("CURRENT");
    write(&src, b"MANIFEST-000005\n");
    for id in [1, 2] {
        storage
            .put_private(CheckpointId(id), "agg-0", "CURRENT", &src)
            .expect("private");
    }
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
    // Immutable: the conditional put is refused and the first metadata stays.
    match storage.write_metadata(CheckpointId(1), b"again") {
        Err(StorageError::AlreadyComplete {
            checkpoint_id,
            location: url,
        }) => {
            assert_eq!(checkpoint_id, CheckpointId(1));
            assert!(url.ends_with("/chk-0000000001/_metadata"), "{url}");
            assert!(url.starts_with(&format!("s3://{bucket}/")), "{url}");
        }
        other => panic!("a second _metadata must be refused: {other:?}"),
    }
    assert_eq!(
        storage.read_metadata(CheckpointId(1)).expect("read"),
        b"{\"one\":1}"
    );
    assert!(matches!(
        storage.put_private(CheckpointId(1), "agg-0", "CURRENT", &src),
        Err(StorageError::AlreadyComplete { .. })
    ));

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
fn discard_deletes_metadata_first_and_leaves_nothing() {
    let Some(bucket) = bucket() else { return };
    let location = fresh_location(&bucket, "discard");
    let storage = ObjectStorage::connect(&location, &aws_env())
        .expect("connect")
        .claim(PIPELINE)
        .expect("claim");
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("f");
    write(&src, b"x");
    for name in ["CURRENT", "MANIFEST-000001", "OPTIONS-000003"] {
        storage
            .put_private(CheckpointId(7), "agg-0", name, &src)
            .expect("private");
        storage
            .put_private(CheckpointId(7), "agg-1", name, &src)
            .expect("private");
    }
    storage.write_metadata(CheckpointId(7), b"m7").expect("m7");
    assert!(storage.discard(CheckpointId(7)).expect("discard"));
    let deleted = storage.inner.deleted.lock().expect("log").clone();
    assert_eq!(deleted.len(), 7, "{deleted:?}");
    assert!(
        deleted[0].ends_with("/chk-0000000007/_metadata"),
        "_metadata must go first: {deleted:?}"
    );
    assert!(!storage.is_complete(CheckpointId(7)).expect("complete"));
    assert_eq!(listing(&location), vec![OWNER_FILE.to_owned()]);
}

#[test]
fn put_shared_is_idempotent_and_restores_byte_for_byte() {
    let Some(bucket) = bucket() else { return };
    let location = fresh_location(&bucket, "shared");
    let storage = open(&location);
    let dir = tempfile::tempdir().expect("tempdir");
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
    // Another file under the same name: a no-op (shared files are immutable).
    write(&src, b"other bytes");
    assert_eq!(
        storage
            .put_shared("agg-0", "abc-000007", &src)
            .expect("put again"),
        0
    );
    let dest = dir.path().join("restored.sst");
    assert_eq!(
        storage
            .fetch_shared_into("agg-0", "abc-000007", &dest)
            .expect("fetch"),
        9
    );
    assert_eq!(fs::read(&dest).expect("read"), b"sst bytes");
    // Restoring never overwrites a local file.
    assert!(matches!(
        storage.fetch_shared_into("agg-0", "abc-000007", &dest),
        Err(StorageError::Io { .. })
    ));
    match storage.fetch_shared_into("agg-0", "nope", &dir.path().join("x")) {
        Err(StorageError::MissingFile { location: url }) => {
            assert!(url.ends_with("/shared/agg-0/nope.sst"), "{url}")
        }
        other => panic!("a missing file must be MissingFile: {other:?}"),
    }
    assert!(!dir.path().join("x").exists());
}

/// A file larger than the upload buffer goes up as a multipart upload and comes back
/// whole; a private file restores byte for byte; a task name that is not one plain
/// path component is refused.
#[test]
fn a_multipart_upload_and_a_private_file_restore_whole_and_bad_names_are_refused() {
    let Some(bucket) = bucket() else { return };
    let location = fresh_location(&bucket, "multipart");
    let storage = open(&location);
    let dir = tempfile::tempdir().expect("tempdir");
    let big = dir.path().join("big.sst");
    let bytes: Vec<u8> = (0..(super::UPLOAD_BUFFER + 123_457))
        .map(|i| (i % 251) as u8)
        .collect();
    fs::write(&big, &bytes).expect("write big");
    assert_eq!(
        storage.put_shared("agg-0", "big-1", &big).expect("put big"),
        bytes.len() as u64
    );
    let back = dir.path().join("big-back.sst");
    storage
        .fetch_shared_into("agg-0", "big-1", &back)
        .expect("fetch big");
    assert!(fs::read(&back).expect("read big") == bytes);

    let private = dir.path().join("CURRENT");
    write(&private, b"MANIFEST-000009\n");
    storage
        .put_private(CheckpointId(2), "agg-0", "CURRENT", &private)
        .expect("private");
    let restored = dir.path().join("CURRENT-restored");
    storage
        .fetch_private_into(CheckpointId(2), "agg-0", "CURRENT", &restored)
        .expect("fetch private");
    assert_eq!(fs::read(&restored).expect("read"), b"MANIFEST-000009\n");

    for bad in ["", ".", "..", "a/b", "_metadata", ".hidden"] {
        assert!(
            matches!(
                storage.put_private(CheckpointId(1), bad, "CURRENT", &private),
                Err(StorageError::InvalidName { .. })
            ),
            "task {bad:?} accepted"
        );
    }
}

#[test]
fn gc_keeps_referenced_shared_files_and_in_flight_checkpoints() {
    let Some(bucket) = bucket() else { return };
    let location = fresh_location(&bucket, "gc");
    // No grace period: every unreferenced shared object is old enough to go.
    let storage = open(&location).with_shared_gc_grace(std::time::Duration::ZERO);
    let dir = tempfile::tempdir().expect("tempdir");
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
    let referenced: HashSet<(String, String)> =
        [("agg-0".to_owned(), "b".to_owned())].into_iter().collect();
    let report = storage.gc(&[CheckpointId(4)], &referenced).expect("gc");
    assert_eq!(report.checkpoints_removed, ids(&[1, 2, 3]));
    assert_eq!(report.shared_files_removed, 3);
    assert_eq!(report.shared_bytes_removed, 30);
    assert_eq!(storage.checkpoint_ids().expect("ids"), ids(&[4, 5]));
    assert_eq!(
        listing(&location),
        vec![
            OWNER_FILE.to_owned(),
            "chk-0000000004/_metadata".to_owned(),
            "chk-0000000004/agg-0/CURRENT".to_owned(),
            "chk-0000000005/agg-0/CURRENT".to_owned(),
            "shared/agg-0/b.sst".to_owned(),
        ]
    );
}

#[test]
fn a_fenced_storage_refuses_every_write_but_still_reads() {
    let Some(bucket) = bucket() else { return };
    let location = fresh_location(&bucket, "fence");
    let storage = open(&location);
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("f");
    write(&src, b"x");
    storage.write_metadata(CheckpointId(1), b"m1").expect("m1");
    let fence = Fence::default();
    let storage = storage.with_fence(fence.clone());
    storage
        .put_shared("agg-0", "a", &src)
        .expect("not fenced yet");
    fence.raise("another instance owns the pipeline");
    let before = listing(&location);
    let fenced = |r: Result<(), StorageError>| match r {
        Err(StorageError::Fenced { root, reason }) => {
            assert_eq!(root, location.to_string());
            assert_eq!(reason, "another instance owns the pipeline");
            true
        }
        _ => false,
    };
    assert!(fenced(storage.put_shared("agg-0", "b", &src).map(|_| ())));
    assert!(fenced(
        storage
            .put_private(CheckpointId(2), "agg-0", "CURRENT", &src)
            .map(|_| ())
    ));
    assert!(fenced(storage.write_metadata(CheckpointId(2), b"m2")));
    assert!(fenced(storage.discard(CheckpointId(1)).map(|_| ())));
    assert!(fenced(storage.gc(&[], &HashSet::new()).map(|_| ())));
    assert_eq!(listing(&location), before, "a fenced storage wrote");
    assert_eq!(storage.read_metadata(CheckpointId(1)).expect("read"), b"m1");
    assert_eq!(storage.complete_checkpoints().expect("list"), ids(&[1]));
}

#[test]
fn only_weirs_own_prefixes_are_opened_and_emptied() {
    let Some(bucket) = bucket() else { return };
    // Someone else's prefix: refused, and nothing in it is touched.
    let theirs = fresh_location(&bucket, "theirs");
    put_raw(&theirs, "thesis.tex", b"years of work");
    for refused in [
        CheckpointStorage::open(CheckpointLocation::S3(theirs.clone()), PIPELINE).map(|_| ()),
        CheckpointStorage::remove_all(CheckpointLocation::S3(theirs.clone()), PIPELINE),
        CheckpointStorage::open_read_only(CheckpointLocation::S3(theirs.clone())).map(|_| ()),
    ] {
        match refused {
            Err(StorageError::NotOurs { entry, root }) => {
                assert_eq!(entry, "thesis.tex");
                assert_eq!(root, theirs.to_string());
            }
            other => panic!("must be refused: {other:?}"),
        }
    }
    assert_eq!(listing(&theirs), vec!["thesis.tex".to_owned()]);

    // Ours: marked on open; emptied of checkpoints and shared files only.
    let ours = fresh_location(&bucket, "ours");
    let storage = open(&ours);
    assert_eq!(listing(&ours), vec![OWNER_FILE.to_owned()]);
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("f");
    write(&src, b"x");
    storage.put_shared("agg-0", "a", &src).expect("shared");
    storage.write_metadata(CheckpointId(1), b"m1").expect("m1");
    put_raw(&ours, "notes.txt", b"left by a user later");
    // A worker's own location below the prefix is Weir's, and a storage of its own:
    // listed as a child, left alone by the root's remove_all.
    let root = CheckpointLocation::S3(ours.clone());
    let worker = CheckpointStorage::open(root.child("worker-1-of-3"), PIPELINE).expect("worker");
    worker.write_metadata(CheckpointId(4), b"m4").expect("m4");
    CheckpointStorage::open_read_only(root.clone()).expect("a prefix with workers is Weir's");
    assert_eq!(
        CheckpointStorage::child_names(&root).expect("children"),
        vec!["chk-0000000001", "shared", "worker-1-of-3"]
    );
    CheckpointStorage::remove_all(root, PIPELINE).expect("remove");
    assert_eq!(
        listing(&ours),
        vec![
            OWNER_FILE.to_owned(),
            "notes.txt".to_owned(),
            "worker-1-of-3/.weir-checkpoints".to_owned(),
            "worker-1-of-3/chk-0000000004/_metadata".to_owned(),
        ]
    );

    // An older Weir's storage (no marker, only Weir's names) is adopted.
    let old = fresh_location(&bucket, "old");
    put_raw(&old, "chk-0000000003/_metadata", b"m3");
    put_raw(&old, "shared/agg-0/x.sst", b"x");
    let storage = open(&old);
    assert!(listing(&old).contains(&OWNER_FILE.to_owned()));
    assert_eq!(storage.complete_checkpoints().expect("ids"), ids(&[3]));
}

#[test]
fn bad_configuration_is_a_clear_error_not_a_panic_or_a_hang() {
    let Some(bucket) = bucket() else { return };
    let env = aws_env();
    let without = |names: &[&str]| -> Vec<(String, String)> {
        env.iter()
            .filter(|(k, _)| !names.contains(&k.as_str()))
            .cloned()
            .collect()
    };
    let with = |name: &str, value: &str| -> Vec<(String, String)> {
        let mut env = without(&[name]);
        env.push((name.to_owned(), value.to_owned()));
        env
    };
    let location = fresh_location(&bucket, "config");
    let config_error =
        |env: &[(String, String)], location: &S3Location| match ObjectStorage::connect(
            location, env,
        )
        .and_then(|storage| storage.claim(PIPELINE))
        {
            Err(StorageError::Config { url, reason }) => {
                assert!(
                    url.starts_with(&format!("s3://{}", location.bucket)),
                    "{url}"
                );
                reason
            }
            other => panic!("must be a configuration error: {other:?}"),
        };

    let reason = config_error(
        &without(&["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]),
        &location,
    );
    assert!(reason.starts_with("no credentials"), "{reason}");
    let reason = config_error(&without(&["AWS_SECRET_ACCESS_KEY"]), &location);
    assert!(reason.contains("AWS_SECRET_ACCESS_KEY is not"), "{reason}");

    let missing = S3Location {
        bucket: format!("weir-no-such-bucket-{}", std::process::id()),
        prefix: "p".into(),
    };
    let reason = config_error(&env, &missing);
    assert!(reason.contains("does not exist"), "{reason}");

    // Nothing listens on port 1: connection refused, bounded retries, then an error.
    let started = std::time::Instant::now();
    let reason = config_error(&with("AWS_ENDPOINT_URL", "http://127.0.0.1:1"), &location);
    assert!(reason.contains("cannot reach the bucket"), "{reason}");
    let took = started.elapsed();
    eprintln!("unreachable endpoint refused after {took:?}");
    // Bounded, not a hang: its claim. Refused connections are retried with short
    // backoffs, so this ends in seconds; a minute leaves room for a slow machine.
    assert!(took < std::time::Duration::from_secs(60), "took {took:?}");
    // Nothing was written by the refused attempts.
    assert!(listing(&location).is_empty());
}

#[test]
fn callable_from_inside_a_tokio_runtime_of_either_flavour() {
    let Some(bucket) = bucket() else { return };
    let location = fresh_location(&bucket, "in-runtime");
    let storage = open(&location);
    storage.write_metadata(CheckpointId(1), b"m1").expect("m1");
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let in_current = current.block_on(async { storage.read_metadata(CheckpointId(1)) });
    assert_eq!(in_current.expect("read"), b"m1");
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let moved = storage.clone();
    let in_worker = multi
        .block_on(async move { tokio::spawn(async move { moved.complete_checkpoints() }).await })
        .expect("join");
    assert_eq!(in_worker.expect("list"), ids(&[1]));
    // The last clone dropped inside an async context: no panic.
    current.block_on(async move { drop(storage) });
}

#[test]
fn gc_keeps_a_fresh_unreferenced_shared_object() {
    // Another instance's upload for a checkpoint in flight: no metadata names it yet.
    let Some(bucket) = bucket() else { return };
    let location = fresh_location(&bucket, "gc-fresh");
    let storage = open(&location);
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("f");
    write(&src, b"0123456789");
    storage.put_shared("agg-0", "fresh", &src).expect("shared");
    let report = storage.gc(&[], &HashSet::new()).expect("gc");
    assert_eq!(report.shared_files_removed, 0, "{report:?}");
    assert!(storage.has_shared("agg-0", "fresh").expect("has"));
}

#[test]
fn a_retried_metadata_put_that_landed_is_success() {
    // The client retried a PUT whose first attempt was stored: the object is ours.
    let Some(bucket) = bucket() else { return };
    let location = fresh_location(&bucket, "metadata-retry");
    let storage = open(&location);
    put_raw(&location, "chk-0000000001/_metadata", b"{\"one\":1}");
    storage
        .write_metadata(CheckpointId(1), b"{\"one\":1}")
        .expect("the same bytes are our own earlier attempt");
    put_raw(&location, "chk-0000000002/_metadata", b"{\"two\":2}");
    assert!(matches!(
        storage.write_metadata(CheckpointId(2), b"{\"two\":\"other\"}"),
        Err(StorageError::AlreadyComplete { .. })
    ));
    assert_eq!(
        storage.read_metadata(CheckpointId(2)).expect("read"),
        b"{\"two\":2}"
    );
}

#[test]
fn remove_all_deletes_every_metadata_first() {
    let Some(bucket) = bucket() else { return };
    let location = fresh_location(&bucket, "remove-order");
    let storage = ObjectStorage::connect(&location, &aws_env())
        .expect("connect")
        .claim(PIPELINE)
        .expect("claim");
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("f");
    write(&src, b"x");
    storage.put_shared("agg-0", "a", &src).expect("shared");
    for id in [1, 2, 3] {
        for name in ["CURRENT", "MANIFEST-000001"] {
            storage
                .put_private(CheckpointId(id), "agg-0", name, &src)
                .expect("private");
        }
        storage.write_metadata(CheckpointId(id), b"m").expect("m");
    }
    storage.remove_everything(PIPELINE).expect("remove");
    let deleted = storage.inner.deleted.lock().expect("log").clone();
    assert_eq!(deleted.len(), 3 + 6 + 1, "{deleted:?}");
    assert!(
        deleted[..3].iter().all(|key| key.ends_with("/_metadata")),
        "every _metadata must go first: {deleted:?}"
    );
    assert_eq!(listing(&location), vec![OWNER_FILE.to_owned()]);
}

#[test]
fn a_prefix_belongs_to_one_pipeline() {
    let Some(bucket) = bucket() else { return };
    let location = fresh_location(&bucket, "owner");
    let s3 = || CheckpointLocation::S3(location.clone());
    let storage = open(&location);
    storage.write_metadata(CheckpointId(1), b"m1").expect("m1");
    CheckpointStorage::open(s3(), PIPELINE).expect("the same pipeline reopens it");
    let before = listing(&location);
    for refused in [
        CheckpointStorage::open(s3(), "other").map(|_| ()),
        CheckpointStorage::remove_all(s3(), "other"),
    ] {
        match refused {
            Err(e @ StorageError::OtherPipeline(_)) => {
                let line = e.to_string();
                assert!(
                    line.contains(&location.to_string())
                        && line.contains("\"wc\"")
                        && line.contains("\"other\""),
                    "{line}"
                );
            }
            other => panic!("another pipeline must be refused: {other:?}"),
        }
    }
    assert_eq!(listing(&location), before, "the refused pipeline wrote");
    assert_eq!(storage.complete_checkpoints().expect("list"), ids(&[1]));

    // An older Weir's marker names no pipeline: the first opener adopts it.
    let old = fresh_location(&bucket, "owner-old");
    put_raw(&old, OWNER_FILE, b"weir checkpoint storage\n");
    CheckpointStorage::open(CheckpointLocation::S3(old.clone()), "first").expect("adopted");
    assert!(matches!(
        CheckpointStorage::open(CheckpointLocation::S3(old.clone()), "second"),
        Err(StorageError::OtherPipeline(_))
    ));
}

#[test]
fn a_read_only_open_writes_nothing() {
    let Some(bucket) = bucket() else { return };
    let location = fresh_location(&bucket, "read-only");
    let storage =
        CheckpointStorage::open_read_only(CheckpointLocation::S3(location.clone())).expect("open");
    assert!(storage.complete_checkpoints().expect("list").is_empty());
    assert!(listing(&location).is_empty(), "a read-only open wrote");
}
