//! Tests of `KeyedState` with its checkpoint storage: cache and eviction, merged scans,
//! snapshot and restore, incremental uploads, lineage-unique shared names, GC.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use crate::record::CheckpointId;
use crate::state::{CacheBounds, DbSnapshot, KeyedState, StateKey};
use crate::storage::CheckpointStorage;

type Contents = BTreeMap<Vec<u8>, Vec<u8>>;

/// Cache capacity of the tests that do not test eviction, in entries.
const CACHE: usize = 1_000;

fn contents(state: &KeyedState) -> Contents {
    state
        .scan()
        .expect("scan")
        .map(|entry| entry.expect("scan"))
        .collect()
}

fn key(user: &str, window_end: Option<i64>) -> Vec<u8> {
    StateKey::encode(1, user.as_bytes(), window_end)
}

fn put_all(state: &mut KeyedState, entries: &[(&str, &str)]) {
    for (k, v) in entries {
        state.put(&key(k, None), v.as_bytes()).expect("put");
    }
}

fn open(dir: &Path, name: &str) -> KeyedState {
    KeyedState::open_fresh(dir.join(name), CACHE).expect("open")
}

fn storage(dir: &Path) -> Arc<CheckpointStorage> {
    Arc::new(CheckpointStorage::open(dir.join("checkpoints"), "test").expect("storage"))
}

#[test]
fn state_is_send() {
    fn assert_send<T: Send>() {}
    assert_send::<KeyedState>();
    assert_send::<crate::state::SnapshotInProgress>();
}

#[test]
fn state_cache_evicts_least_recently_used_then_serves_from_rocksdb() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut state = KeyedState::open_fresh(dir.path().join("agg"), 2).expect("open");
    let (a, b, c) = (key("a", Some(10)), key("b", Some(10)), key("c", Some(10)));

    state.put(&a, b"1").expect("put");
    state.put(&b, b"2").expect("put");
    assert_eq!((state.len_cached(), state.len_dirty()), (2, 2));
    // Over the bound: adding c writes back the least recently used entry (a) and drops
    // it; b stays cached and dirty.
    state.put(&c, b"3").expect("put");
    assert_eq!((state.len_cached(), state.len_dirty()), (2, 2));

    assert_eq!(
        state.get(&a).expect("get"),
        Some(&b"1"[..]),
        "served from RocksDB"
    );
    assert_eq!(
        state.get(&c).expect("get"),
        Some(&b"3"[..]),
        "served from the cache"
    );
    assert!(state.len_cached() <= 2);

    // A deletion is remembered as a tombstone, also across an eviction.
    state.delete(&a).expect("delete");
    assert_eq!(state.get(&a).expect("get"), None);
    state.get(&b).expect("get"); // evicts c (least recently used)
    state.get(&c).expect("get"); // evicts a: writes the tombstone
    assert_eq!(
        state.get(&a).expect("get"),
        None,
        "tombstone reached RocksDB"
    );
    assert_eq!(state.get(&key("never", None)).expect("get"), None);

    state.flush().expect("flush");
    assert_eq!(state.len_dirty(), 0);
    let expected: Contents = [(b.clone(), b"2".to_vec()), (c.clone(), b"3".to_vec())].into();
    assert_eq!(contents(&state), expected);
}

/// Issue 7 §2: the cache is bounded in bytes, not only entries. 4 MiB of accumulators
/// (400 keys x 10 KiB) through a 256 KiB cache: it never holds more than 256 KiB, evicts
/// only part of itself at a time, and loses no write.
#[test]
fn state_cache_is_bounded_in_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bounds = crate::state::CacheBounds {
        entries: 100_000,
        bytes: 256 << 10,
        memtable_bytes: crate::state::memtable_bytes(1),
    };
    let mut state = KeyedState::open_fresh(dir.path().join("agg"), bounds).expect("open");
    let value = |i: u32| vec![(i % 251) as u8; 10 << 10];
    let mut most_cached = 0;
    for i in 0..400u32 {
        let k = key(&format!("k{i}"), None);
        state.put(&k, &value(i)).expect("put");
        assert!(
            state.bytes_cached() <= 256 << 10,
            "{} bytes cached",
            state.bytes_cached()
        );
        most_cached = most_cached.max(state.len_cached());
        // Not "flush everything and empty": an eviction keeps the recent 7/8.
        if i > 30 {
            assert!(
                state.len_cached() >= 20,
                "{} entries after key {i}",
                state.len_cached()
            );
        }
    }
    assert!(most_cached >= 24, "{most_cached}");
    for i in (0..400u32).rev() {
        let k = key(&format!("k{i}"), None);
        assert_eq!(state.get(&k).expect("get"), Some(&value(i)[..]), "key {i}");
        assert!(state.bytes_cached() <= 256 << 10);
    }
}

