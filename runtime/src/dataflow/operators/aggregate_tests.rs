//! `AggregateOperator` tests, in process: the operator is driven directly with batches,
//! watermarks and barriers, its guest the real `windowed_sum` built by `make guests`
//! (found in `$WEIR_GUESTS_DIR`, default `$HOME/.cache/weir/guest-target/wasm32-wasip2/release`),
//! its state in a temporary RocksDB and checkpoint storage. What each window emits is
//! asserted exactly; `tests/tests/local/windows.rs` proves the whole pipeline end to end.

use std::path::Path;

use super::*;
use crate::engine::WasmEngine;
use crate::record::CheckpointId;
use crate::record::DeadLetter;
use crate::test_support::guest_path;

/// `windowed_sum` over tumbling 10 s windows.
fn config(allowed_lateness_ms: i64) -> AggregateConfig {
    let engine = WasmEngine::new(None).expect("engine");
    let module = engine
        .load(&guest_path("windowed_sum"))
        .expect("load windowed_sum");
    AggregateConfig {
        id: "step-0".into(),
        module: Arc::new(module),
        limits: GuestLimits::default(),
        guest_config: BTreeMap::new(),
        windows: WindowAssigner::Tumbling { size_ms: 10_000 },
        allowed_lateness_ms,
        max_parallelism: 128,
        batch_size: 64,
        cache: CacheBounds::from(1024),
        max_accumulator_bytes: 1 << 20,
        update_and_emit: true,
        state_note: String::new(),
        on_error: OnError::Fail,
    }
}

/// A working directory `work` under `dir`, checkpoint storage in `dir/checkpoints`.
fn location(dir: &Path, work: &str) -> StateLocation {
    StateLocation {
        work_dir: dir.join(work),
        storage: Arc::new(
            CheckpointStorage::open(dir.join("checkpoints"), "test").expect("storage"),
        ),
        storage_task: "stage1-0.step-0".into(),
    }
}

fn open(config: AggregateConfig, location: StateLocation) -> AggregateOperator {
    AggregateOperator::open(config, location, None).expect("open")
}