#[test]
fn state_scan_merges_cache_over_rocksdb_in_key_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut state = open(dir.path(), "agg");
    put_all(&mut state, &[("a", "db-a"), ("b", "db-b"), ("d", "db-d")]);
    state.flush().expect("flush");
    // Cache over RocksDB: update b, delete d, add c and e (e deleted again: never existed).
    state.put(&key("b", None), b"cache-b").expect("put");
    state.delete(&key("d", None)).expect("delete");
    state.put(&key("c", None), b"cache-c").expect("put");
    state.put(&key("e", None), b"cache-e").expect("put");
    state.delete(&key("e", None)).expect("delete");
    state
        .put(&StateKey::encode(2, b"z", None), b"other group")
        .expect("put");

    let keys: Vec<Vec<u8>> = state
        .scan()
        .expect("scan")
        .map(|e| e.expect("scan").0)
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "key order");
    let group_1: Vec<(String, String)> = state
        .scan_prefix(&StateKey::key_group_prefix(1))
        .expect("scan")
        .map(|e| {
            let (k, v) = e.expect("scan");
            let decoded = StateKey::decode(&k).expect("decode");
            assert_eq!((decoded.key_group, decoded.window_end), (1, None));
            let user = decoded.user_key;
            (
                String::from_utf8_lossy(user).into_owned(),
                String::from_utf8_lossy(&v).into_owned(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [("a", "db-a"), ("b", "cache-b"), ("c", "cache-c")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(group_1, expected);
    assert_eq!(state.scan().expect("scan").count(), 4);
    assert_eq!(state.keys().expect("keys"), keys);
}

#[test]
fn state_snapshot_then_restore_gives_the_same_contents() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = storage(dir.path());
    let mut state = open(dir.path(), "agg-0");
    for i in 0..500_i64 {
        state
            .put(
                &StateKey::encode(
                    (i % 7) as u16,
                    format!("user-{i}").as_bytes(),
                    Some(i * 1000),
                ),
                &[i as u8; 20],
            )
            .expect("put");
    }
    state
        .delete(&StateKey::encode(3, b"user-3", Some(3000)))
        .expect("delete");
    let before = contents(&state);
    assert_eq!(before.len(), 499);

    let snapshot = state
        .snapshot(&storage, CheckpointId(1), "agg-0")
        .expect("snapshot");
    assert!(!snapshot.shared.is_empty());
    assert!(snapshot.private.iter().any(|f| f.name == "CURRENT"));
    assert!(
        snapshot
            .private
            .iter()
            .any(|f| f.name.starts_with("MANIFEST-"))
    );
    assert!(
        !dir.path().join("agg-0/snapshot-0000000001").exists(),
        "temp dir removed"
    );

    // The snapshot survives the metadata round trip.
    let json = serde_json::to_vec(&snapshot).expect("serialize");
    let snapshot: DbSnapshot = serde_json::from_slice(&json).expect("deserialize");

    // Writes after the snapshot are not in it.
    state.put(&key("later", None), b"x").expect("put");
    state.flush().expect("flush");
    drop(state);

    let mut restored = KeyedState::restore(
        dir.path().join("agg-0-restored"),
        &storage,
        &snapshot,
        CACHE,
    )
    .expect("restore");
    assert_eq!(restored.len_cached(), 0);
    assert_eq!(contents(&restored), before);
    assert_eq!(
        restored
            .get(&StateKey::encode(1, b"user-1", Some(1000)))
            .expect("get"),
        Some(&[1_u8; 20][..])
    );
    assert_eq!(restored.get(&key("later", None)).expect("get"), None);

    // Restoring over an existing work dir replaces it.
    drop(restored);
    let again = KeyedState::restore(
        dir.path().join("agg-0-restored"),
        &storage,
        &snapshot,
        CACHE,
    )
    .expect("restore again");
    assert_eq!(contents(&again), before);
}

#[test]
fn state_snapshots_are_incremental() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = storage(dir.path());
    let mut state = open(dir.path(), "agg-0");
    put_all(&mut state, &[("a", "1"), ("b", "2")]);

    let first = state
        .snapshot(&storage, CheckpointId(1), "agg-0")
        .expect("snapshot 1");
    assert_eq!(first.stats.files_added, 1);
    assert!(first.stats.bytes_added > 0);
    assert!(first.stats.private_bytes > 0);

    // Nothing changed (reads do not count): no SST added.
    state.get(&key("a", None)).expect("get");
    let second = state
        .snapshot(&storage, CheckpointId(2), "agg-0")
        .expect("snapshot 2");
    assert_eq!(second.stats.files_added, 0);
    assert_eq!(second.stats.bytes_added, 0);
    assert_eq!(second.shared, first.shared);

    // A change: exactly one new SST, the old one reused under its shared name.
    put_all(&mut state, &[("c", "3")]);
    let third = state
        .snapshot(&storage, CheckpointId(3), "agg-0")
        .expect("snapshot 3");
    assert_eq!(third.stats.files_added, 1);
    assert_eq!(third.shared.len(), 2);
    assert!(third.shared.contains(&first.shared[0]));
    let new_file = third
        .shared
        .iter()
        .find(|f| !first.shared.contains(f))
        .expect("new sst");
    assert_eq!(third.stats.bytes_added, new_file.size);

    // After a restore, the next checkpoint uploads only what is new since.
    drop(state);
    let mut restored =
        KeyedState::restore(dir.path().join("agg-0b"), &storage, &third, CACHE).expect("restore");
    let fourth = restored
        .snapshot(&storage, CheckpointId(4), "agg-0")
        .expect("snapshot 4");
    assert_eq!(fourth.stats.files_added, 0);
    assert_eq!(fourth.shared, third.shared);
    put_all(&mut restored, &[("d", "4")]);
    let fifth = restored
        .snapshot(&storage, CheckpointId(5), "agg-0")
        .expect("snapshot 5");
    assert_eq!(fifth.stats.files_added, 1);
}

#[test]
fn state_restore_from_older_checkpoint_never_reuses_a_discarded_newer_ones_files() {
    // Run 1 checkpoints 1..=DISCARDED; recovery goes back to 1 and discards the newer ones
    // (say, their Kafka transactions aborted), whose SSTs stay in shared storage until GC.
    // The restored DB numbers its SSTs from checkpoint 1's MANIFEST, so it creates local
    // names run 1 already used for other bytes: their shared names must differ.
    const DISCARDED: u64 = 20;
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = storage(dir.path());
    let mut state = open(dir.path(), "run-1");
    put_all(&mut state, &[("x", "1")]);
    let c1 = state
        .snapshot(&storage, CheckpointId(1), "agg-0")
        .expect("c1");
    let mut discarded = HashMap::new();
    for id in 2..=DISCARDED {
        put_all(&mut state, &[("x", "discarded")]);
        let snapshot = state
            .snapshot(&storage, CheckpointId(id), "agg-0")
            .expect("snapshot");
        for file in snapshot.shared {
            discarded.insert(file.local_name, file.shared_name);
        }
    }
    drop(state);
    for id in 2..=DISCARDED {
        storage.discard(CheckpointId(id)).expect("discard");
    }

    let mut state =
        KeyedState::restore(dir.path().join("run-2"), &storage, &c1, CACHE).expect("restore");
    put_all(&mut state, &[("x", "after recovery")]);
    let next = CheckpointId(DISCARDED + 1);
    let after = state.snapshot(&storage, next, "agg-0").expect("snapshot");
    drop(state);
    assert_eq!(after.stats.files_added, 1);

    let new_file = after
        .shared
        .iter()
        .find(|f| !c1.shared.contains(f))
        .expect("a new SST");
    // The case tested: the restored DB numbers its new SST below what run 1 had reached, so
    // the name was (or could have been) run 1's. Which of run 1's numbers were ever uploaded
    // depends on background compaction timing, so compare with every discarded upload.
    let number = |name: &str| -> u64 {
        name.trim_end_matches(".sst")
            .parse()
            .expect("an SST number")
    };
    let highest_discarded = discarded.keys().map(|n| number(n)).max().expect("files");
    assert!(
        number(&new_file.local_name) < highest_discarded,
        "RocksDB reuses the discarded lineage's SST numbers ({} against {highest_discarded})",
        new_file.local_name
    );
    assert!(
        !discarded
            .values()
            .any(|shared| *shared == new_file.shared_name),
        "{} was uploaded under a discarded checkpoint's shared name {}",
        new_file.local_name,
        new_file.shared_name
    );

    let restored =
        KeyedState::restore(dir.path().join("run-3"), &storage, &after, CACHE).expect("restore");
    let expected: Contents = [(key("x", None), b"after recovery".to_vec())].into();
    assert_eq!(contents(&restored), expected);
}

#[test]
fn state_gc_keeps_what_kept_checkpoints_reference() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = storage(dir.path());
    let mut state = open(dir.path(), "agg-0");
    let mut snapshots = Vec::new();
    for (id, value) in [(1, "1"), (2, "2"), (3, "3")] {
        put_all(&mut state, &[(value, value)]);
        let snapshot = state
            .snapshot(&storage, CheckpointId(id), "agg-0")
            .expect("snapshot");
        storage
            .write_metadata(
                CheckpointId(id),
                &serde_json::to_vec(&snapshot).expect("json"),
            )
            .expect("metadata");
        snapshots.push(snapshot);
    }
    // A 4th checkpoint in flight: files uploaded, no metadata yet.
    put_all(&mut state, &[("4", "4")]);
    state
        .begin_snapshot(storage.clone(), CheckpointId(4), "agg-0")
        .expect("begin")
        .wait()
        .expect("upload");
    drop(state);

    let keep = [CheckpointId(2), CheckpointId(3)];
    let mut referenced = HashSet::new();
    for id in keep {
        let bytes = storage.read_metadata(id).expect("read");
        let snapshot: DbSnapshot = serde_json::from_slice(&bytes).expect("parse");
        referenced.extend(snapshot.shared_refs());
    }
    let report = storage.gc(&keep, &referenced).expect("gc");
    assert_eq!(report.checkpoints_removed, vec![CheckpointId(1)]);
    assert_eq!(
        storage.checkpoint_ids().expect("ids"),
        vec![CheckpointId(2), CheckpointId(3), CheckpointId(4)]
    );

    for snapshot in &snapshots[1..] {
        let work = dir
            .path()
            .join(format!("restore-{}", snapshot.checkpoint_id));
        let restored = KeyedState::restore(&work, &storage, snapshot, CACHE).expect("restore kept");
        assert_eq!(contents(&restored).len() as u64, snapshot.checkpoint_id.0);
    }
}

/// Reads see every write whatever the writer thread has applied yet, and a snapshot holds
/// exactly the state at its barrier while the task writes on: a tiny cache makes most
/// reads of recently evicted keys go to write-backs still in flight. Writes are blind or
/// after a read, deletes of keys RocksDB holds or not.
#[test]
fn state_reads_and_snapshots_agree_with_a_model_under_constant_eviction() {
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = storage(dir.path());
    let mut state = KeyedState::open_fresh(dir.path().join("agg"), 16).expect("open");
    let mut model: Contents = BTreeMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut at_barrier = Vec::new();
    for step in 0..20_000u32 {
        let k = key(&format!("k{}", rng.random_range(0..300)), None);
        let op = rng.random_range(0..10);
        if op <= 4 && rng.random_range(0..2) == 0 {
            // A write after a read, as the aggregate writes: the cache knows whether
            // RocksDB may hold the key (a delete of one it cannot hold writes nothing).
            state.get(&k).expect("get");
        }
        match op {
            0 => {
                state.delete(&k).expect("delete");
                model.remove(&k);
            }
            1..=4 => {
                let v = step.to_be_bytes().to_vec();
                state.put(&k, &v).expect("put");
                model.insert(k, v);
            }
            9 => {
                // More keys than the cache holds: prefetch evicts what it just read.
                let keys: Vec<Vec<u8>> = (0..40)
                    .map(|_| key(&format!("k{}", rng.random_range(0..300)), None))
                    .collect();
                let keys: BTreeSet<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                let hashed: Vec<_> = keys.iter().map(|k| (state.key_hash(k), *k)).collect();
                state.prefetch(hashed, &mut Vec::new()).expect("prefetch");
            }
            _ => assert_eq!(
                state.get(&k).expect("get"),
                model.get(&k).map(Vec::as_slice),
                "step {step}"
            ),
        }
        if step % 5_000 == 4_999 {
            let id = CheckpointId(u64::from(step / 5_000) + 1);
            let upload = state
                .begin_snapshot(storage.clone(), id, "agg-0")
                .expect("begin");
            at_barrier.push((upload, model.clone()));
        }
    }
    assert_eq!(contents(&state), model);
    for (i, (upload, expected)) in at_barrier.into_iter().enumerate() {
        let snapshot = upload.wait().expect("upload");
        let work = dir.path().join(format!("restore-{i}"));
        let restored = KeyedState::restore(&work, &storage, &snapshot, CACHE).expect("restore");
        assert_eq!(contents(&restored), expected, "checkpoint {}", i + 1);
    }
}

/// `prefetch` reads a batch's uncached keys from RocksDB at once and caches them: the
/// `get`s that follow ask RocksDB nothing and return what it holds, absent keys included.
#[test]
fn state_prefetch_caches_a_batch_of_misses_and_reads_agree() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = storage(dir.path());
    let mut written = open(dir.path(), "written");
    let keys: Vec<Vec<u8>> = (0..2_000).map(|i| key(&format!("k{i}"), None)).collect();
    for (i, k) in keys.iter().enumerate() {
        written.put(k, format!("v{i}").as_bytes()).expect("put");
    }
    let snapshot = written
        .snapshot(&storage, CheckpointId(1), "agg-0")
        .expect("snapshot");
    drop(written);
    // Restored: everything in RocksDB, nothing cached, room for all that is read below.
    let mut state =
        KeyedState::restore(dir.path().join("agg"), &storage, &snapshot, 4_096).expect("restore");
    // Cold keys, read one by one: RocksDB is asked for each.
    for k in &keys[..100] {
        state.get(k).expect("get");
    }
    assert_eq!(state.reads_from_db(), 100);
    // A batch of cold keys (every tenth absent), prefetched, then read.
    let batch: Vec<Vec<u8>> = (1_000..1_150)
        .map(|i| match i % 10 {
            0 => key(&format!("absent{i}"), None),
            _ => keys[i].clone(),
        })
        .collect();
    let hashed: Vec<_> = batch
        .iter()
        .map(|k| (state.key_hash(k), k.as_slice()))
        .collect();
    let mut slots = Vec::new();
    state
        .prefetch(hashed.clone(), &mut slots)
        .expect("prefetch");
    assert_eq!(
        state.reads_from_db(),
        batch.len(),
        "one batched read of the misses"
    );
    assert_eq!(slots.len(), batch.len(), "a slot per key, in order");
    for (n, (hash, k)) in hashed.into_iter().enumerate() {
        let i = 1_000 + n;
        let expected = (i % 10 != 0).then(|| format!("v{i}").into_bytes());
        let (value, slot) = state.get_with_slot(slots[n], hash, k).expect("get");
        assert_eq!(value, expected.as_deref(), "key {i}");
        assert_eq!(Some(slot), slots[n], "key {i} is where the prefetch put it");
    }
    assert_eq!(
        state.reads_from_db(),
        batch.len(),
        "every get hit the cache"
    );
}

/// A state opened empty answers a miss without reading RocksDB (the key is absent)
/// until the cache evicts a key RocksDB may hold: a clean one written back before, or a
/// dirty one with a value; a negative lookup or a tombstone leaving changes nothing.
/// Reads stay exact throughout; a restored state reads RocksDB from the start.
#[test]
fn a_fresh_state_reads_rocksdb_only_once_it_has_evicted_a_key_rocksdb_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let k = |name: &str| key(name, None);
    // Each case: the victim's history, in a cache of one entry; the next miss evicts it.
    type Setup = fn(&mut KeyedState, &[u8]);
    let cases: [(&str, Setup, bool); 4] = [
        (
            "a negative lookup",
            |s, v| {
                s.get(v).expect("get");
            },
            false,
        ),
        ("a tombstone", |s, v| s.delete(v).expect("delete"), false),
        ("a dirty value", |s, v| s.put(v, b"1").expect("put"), true),
        (
            "a value written back",
            |s, v| {
                s.put(v, b"1").expect("put");
                s.flush().expect("flush");
            },
            true,
        ),
    ];
    for (n, (history, setup, stored)) in cases.into_iter().enumerate() {
        let mut state = KeyedState::open_fresh(dir.path().join(format!("s{n}")), 1).expect("open");
        let victim = k("victim");
        setup(&mut state, &victim);
        assert_eq!(state.get(&k("other")).expect("get"), None, "{history}");
        assert_eq!(
            state.reads_from_db(),
            0,
            "{history}: the victim was still cached"
        );
        // RocksDB holds every write-back, so a read of the victim would go to it.
        state.flush().expect("flush");
        let expected = stored.then_some(&b"1"[..]);
        assert_eq!(state.get(&victim).expect("get"), expected, "{history}");
        let read = usize::from(stored);
        assert_eq!(
            state.reads_from_db(),
            read,
            "{history}: RocksDB asked once it may hold it"
        );
    }
    let storage = storage(dir.path());
    let mut written = open(dir.path(), "written");
    written.put(&k("a"), b"1").expect("put");
    let snapshot = written
        .snapshot(&storage, CheckpointId(1), "agg-0")
        .expect("snapshot");
    let mut restored =
        KeyedState::restore(dir.path().join("restored"), &storage, &snapshot, 4).expect("restore");
    assert_eq!(restored.get(&k("a")).expect("get"), Some(&b"1"[..]));
    assert_eq!(restored.get(&k("b")).expect("get"), None);
    assert_eq!(
        restored.reads_from_db(),
        2,
        "a restored state reads RocksDB"
    );
}