/// Records `(key, value field, timestamp)` as `windowed_sum` reads them.
fn batch(records: &[(&str, i64, i64)]) -> RecordBatch {
    let mut b = RecordBatch::default();
    for (key, value, ts) in records {
        b.push(
            key.as_bytes(),
            format!(r#"{{"value":{value}}}"#).as_bytes(),
            *ts,
        );
    }
    b
}

/// What `windowed_sum` emits for `key` in `[start, start + 10 s)`, with the window's
/// last timestamp.
fn sum(key: &str, start: i64, sum: i64) -> (String, String, i64) {
    let end = start + 10_000;
    (
        key.to_owned(),
        format!(r#"{{"key":"{key}","window_start":{start},"window_end":{end},"sum":{sum}}}"#),
        end - 1,
    )
}

/// Everything `out` emitted as (key, value, timestamp), in emission order; then cleared.
fn drain_records(out: &mut Output) -> Vec<(String, String, i64)> {
    out.batches
        .drain(..)
        .flat_map(|b| {
            b.iter()
                .map(|r| {
                    (
                        String::from_utf8_lossy(r.key).into_owned(),
                        String::from_utf8_lossy(r.value).into_owned(),
                        r.timestamp,
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Everything `out` emitted as (key, value, timestamp), sorted (keys of one window are
/// emitted in key-group order), then cleared.
fn emitted(out: &mut Output) -> Vec<(String, String, i64)> {
    let mut records = drain_records(out);
    records.sort();
    records
}

fn watermark(op: &mut AggregateOperator, wm: i64) -> Vec<(String, String, i64)> {
    let mut out = Output::default();
    op.handle_watermark(Watermark(wm), &mut out)
        .expect("watermark");
    assert!(out.dead_letters.is_empty(), "{:?}", out.dead_letters);
    emitted(&mut out)
}

/// Feeds `records`; returns what they emitted (late firings), refusing none.
fn feed(op: &mut AggregateOperator, records: &[(&str, i64, i64)]) -> Vec<(String, String, i64)> {
    let mut out = Output::default();
    op.handle_batch(batch(records), &mut out).expect("batch");
    assert!(out.dead_letters.is_empty(), "{:?}", out.dead_letters);
    assert_eq!(out.late_records, 0);
    emitted(&mut out)
}

fn late_letter(key: &str, value: i64, ts: i64, watermark: i64) -> DeadLetter {
    DeadLetter {
        operator: "step-0".into(),
        reason: format!(
            "late record: event time {ts} is past its window's allowed lateness (watermark {watermark})"
        ),
        key: key.as_bytes().to_vec(),
        value: format!(r#"{{"value":{value}}}"#).into_bytes(),
        timestamp: ts,
    }
}

/// A window emits nothing until the watermark reaches its last timestamp (`end - 1`),
/// then exactly its sums, once, stamped `end - 1`; the next window waits for its own.
#[test]
fn a_window_fires_once_when_the_watermark_reaches_its_last_timestamp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut op = open(config(0), location(dir.path(), "work"));
    assert_eq!(
        feed(
            &mut op,
            &[
                ("a", 1, 1_000),
                ("b", 5, 3_000),
                ("a", 2, 9_999),
                ("a", 7, 10_000)
            ]
        ),
        []
    );
    assert_eq!(watermark(&mut op, 5_000), []);
    assert_eq!(watermark(&mut op, 9_998), []);
    assert_eq!(watermark(&mut op, 9_999), [sum("a", 0, 3), sum("b", 0, 5)]);
    assert_eq!(watermark(&mut op, 9_999), []);
    assert_eq!(watermark(&mut op, 15_000), []);
    assert_eq!(watermark(&mut op, 19_999), [sum("a", 10_000, 7)]);
    assert_eq!(watermark(&mut op, Watermark::END.0), []);
}

/// Without allowed lateness, a record whose window the watermark has passed goes to the
/// dead-letter output, is counted late, and is in no sum: neither its fired window nor
/// any later one.
#[test]
fn a_late_record_is_a_dead_letter_and_is_not_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut op = open(config(0), location(dir.path(), "work"));
    feed(&mut op, &[("a", 1, 1_000)]);
    assert_eq!(watermark(&mut op, 9_999), [sum("a", 0, 1)]);

    let mut out = Output::default();
    op.handle_batch(
        batch(&[("a", 100, 5_000), ("a", 2, 12_000), ("b", 8, 9_999)]),
        &mut out,
    )
    .expect("batch");
    assert_eq!(out.late_records, 2);
    assert_eq!(
        out.dead_letters,
        [
            late_letter("a", 100, 5_000, 9_999),
            late_letter("b", 8, 9_999, 9_999)
        ]
    );
    assert_eq!(emitted(&mut out), []);
    assert_eq!(watermark(&mut op, 19_999), [sum("a", 10_000, 2)]);
    assert_eq!(watermark(&mut op, Watermark::END.0), []);
}

/// With allowed lateness, a record for a fired window updates it and fires it again at
/// once with the new sum, until the watermark passes `end - 1 + lateness`; after that
/// the window's state is gone and its records are dead letters.
#[test]
fn allowed_lateness_fires_the_window_again_with_the_updated_sum() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut op = open(config(5_000), location(dir.path(), "work"));
    feed(&mut op, &[("a", 1, 1_000), ("b", 4, 2_000)]);
    assert_eq!(watermark(&mut op, 9_999), [sum("a", 0, 1), sum("b", 0, 4)]);
    assert_eq!(feed(&mut op, &[("a", 2, 5_000)]), [sum("a", 0, 3)]);
    assert_eq!(watermark(&mut op, 14_998), []);
    assert_eq!(op.state.keys().expect("keys").len(), 2, "a and b are kept");
    assert_eq!(feed(&mut op, &[("a", 10, 6_000)]), [sum("a", 0, 13)]);
    // 9_999 + 5_000: the lateness of [0, 10 s) is over and its accumulators dropped.
    assert_eq!(watermark(&mut op, 14_999), []);
    assert_eq!(op.state.keys().expect("keys"), Vec::<Vec<u8>>::new());
    let mut out = Output::default();
    op.handle_batch(batch(&[("a", 100, 7_000)]), &mut out)
        .expect("batch");
    assert_eq!(out.late_records, 1);
    assert_eq!(out.dead_letters, [late_letter("a", 100, 7_000, 14_999)]);
    assert_eq!(emitted(&mut out), []);
    assert_eq!(watermark(&mut op, Watermark::END.0), []);
}

/// A late record whose key the window did not have when it fired fires it for that key,
/// and that key's accumulator goes with the window's lateness like the others (it used
/// to stay in the state for good: the index of fired windows did not learn the key).
#[test]
fn a_key_new_to_a_fired_window_is_dropped_with_its_lateness() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut op = open(config(5_000), location(dir.path(), "work"));
    feed(&mut op, &[("a", 1, 1_000)]);
    assert_eq!(watermark(&mut op, 9_999), [sum("a", 0, 1)]);
    assert_eq!(feed(&mut op, &[("new", 2, 5_000)]), [sum("new", 0, 2)]);
    assert_eq!(op.state.keys().expect("keys").len(), 2);
    assert_eq!(watermark(&mut op, 14_999), []);
    assert_eq!(op.state.keys().expect("keys"), Vec::<Vec<u8>>::new());
}

/// A window's keys fire in key order whatever order their records came in, and a key
/// seen again is fired once.
#[test]
fn a_window_fires_its_keys_in_key_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut op = open(config(0), location(dir.path(), "work"));
    feed(
        &mut op,
        &[("c", 1, 1_000), ("a", 2, 2_000), ("b", 3, 3_000)],
    );
    feed(&mut op, &[("b", 4, 4_000), ("c", 5, 5_000)]);
    let mut out = Output::default();
    op.handle_watermark(Watermark(9_999), &mut out)
        .expect("watermark");
    let mut fired = drain_records(&mut out);
    let mut by_state_key = fired.clone();
    by_state_key.sort_by_key(|(key, _, _)| {
        StateKey::encode(key_group(key.as_bytes(), 128), key.as_bytes(), Some(10_000))
    });
    assert_eq!(fired, by_state_key, "key order: key group, then key");
    fired.sort();
    assert_eq!(fired, [sum("a", 0, 2), sum("b", 0, 7), sum("c", 0, 6)]);
    assert_eq!(op.state.keys().expect("keys"), Vec::<Vec<u8>>::new());
}

/// The run the restore test interrupts: window [0, 10 s) fires before the barrier,
/// [10 s, 20 s) is open across it, a record for [0, 10 s) after it is late.
const BEFORE_BARRIER: &[(&str, i64, i64)] = &[("a", 1, 1_000), ("b", 2, 2_000), ("a", 6, 12_000)];
const ALSO_BEFORE_BARRIER: &[(&str, i64, i64)] = &[("a", 3, 14_000), ("c", 5, 15_000)];
const AFTER_BARRIER: &[(&str, i64, i64)] = &[("a", 4, 16_000), ("b", 7, 3_000), ("c", 1, 25_000)];

/// Everything the operator emits or refuses after the barrier, in order of the calls.
#[derive(Debug, PartialEq)]
struct AfterBarrier {
    batch: Vec<(String, String, i64)>,
    dead_letters: Vec<DeadLetter>,
    late_records: u64,
    at_19_999: Vec<(String, String, i64)>,
    at_end: Vec<(String, String, i64)>,
}

fn after_barrier(op: &mut AggregateOperator) -> AfterBarrier {
    let mut out = Output::default();
    op.handle_batch(batch(AFTER_BARRIER), &mut out)
        .expect("batch");
    AfterBarrier {
        batch: emitted(&mut out),
        dead_letters: out.dead_letters,
        late_records: out.late_records,
        at_19_999: watermark(op, 19_999),
        at_end: watermark(op, Watermark::END.0),
    }
}

/// A snapshot taken mid-window, restored into a fresh operator (new working directory,
/// same checkpoint storage), continues exactly as the uninterrupted run: the open
/// window keeps its sums and fires, the restored watermark keeps the fired window
/// closed, nothing fires twice.
#[test]
fn restoring_a_mid_window_snapshot_fires_what_the_uninterrupted_run_fires() {
    let dir = tempfile::tempdir().expect("tempdir");
    let barrier = Barrier {
        id: CheckpointId(1),
        is_final: false,
    };
    let before = |op: &mut AggregateOperator| {
        assert_eq!(feed(op, BEFORE_BARRIER), []);
        assert_eq!(watermark(op, 9_999), [sum("a", 0, 1), sum("b", 0, 2)]);
        assert_eq!(feed(op, ALSO_BEFORE_BARRIER), []);
        let mut out = Output::default();
        let snapshot = op
            .handle_barrier(barrier, &mut out)
            .expect("barrier")
            .expect("an aggregate has state to snapshot");
        assert!(out.batches.is_empty() && out.dead_letters.is_empty());
        assert!(
            matches!(snapshot, Snapshot::Deferred(_)),
            "the upload runs off the task thread"
        );
        snapshot
    };

    let mut uninterrupted = open(config(0), location(dir.path(), "uninterrupted"));
    before(&mut uninterrupted);
    let expected = after_barrier(&mut uninterrupted);
    assert_eq!(
        expected,
        AfterBarrier {
            batch: vec![],
            dead_letters: vec![late_letter("b", 7, 3_000, 9_999)],
            late_records: 1,
            at_19_999: vec![sum("a", 10_000, 13), sum("c", 10_000, 5)],
            at_end: vec![sum("c", 20_000, 1)],
        }
    );

    let checkpoints = dir.path().join("restored");
    // The interrupted run goes on past the barrier before its snapshot is finished:
    // what it does after the barrier must not leak into the snapshot.
    let mut interrupted = open(config(0), location(&checkpoints, "work"));
    let snapshot = before(&mut interrupted);
    assert_eq!(after_barrier(&mut interrupted), expected);
    let snapshot = snapshot.wait().expect("upload");
    drop(interrupted);
    let mut restored =
        AggregateOperator::open(config(0), location(&checkpoints, "work-2"), Some(&snapshot))
            .expect("restore");
    assert_eq!(after_barrier(&mut restored), expected);

    // The same snapshot as weir wrote it before versions (no "v") restores the same
    // way; one from a newer weir is refused, naming the operator and both versions.
    assert_eq!(snapshot.state["v"], 1);
    let mut unversioned = snapshot.clone();
    if let Some(fields) = unversioned.state.as_object_mut() {
        fields.remove("v");
    }
    let mut from_old = AggregateOperator::open(
        config(0),
        location(&checkpoints, "work-3"),
        Some(&unversioned),
    )
    .expect("restore an unversioned snapshot");
    assert_eq!(after_barrier(&mut from_old), expected);
    let mut newer = snapshot;
    newer.state["v"] = serde_json::json!(2);
    match AggregateOperator::open(config(0), location(&checkpoints, "work-4"), Some(&newer)) {
        Ok(_) => panic!("a snapshot from a newer weir was restored"),
        Err(e) => assert_eq!(
            e.to_string(),
            "checkpoint written by a newer weir: aggregate operator step-0 state version 2, this weir reads up to 1"
        ),
    }
}

/// Issue 7 §2: a key in an error is one quoted line, escaped and cut.
#[test]
fn keys_in_errors_are_escaped_and_cut() {
    assert_eq!(display_key(b"k0"), "\"k0\"");
    assert_eq!(
        display_key(b"a\"b\\\nweir: error: \xff"),
        "\"a\\\"b\\\\\\nweir: error: \\xff\""
    );
    let long = vec![b'x'; 1000];
    assert_eq!(
        display_key(&long),
        format!("\"{}\"... (1000 bytes)", "x".repeat(64))
    );
    let e = AccumulatorTooLarge {
        module: "m.wasm".into(),
        key: display_key(b"k\n1"),
        window: " (window ending at 10)".into(),
        bytes: 2048,
        max: 1024,
    };
    assert_eq!(
        e.to_string(),
        "module m.wasm: the accumulator of key \"k\\n1\" (window ending at 10) is 2048 bytes, \
         more than max_accumulator_bytes (1024 bytes): raise max_accumulator_bytes or keep \
         less per key"
    );
}

/// The JSON an aggregate snapshot had before versions: what today's main writes.
fn unversioned_aggregate_state() -> serde_json::Value {
    serde_json::json!({
        "watermark": 5000,
        "db": {
            "task": "1-0",
            "checkpoint_id": 3,
            "shared": [{"local_name": "000012.sst", "shared_name": "1-0-a1b2-000012", "size": 1024}],
            "private": [{"name": "CURRENT", "size": 16}, {"name": "MANIFEST-000005", "size": 200}],
            "stats": {"files_added": 1, "bytes_added": 1024, "private_bytes": 216}
        }
    })
}

/// Catches: an aggregate state written before versions no longer restoring, the
/// version missing from new snapshots, or a newer weir's state misread.
#[test]
fn snapshot_is_versioned() {
    use crate::state::{PrivateFile, SharedFile, SnapshotStats};
    let expected = AggregateSnapshot {
        watermark: 5000,
        db: DbSnapshot {
            task: "1-0".into(),
            checkpoint_id: CheckpointId(3),
            shared: vec![SharedFile {
                local_name: "000012.sst".into(),
                shared_name: "1-0-a1b2-000012".into(),
                size: 1024,
            }],
            private: vec![
                PrivateFile {
                    name: "CURRENT".into(),
                    size: 16,
                },
                PrivateFile {
                    name: "MANIFEST-000005".into(),
                    size: 200,
                },
            ],
            stats: SnapshotStats {
                files_added: 1,
                bytes_added: 1024,
                private_bytes: 216,
            },
        },
    };
    snapshot::assert_versioned(
        &snapshot_name("agg-1"),
        unversioned_aggregate_state(),
        &expected,
    );
}

/// Records as (key, value, timestamp) and dead letters as (key, reason).
type Everything = (Vec<(String, String, i64)>, Vec<(String, String)>);

/// Everything `out` holds, in emission order; then cleared.
fn everything(out: &mut Output) -> Everything {
    let records = drain_records(out);
    let letters = out
        .dead_letters
        .drain(..)
        .map(|d| (String::from_utf8_lossy(&d.key).into_owned(), d.reason))
        .collect();
    (records, letters)
}

/// An unwindowed aggregate whose guest exports the fused `update-and-emit` emits, in
/// the same order, exactly what `update` then `emit` emit, and refuses the same
/// records: batches with repeated keys, keys seen again in later batches, a group whose
/// every record is refused (with and without an accumulator yet), and more groups than
/// `batch_size` (several calls per batch).
#[test]
fn the_fused_update_and_emit_emits_what_update_then_emit_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let unwindowed = |update_and_emit: bool| AggregateConfig {
        windows: WindowAssigner::Global,
        batch_size: 3,
        update_and_emit,
        ..config(0)
    };
    let mut fused = open(unwindowed(true), location(dir.path(), "fused"));
    let mut two_calls = open(unwindowed(false), location(dir.path(), "two-calls"));
    let bad = |key: &'static str, ts: i64| {
        let mut b = RecordBatch::default();
        b.push(key.as_bytes(), b"not json", ts);
        b
    };
    let mut batches = vec![
        batch(&[
            ("a", 1, 1),
            ("b", 2, 2),
            ("a", 3, 3),
            ("c", 4, 4),
            ("d", 5, 5),
        ]),
        bad("never", 6),
        batch(&[("b", 10, 7), ("e", 1, 8), ("a", -4, 9)]),
    ];
    // "b" already has a sum: a group of only refused records, with an accumulator.
    batches.push(bad("b", 10));
    let mut mixed = batch(&[("f", 7, 11)]);
    mixed.push(b"f", b"{}", 12);
    mixed.push(b"g", b"{}", 13);
    batches.push(mixed);
    let mut outputs = Vec::new();
    for op in [&mut fused, &mut two_calls] {
        let mut emitted = Vec::new();
        for b in &batches {
            let mut out = Output::default();
            op.handle_batch(b.clone(), &mut out).expect("batch");
            emitted.push(everything(&mut out));
        }
        outputs.push(emitted);
    }
    assert!(
        fused
            .instance
            .as_ref()
            .is_some_and(AggregatorInstance::has_update_and_emit),
        "windowed_sum is built with the SDK, which exports update-and-emit"
    );
    assert!(
        !two_calls
            .instance
            .as_ref()
            .expect("instance")
            .has_update_and_emit()
    );
    assert_eq!(outputs[0], outputs[1]);
    // And what they emit is right, not only equal.
    let first = &outputs[0][0].0;
    assert_eq!(first.len(), 4, "{first:?}");
    assert_eq!(first[0], ("a".into(), r#"{"key":"a","sum":4}"#.into(), 0));
    assert_eq!(outputs[0][1].0, []);
    assert_eq!(outputs[0][1].1.len(), 1);
    assert_eq!(outputs[0][4].1.len(), 2, "{:?}", outputs[0][4]);
}

#[test]
fn consecutive_runs_cut_indices_where_they_stop_counting_up() {
    let runs = |indices: &[u32]| consecutive_runs(indices).collect::<Vec<_>>();
    assert_eq!(runs(&[]), Vec::<std::ops::Range<usize>>::new());
    assert_eq!(runs(&[7]), vec![7..8]);
    assert_eq!(runs(&[3, 4, 5, 9, 2]), vec![3..6, 9..10, 2..3]);
    assert_eq!(runs(&[0, 1, 1, 2]), vec![0..2, 1..3]);
    assert_eq!(runs(&[5, 4, 3]), vec![5..6, 4..5, 3..4]);
}

/// `agg_panicker` (a count per key that panics on a record valued `boom`), three groups
/// per call, with `on_error`.
fn panicker(windows: WindowAssigner, on_error: OnError) -> AggregateConfig {
    let engine = WasmEngine::new(None).expect("engine");
    let module = engine
        .load(&guest_path("agg_panicker"))
        .expect("load agg_panicker");
    AggregateConfig {
        module: Arc::new(module),
        windows,
        batch_size: 3,
        on_error,
        ..config(0)
    }
}

/// Records `(key, value)` at event times 1, 2, ...
fn values(records: &[(&str, &str)]) -> RecordBatch {
    let mut b = RecordBatch::default();
    for (i, (key, value)) in records.iter().enumerate() {
        b.push(key.as_bytes(), value.as_bytes(), i as i64 + 1);
    }
    b
}

/// The counts emitted, as `key=count`, in order.
fn counts(out: &mut Output) -> Vec<String> {
    drain_records(out)
        .into_iter()
        .map(|(key, value, _)| {
            let v: serde_json::Value = serde_json::from_str(&value).expect("json");
            format!("{key}={}", v["count"])
        })
        .collect()
}

/// Issue 35: under `on_error = "dead-letter"` an update call that traps is retried one
/// (record, window) at a time; the record that traps alone goes to the dead letters,
/// named, and every other record of the call counts exactly once, its key's state
/// carrying on in later batches.
#[test]
fn an_update_record_that_traps_alone_is_dead_lettered_and_the_others_count_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut op = open(
        panicker(WindowAssigner::Global, OnError::DeadLetter),
        location(dir.path(), "work"),
    );
    let mut out = Output::default();
    let first = values(&[
        ("a", "1"),
        ("b", "1"),
        ("a", "boom"),
        ("c", "1"),
        ("d", "1"),
    ]);
    op.handle_batch(first, &mut out).expect("batch");
    // The call over a, b and c trapped: each retried alone; d's call was fine.
    assert_eq!(counts(&mut out), ["a=1", "b=1", "c=1", "d=1"]);
    let letters: Vec<_> = out.dead_letters.drain(..).collect();
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(
        (&letters[0].key[..], &letters[0].value[..]),
        (&b"a"[..], &b"boom"[..])
    );
    assert!(
        letters[0]
            .reason
            .contains("on input record 2 (key \"a\") of this subtask")
            && letters[0]
                .reason
                .contains("weir-test: aggregator panicked on purpose"),
        "{}",
        letters[0].reason
    );
    op.handle_batch(values(&[("a", "1"), ("b", "1")]), &mut out)
        .expect("batch");
    assert_eq!(counts(&mut out), ["a=2", "b=2"]);
    assert!(out.dead_letters.is_empty());
}

/// The same in a window: the trapping record counts in no window; the window fires
/// with the others.
#[test]
fn a_windowed_update_record_that_traps_alone_counts_in_no_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tumbling = WindowAssigner::Tumbling { size_ms: 10_000 };
    let mut op = open(
        panicker(tumbling, OnError::DeadLetter),
        location(dir.path(), "work"),
    );
    let mut out = Output::default();
    let batch = values(&[
        ("a", "1"),
        ("a", "boom"),
        ("b", "1"),
        ("a", "1"),
        ("c", "boom"),
    ]);
    op.handle_batch(batch, &mut out).expect("batch");
    assert_eq!(counts(&mut out), Vec::<String>::new(), "nothing fires yet");
    let refused: Vec<_> = out.dead_letters.drain(..).map(|d| d.key).collect();
    assert_eq!(refused, [b"a".to_vec(), b"c".to_vec()]);
    op.handle_watermark(Watermark(9_999), &mut out)
        .expect("watermark");
    assert_eq!(counts(&mut out), ["a=2", "b=1"]);
}

/// Under `on_error = "fail"` the step fails naming the record that traps alone: its
/// index in this subtask's input (over batches) and its key, and the guest's message.
#[test]
fn an_update_record_that_traps_alone_fails_the_step_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut op = open(
        panicker(WindowAssigner::Global, OnError::Fail),
        location(dir.path(), "work"),
    );
    let mut out = Output::default();
    op.handle_batch(values(&[("a", "1"), ("b", "1"), ("c", "1")]), &mut out)
        .expect("batch");
    let err = op
        .handle_batch(values(&[("x", "1"), ("y", "1"), ("y", "boom")]), &mut out)
        .expect_err("the guest panics")
        .to_string();
    assert!(
        err.starts_with("on input record 5 (key \"y\") of this subtask: agg_panicker.wasm: ")
            && err.contains("weir-test: aggregator panicked on purpose"),
        "{err}"
    );
}

/// A guest that fails on more than `MAX_FAILED_ALONE` records of one call fails the
/// step even under `"dead-letter"`: it fails on everything, not on a few bad records.
#[test]
fn too_many_records_failing_alone_fail_the_step() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut op = open(
        panicker(WindowAssigner::Global, OnError::DeadLetter),
        location(dir.path(), "work"),
    );
    let keys: Vec<String> = (0..MAX_FAILED_ALONE + 1).map(|i| format!("k{i}")).collect();
    let mut batch = RecordBatch::default();
    for key in &keys {
        batch.push(key.as_bytes(), b"boom", 1);
    }
    let err = op
        .handle_batch(batch, &mut Output::default())
        .map(|_| ())
        .expect_err("too many failures");
    assert!(err.to_string().contains("more than 16 records"), "{err}");
}

/// Issue 51: a call's deadline is wall-clock, and a starved or paused host can spend
/// it with the guest barely run. Under `"dead-letter"` a record whose update call
/// alone ran out of its deadline once is folded again in a fresh instance and counts;
/// one that runs out twice is refused, its reason saying so. `sleep-until T` runs out
/// of the default 1 s deadline in the call over its group of three and in its first
/// call alone, and fits in its second: T is 2.5 s ahead, half a deadline of slack
/// either way. Fails without the second try (b went to the dead letters).
#[test]
fn an_update_that_ran_out_of_its_deadline_once_is_folded_again_not_refused() {
    use std::time::{SystemTime, UNIX_EPOCH};

    let dir = tempfile::tempdir().expect("tempdir");
    let mut op = open(
        panicker(WindowAssigner::Global, OnError::DeadLetter),
        location(dir.path(), "work"),
    );
    let mut out = Output::default();
    // Instantiated first: the deadlines below are the calls' own.
    op.handle_batch(values(&[("w", "1")]), &mut out)
        .expect("warm-up");
    assert_eq!(counts(&mut out), ["w=1"]);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    let slowed = format!("sleep-until {}", now.as_millis() + 2_500);
    let stuck = format!("sleep-until {}", now.as_millis() + 600_000);
    let batch = values(&[("a", "1"), ("b", &slowed), ("c", &stuck)]);
    op.handle_batch(batch, &mut out).expect("batch");
    assert_eq!(counts(&mut out), ["a=1", "b=1"]);
    let letters: Vec<_> = out.dead_letters.drain(..).collect();
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(&letters[0].key[..], b"c");
    assert!(
        letters[0].reason.contains("time limit")
            && letters[0]
                .reason
                .contains("the second call, in a fresh instance"),
        "{}",
        letters[0].reason
    );
}