/// A cache keeps its dirty entries until the barrier (a key updated many times is
/// written once), nearly full or not, unless they are evicted; a barrier that leaves
/// more than it copies at once in a nearly full cache first evicts down to 7/8, so the
/// copy that follows is done before the next eviction would have to finish it at once.
#[test]
fn a_nearly_full_cache_keeps_its_dirty_entries_until_the_barrier_which_makes_room() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = storage(dir.path());
    let capacity = 80_000;
    let mut state = KeyedState::open_fresh(dir.path().join("agg"), capacity).expect("open");
    let mut model = Contents::new();
    for i in 0..75_000 {
        let (k, v) = (key(&format!("k{i}"), None), format!("v{i}").into_bytes());
        state.put(&k, &v).expect("put");
        model.insert(k, v);
    }
    assert_eq!(
        state.len_dirty(),
        75_000,
        "nothing written back between barriers"
    );
    let upload = state
        .begin_snapshot(storage.clone(), CheckpointId(1), "agg-0")
        .expect("begin");
    assert_eq!(state.len_cached(), capacity - capacity / 8, "room made");
    state.finish_snapshot_copy().expect("copy");
    let snapshot = upload.wait().expect("upload");
    assert_eq!(restored(dir.path(), &storage, &snapshot), model);
    assert_eq!(contents(&state), model);
}

/// An entry read as absent, written and deleted between two write-backs (a window that
/// fires before the next checkpoint) never reaches RocksDB, not even as a tombstone;
/// one written back in between gets its tombstone.
#[test]
fn an_entry_created_and_deleted_between_write_backs_never_reaches_rocksdb() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut state = open(dir.path(), "agg");
    let keys: Vec<Vec<u8>> = (0..100)
        .map(|i| key(&format!("k{i}"), Some(60_000)))
        .collect();
    let create_and_delete = |state: &mut KeyedState, flush_between: bool| {
        for k in &keys {
            assert_eq!(state.get(k).expect("get"), None);
            state.put(k, b"1").expect("put");
        }
        if flush_between {
            state.flush().expect("flush");
        }
        for k in &keys {
            state.delete(k).expect("delete");
        }
        state.flush().expect("flush");
    };
    create_and_delete(&mut state, false);
    assert_eq!(state.memtable_entries(), 0, "no put, no tombstone");
    create_and_delete(&mut state, true);
    assert_eq!(
        state.memtable_entries(),
        200,
        "the puts, then their tombstones"
    );
    assert!(contents(&state).is_empty());
}

/// More dirty entries than a barrier copies at once (65,536).
const DEFERRED: usize = 70_000;

/// A state with `DEFERRED` dirty entries `d{i}` = `v{i}`, and its model.
fn many_dirty(dir: &Path, cache: CacheBounds) -> (KeyedState, Contents) {
    let mut state = KeyedState::open_fresh(dir.join("agg"), cache).expect("open");
    let mut model = Contents::new();
    for i in 0..DEFERRED {
        let (k, v) = (key(&format!("d{i}"), None), format!("v{i}").into_bytes());
        state.put(&k, &v).expect("put");
        model.insert(k, v);
    }
    (state, model)
}

/// Changes after a barrier whose copy is put off: updates and deletes of entries still
/// owed to the snapshot (from the end of the cache's slot array, ahead of the copy:
/// copy on write), new keys, reads; `rounds` of them.
fn change_after_barrier(state: &mut KeyedState, model: &mut Contents, rounds: usize) {
    for i in 0..rounds {
        let owed = key(&format!("d{}", DEFERRED - 1 - i * 7 % DEFERRED), None);
        if i % 3 == 0 {
            state.delete(&owed).expect("delete");
            model.remove(&owed);
        } else {
            let v = format!("after{i}").into_bytes();
            state.put(&owed, &v).expect("put");
            model.insert(owed, v);
        }
        let new = key(&format!("n{i}"), None);
        state.put(&new, b"new").expect("put");
        model.insert(new, b"new".to_vec());
        let read = key(&format!("d{}", i * 13 % DEFERRED), None);
        assert_eq!(
            state.get(&read).expect("get"),
            model.get(&read).map(Vec::as_slice)
        );
        if i % 64 == 63 {
            // As a task does after each batch.
            state.continue_snapshot_copy(64).expect("copy");
        }
    }
}

/// The restored contents of `snapshot`.
fn restored(dir: &Path, storage: &CheckpointStorage, snapshot: &DbSnapshot) -> Contents {
    let work = dir.join(format!("restore-{}", snapshot.checkpoint_id.0));
    contents(&KeyedState::restore(&work, storage, snapshot, CACHE).expect("restore"))
}

/// A barrier with more dirty entries than it copies at once only marks them owed; they
/// are copied as the task goes on, each before it changes, so the checkpoint holds
/// exactly the state as of its barrier, while the live state has every later change.
#[test]
fn a_snapshot_copied_after_its_barrier_holds_the_state_as_of_the_barrier() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = storage(dir.path());
    let (mut state, mut model) = many_dirty(dir.path(), CacheBounds::from(1 << 20));
    let first = state
        .begin_snapshot(storage.clone(), CheckpointId(1), "agg-0")
        .expect("begin");
    assert_eq!(state.len_dirty(), DEFERRED, "nothing copied at the barrier");
    let at_first = model.clone();
    // Fewer records than finish the copy (16 slots each): the next barrier finishes it.
    change_after_barrier(&mut state, &mut model, 3_000);
    assert!(state.len_dirty() > 3_000, "the copy is under way, not done");
    let second = state
        .begin_snapshot(storage.clone(), CheckpointId(2), "agg-0")
        .expect("begin");
    let at_second = model.clone();
    // Every entry dirty again; then enough records to finish the copy on the way.
    for i in 0..DEFERRED {
        let (k, v) = (key(&format!("d{i}"), None), format!("w{i}").into_bytes());
        state.put(&k, &v).expect("put");
        model.insert(k, v);
    }
    let third = state
        .begin_snapshot(storage.clone(), CheckpointId(3), "agg-0")
        .expect("begin");
    assert!(state.len_dirty() >= DEFERRED);
    let at_third = model.clone();
    change_after_barrier(&mut state, &mut model, 10_000);
    assert!(
        state.len_dirty() <= 20_000,
        "the copy is done: only later changes are dirty ({})",
        state.len_dirty()
    );
    assert_eq!(contents(&state), model);
    for (upload, expected) in [(first, at_first), (second, at_second), (third, at_third)] {
        let snapshot = upload.wait().expect("upload");
        assert_eq!(
            restored(dir.path(), &storage, &snapshot),
            expected,
            "checkpoint {}",
            snapshot.checkpoint_id.0
        );
    }
}

/// An eviction while a snapshot is being copied sends the snapshot first: the evicted
/// entries' later values never reach the checkpoint. And a quiet input finishes the
/// copy (`finish_snapshot_copy`, what the operator's `on_idle` calls).
#[test]
fn an_eviction_during_a_snapshot_copy_sends_the_snapshot_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = storage(dir.path());
    let bound = DEFERRED + 10_001;
    let (mut state, mut model) = many_dirty(dir.path(), CacheBounds::from(bound));
    let first = state
        .begin_snapshot(storage.clone(), CheckpointId(1), "agg-0")
        .expect("begin");
    assert_eq!(state.len_dirty(), DEFERRED, "nothing copied at the barrier");
    let at_first = model.clone();
    // Owed entries changed (copy on write), ahead of the copy.
    for i in 0..500 {
        let k = key(&format!("d{}", DEFERRED - 1 - i), None);
        let v = format!("after{i}").into_bytes();
        state.put(&k, &v).expect("put");
        model.insert(k, v);
    }
    // Absent keys read: cached as known absent until the cache evicts (reads never
    // write back, so only the eviction can send the snapshot).
    for i in 0..bound {
        assert_eq!(
            state.get(&key(&format!("absent{i}"), None)).expect("get"),
            None
        );
    }
    assert!(state.len_cached() <= bound, "evicted");
    let snapshot = first.wait().expect("upload");
    assert_eq!(restored(dir.path(), &storage, &snapshot), at_first);
    let second = state
        .begin_snapshot(storage.clone(), CheckpointId(2), "agg-0")
        .expect("begin");
    state.finish_snapshot_copy().expect("finish");
    let snapshot = second.wait().expect("upload");
    assert_eq!(restored(dir.path(), &storage, &snapshot), model);
    assert_eq!(contents(&state), model);
}

/// The live DB's column family runs with Weir's options (16 MiB memtables, bloom
/// filters, LZ4), not RocksDB's defaults: RocksDB's own OPTIONS file says so. (Opening
/// the default column family by name alone would give it the defaults: 64 MiB
/// memtables and no filters, which the memory bounds do not allow for.)
#[test]
fn state_db_runs_with_weirs_column_family_options() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = open(dir.path(), "agg");
    let db_dir = dir.path().join("agg/db");
    let newest = std::fs::read_dir(&db_dir)
        .expect("db dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("OPTIONS-"))
        .max_by_key(|n| n["OPTIONS-".len()..].parse::<u64>().unwrap_or(0))
        .expect("an OPTIONS file");
    let text = std::fs::read_to_string(db_dir.join(newest)).expect("read OPTIONS");
    let section = |name: &str| -> Vec<&str> {
        text.lines()
            .skip_while(|l| l.trim() != name)
            .skip(1)
            .take_while(|l| !l.trim_start().starts_with('['))
            .map(str::trim)
            .collect()
    };
    let cf = section("[CFOptions \"default\"]");
    for line in [
        "write_buffer_size=16777216",
        "max_write_buffer_number=2",
        "compression=kLZ4Compression",
        "memtable_whole_key_filtering=true",
    ] {
        assert!(
            cf.contains(&line),
            "{line} not in the default CF's options: {cf:?}"
        );
    }
    let table = section("[TableOptions/BlockBasedTable \"default\"]");
    assert!(
        table
            .iter()
            .any(|l| l.starts_with("filter_policy=") && l.contains("bloomfilter")),
        "no bloom filter: {table:?}"
    );
    drop(state);
}

/// Two old workers' storages, one old subtask each, key groups 0..8 between them (0..5
/// and 5..8), each also holding (stale) entries of groups the other owns and one entry
/// written after its snapshot of checkpoint 3; with what a restore of their owned
/// groups but 2 holds.
fn two_old_workers_snapshots(dir: &Path) -> (Vec<(Arc<CheckpointStorage>, DbSnapshot)>, Contents) {
    let entry = |group: u16, user: &str| StateKey::encode(group, user.as_bytes(), None);
    let mut snapshots = Vec::new();
    let mut expected = Contents::new();
    for (n, owned) in [(0..5_u16), (5..8_u16)].into_iter().enumerate() {
        let storage = Arc::new(
            CheckpointStorage::open(dir.join(format!("old-{n}")), "test").expect("storage"),
        );
        let mut state = open(dir, &format!("old-{n}-work"));
        for group in 0..8_u16 {
            for user in ["", "a", "a\u{0}", "zz"] {
                let value = format!("old-{n} g{group} {user}");
                state
                    .put(&entry(group, user), value.as_bytes())
                    .expect("put");
                if owned.contains(&group) && group != 2 {
                    expected.insert(entry(group, user), value.into_bytes());
                }
            }
        }
        let snapshot = state
            .snapshot(&storage, CheckpointId(3), "stage1-0.step-1")
            .expect("snapshot");
        // Written after the snapshot: not restored.
        state.put(&entry(owned.start, "later"), b"x").expect("put");
        state.flush().expect("flush");
        snapshots.push((storage, snapshot));
    }
    (snapshots, expected)
}

/// Catches (a rescale's state restore): a key group copied from a snapshot that is not
/// its source, one left out or copied twice, keys of a neighbouring key group leaking
/// in at a range's edge (prefix scans end at the next group's first key), entries of an
/// old owner's later writes, overlapping sources accepted, a restored DB whose first
/// checkpoint does not upload everything to the new storage, or scratch dirs left over.
#[test]
#[allow(clippy::single_range_in_vec_init)] // lists of key-group ranges
fn state_restored_by_key_groups_holds_exactly_those_groups_from_their_sources() {
    use crate::state::KeyGroupSource;
    let dir = tempfile::tempdir().expect("tempdir");
    let (snapshots, mut expected) = two_old_workers_snapshots(dir.path());
    let entry = |group: u16, user: &str| StateKey::encode(group, user.as_bytes(), None);
    // The new subtask owns 0..2 and 3..7 (not 2, nor 7): from old 0, 0..2 and 3..5;
    // from old 1, 5..7.
    let (ranges_0, ranges_1) = (vec![0..2, 3..5], vec![5..7]);
    for user in ["", "a", "a\u{0}", "zz"] {
        expected.remove(&entry(7, user));
    }
    let sources = [
        KeyGroupSource {
            storage: &snapshots[0].0,
            snapshot: &snapshots[0].1,
            key_groups: &ranges_0,
        },
        KeyGroupSource {
            storage: &snapshots[1].0,
            snapshot: &snapshots[1].1,
            key_groups: &ranges_1,
        },
    ];
    let work = dir.path().join("new-work");
    let (mut state, stats) =
        KeyedState::restore_key_groups(&work, &sources, CACHE).expect("restore");
    assert_eq!(stats.sources, 2);
    assert_eq!(stats.entries, expected.len() as u64);
    assert_eq!(contents(&state), expected);
    let leftovers: Vec<String> = std::fs::read_dir(&work)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(leftovers, vec!["db".to_owned()], "scratch dirs removed");

    // A new lineage: its first checkpoint uploads every SST to its own storage, and a
    // restore from there has the same contents.
    let new_storage = storage(dir.path());
    let snapshot = state
        .snapshot(&new_storage, CheckpointId(1), "stage1-1.step-1")
        .expect("snapshot");
    assert_eq!(snapshot.stats.files_added as usize, snapshot.shared.len());
    drop(state);
    let again = KeyedState::restore(dir.path().join("again"), &new_storage, &snapshot, CACHE)
        .expect("restore from the new storage");
    assert_eq!(contents(&again), expected);

    // A key group from two sources is refused before anything is copied.
    let overlapping = vec![4..6];
    let refused = KeyedState::restore_key_groups(
        dir.path().join("refused"),
        &[
            sources[0],
            KeyGroupSource {
                key_groups: &overlapping,
                ..sources[1]
            },
        ],
        CACHE,
    )
    .expect_err("overlap");
    assert!(refused.to_string().contains("overlap"), "{refused}");
}

/// Memtables are a share of the process's: 16 MiB each up to 8 stateful subtasks, then
/// shrinking so that all together stay at `PROCESS_MEMTABLE_BYTES` (two each), down to
/// 1 MiB.
#[test]
fn memtables_share_the_process_budget() {
    use crate::state::{PROCESS_MEMTABLE_BYTES, memtable_bytes};
    assert_eq!(memtable_bytes(0), 16 << 20);
    assert_eq!(memtable_bytes(1), 16 << 20);
    assert_eq!(memtable_bytes(8), 16 << 20);
    for n in [9, 16, 64, 128] {
        assert!(2 * n * memtable_bytes(n) <= PROCESS_MEMTABLE_BYTES, "{n}");
    }
    assert_eq!(memtable_bytes(64), 2 << 20);
    assert_eq!(memtable_bytes(1024), 1 << 20);
}
