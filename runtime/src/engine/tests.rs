//! Engine tests. Two kinds:
//! - hand-written WAT components (no build step needed) for the load checks, the
//!   limits and output validation;
//! - the real guests built by `make guests` (uppercase, infinite_loop, memory_hog,
//!   panicker, sleeper, ...), found in `$WEIR_GUESTS_DIR` (default
//!   `$HOME/.cache/weir/guest-target/wasm32-wasip2/release`). A missing guest fails the
//!   test with "run `make guests` first".

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::*;
use crate::record::Window;
use crate::record::batch::RecordBatch;
use crate::test_support::guest_path;

fn engine() -> WasmEngine {
    WasmEngine::new(None).expect("engine")
}

fn limits(memory_bytes: usize, call_timeout: Duration) -> GuestLimits {
    GuestLimits {
        memory_bytes,
        call_timeout,
        ..GuestLimits::default()
    }
}

fn batch(values: &[&str]) -> RecordBatch {
    let mut b = RecordBatch::default();
    for (i, v) in values.iter().enumerate() {
        b.push(format!("k{i}").as_bytes(), v.as_bytes(), i as i64);
    }
    b
}

fn values(b: &RecordBatch) -> Vec<String> {
    b.iter()
        .map(|r| String::from_utf8_lossy(r.value).into_owned())
        .collect()
}

// ---------------------------------------------------------------- WAT components

/// WIT types of `weir:transform`, as component-level type definitions.
const TYPES: &str = r#"
  (type $rb (record
    (field "timestamps" (list s64)) (field "key-ends" (list u32)) (field "keys" (list u8))
    (field "value-ends" (list u32)) (field "values" (list u8))))
  (type $rej (record (field "index" u32) (field "reason" string)))
  (type $out (record (field "records" $rb) (field "rejections" (list $rej))))
"#;

/// Core module items every test guest shares: one memory and a bump `realloc`.
const CORE_COMMON: &str = r#"
    (memory (export "memory") 1)
    (global $bump (mut i32) (i32.const 4096))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32)
      (local.set $p (i32.and (i32.add (global.get $bump) (i32.sub (local.get 2) (i32.const 1)))
                             (i32.sub (i32.const 0) (local.get 2))))
      (global.set $bump (i32.add (local.get $p) (local.get 3)))
      (block $ok
        (br_if $ok (i32.le_u (global.get $bump) (i32.mul (memory.size) (i32.const 65536))))
        (br_if $ok (i32.ne (i32.const -1) (memory.grow
          (i32.add (i32.const 1) (i32.shr_u (i32.sub (global.get $bump)
            (i32.mul (memory.size) (i32.const 65536))) (i32.const 16))))))
        unreachable)
      (local.get $p))
"#;

/// A mapper component whose core `map` (10 flat i32 params, returns a pointer to the
/// 12-word result) has `body` as its body; `imports` are extra component imports.
pub(super) fn mapper_wat(imports: &str, body: &str) -> String {
    format!(
        r#"(component
  {imports}
  (core module $m
    {CORE_COMMON}
    (func (export "map") (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
      {body})
  )
  (core instance $i (instantiate $m))
  (alias core export $i "memory" (core memory $mem))
  (alias core export $i "realloc" (core func $realloc))
  {TYPES}
  (func $map (param "batch" $rb) (result $out)
    (canon lift (core func $i "map") (memory $mem) (realloc $realloc)))
  (instance $api
    (export "record-batch" (type $rb))
    (export "rejection" (type $rej))
    (export "map-output" (type $out))
    (export "map" (func $map)))
  (export "weir:transform/map@0.1.0" (instance $api))
)"#
    )
}

/// Returns the input batch unchanged plus `rejections` (a pointer/length pair).
pub(super) fn echo_body(rejections_ptr: u32, rejections_len: u32) -> String {
    let mut s = String::new();
    for i in 0..10 {
        s.push_str(&format!(
            "(i32.store offset={} (i32.const 16) (local.get {i}))\n",
            4 * i
        ));
    }
    s.push_str(&format!(
        "(i32.store offset=40 (i32.const 16) (i32.const {rejections_ptr}))
         (i32.store offset=44 (i32.const 16) (i32.const {rejections_len}))
         (i32.const 16)"
    ));
    s
}

const LOOP_BODY: &str = "(loop $l (br $l)) unreachable";
/// Grows memory a page at a time until refused, then traps as Rust's allocator would.
const HOG_BODY: &str =
    "(loop $l (br_if $l (i32.ne (memory.grow (i32.const 1)) (i32.const -1)))) unreachable";

fn load_wat(engine: &WasmEngine, name: &str, wat: &str) -> Result<GuestModule, EngineError> {
    GuestModule::from_wat(engine, name, wat)
}

fn wat_mapper(engine: &WasmEngine, name: &str, body: &str, limits: &GuestLimits) -> MapperInstance {
    let module = load_wat(engine, name, &mapper_wat("", body)).expect("load wat mapper");
    assert_eq!(module.world(), World::Mapper);
    module
        .instantiate_mapper(limits, BTreeMap::new())
        .expect("instantiate wat mapper")
}

/// An aggregator whose `update` returns the input accumulators (plus `extra_groups`
/// bogus empty ones when non-zero) and whose `emit` returns an empty batch.
fn aggregator_wat(drop_accumulators: bool) -> String {
    let acc_ends_len = if drop_accumulators {
        "(i32.const 0)"
    } else {
        "(local.get 1)"
    };
    format!(
        r#"(component
  (core module $m
    {CORE_COMMON}
    (func (export "update") (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
      (i32.store offset=0 (i32.const 16) (local.get 0))
      (i32.store offset=4 (i32.const 16) {acc_ends_len})
      (i32.store offset=8 (i32.const 16) (local.get 2))
      (i32.store offset=12 (i32.const 16) (local.get 3))
      (i32.store offset=16 (i32.const 16) (i32.const 0))
      (i32.store offset=20 (i32.const 16) (i32.const 0))
      (i32.const 16))
    (func (export "emit") (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
      (memory.fill (i32.const 64) (i32.const 0) (i32.const 40))
      (i32.const 64))
  )
  (core instance $i (instantiate $m))
  (alias core export $i "memory" (core memory $mem))
  (alias core export $i "realloc" (core func $realloc))
  {TYPES}
  (type $win (record (field "start" s64) (field "end" s64)))
  (type $gb (record (field "accumulator-ends" (list u32)) (field "accumulators" (list u8))
                    (field "record-ends" (list u32)) (field "records" $rb)))
  (type $uo (record (field "accumulator-ends" (list u32)) (field "accumulators" (list u8))
                    (field "rejections" (list $rej))))
  (type $eb (record (field "key-ends" (list u32)) (field "keys" (list u8))
                    (field "windows" (list (option $win)))
                    (field "accumulator-ends" (list u32)) (field "accumulators" (list u8))))
  (func $update (param "groups" $gb) (result $uo)
    (canon lift (core func $i "update") (memory $mem) (realloc $realloc)))
  (func $emit (param "entries" $eb) (result $rb)
    (canon lift (core func $i "emit") (memory $mem) (realloc $realloc)))
  (instance $api
    (export "record-batch" (type $rb))
    (export "rejection" (type $rej))
    (export "window" (type $win))
    (export "group-batch" (type $gb))
    (export "update-output" (type $uo))
    (export "emit-batch" (type $eb))
    (export "update" (func $update))
    (export "emit" (func $emit)))
  (export "weir:transform/aggregate@0.1.0" (instance $api))
)"#
    )
}

/// [`aggregator_wat`] that also exports the fused `update-and-emit`, whose result type
/// is `result` (`$ueo`, the contract's, or another to test the refusal). It returns
/// what `update` returns (see there) and no records.
fn fused_aggregator_wat(drop_accumulators: bool, result: &str) -> String {
    let acc_ends_len = if drop_accumulators {
        "(i32.const 0)"
    } else {
        "(local.get 1)"
    };
    let core = format!(
        r#"    (func (export "update-and-emit") (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
      (memory.fill (i32.const 128) (i32.const 0) (i32.const 64))
      (i32.store offset=0 (i32.const 128) (local.get 0))
      (i32.store offset=4 (i32.const 128) {acc_ends_len})
      (i32.store offset=8 (i32.const 128) (local.get 2))
      (i32.store offset=12 (i32.const 128) (local.get 3))
      (i32.const 128))
  )
  (core instance $i (instantiate $m))"#
    );
    let component = format!(
        r#"  (type $ueo (record (field "accumulator-ends" (list u32)) (field "accumulators" (list u8))
                     (field "rejections" (list $rej)) (field "records" $rb)))
  (func $update-and-emit (param "groups" $gb) (result {result})
    (canon lift (core func $i "update-and-emit") (memory $mem) (realloc $realloc)))
  (instance $fused
    (export "record-batch" (type $rb))
    (export "rejection" (type $rej))
    (export "group-batch" (type $gb))
    (export "update-and-emit-output" (type $ueo))
    (export "update-and-emit" (func $update-and-emit)))
  (export "weir:transform/update-and-emit@0.1.0" (instance $fused))
)"#
    );
    let wat = aggregator_wat(drop_accumulators).replacen(
        "  )\n  (core instance $i (instantiate $m))",
        &core,
        1,
    );
    let end = wat.rfind(')').expect("a component");
    format!("{}{component}", &wat[..end])
}

#[test]
fn a_fused_update_and_emit_is_used_and_its_output_validated() {
    let engine = engine();
    let groups = GroupBatch {
        accumulator_ends: vec![0, 3],
        accumulators: b"abc".to_vec(),
        record_ends: vec![1, 2],
        records: batch(&["x", "y"]),
    };
    let module =
        load_wat(&engine, "fused.wasm", &fused_aggregator_wat(false, "$ueo")).expect("load");
    let mut agg = module
        .instantiate_aggregator(&GuestLimits::default(), BTreeMap::new())
        .expect("inst");
    assert!(agg.has_update_and_emit());
    let (out, records) = agg
        .update_and_emit(groups.clone())
        .expect("update-and-emit");
    assert_eq!(out.accumulator_ends, [0, 3]);
    assert_eq!(out.accumulators, b"abc");
    assert!(records.is_empty());
    // Without the fused export, an aggregator has none (and `update` still works).
    let plain = load_wat(&engine, "agg.wasm", &aggregator_wat(false)).expect("load");
    let plain = plain
        .instantiate_aggregator(&GuestLimits::default(), BTreeMap::new())
        .expect("inst");
    assert!(!plain.has_update_and_emit());

    let module = load_wat(
        &engine,
        "fused-bad.wasm",
        &fused_aggregator_wat(true, "$ueo"),
    )
    .expect("load");
    let mut agg = module
        .instantiate_aggregator(&GuestLimits::default(), BTreeMap::new())
        .expect("inst");
    let err = agg.update_and_emit(groups).expect_err("must fail");
    assert_eq!(
        err.to_string(),
        "fused-bad.wasm: guest returned malformed output: update returned 0 accumulators for 2 groups"
    );
}

#[test]
fn a_fused_update_and_emit_of_the_wrong_type_is_refused_at_load() {
    let engine = engine();
    let err = load_wat(
        &engine,
        "impostor.wasm",
        &fused_aggregator_wat(false, "u32"),
    )
    .expect_err("must fail");
    assert_eq!(
        err.to_string(),
        "impostor.wasm: does not match this host's weir:transform world aggregator: function \
         update-and-emit of weir:transform/update-and-emit@0.1.0 has the wrong type: expected \
         `record` found `u32`"
    );
}

// ---------------------------------------------------------------- load checks

#[test]
fn core_module_is_refused() {
    let engine = engine();
    // The smallest core module: magic + version 1.
    let err = engine
        .load_bytes("core.wasm", b"\0asm\x01\0\0\0")
        .expect_err("must fail");
    let msg = err.to_string();
    assert!(matches!(err, EngineError::Invalid { .. }), "{err:?}");
    assert!(
        msg.contains("core.wasm: is a core WebAssembly module, not a component"),
        "{msg}"
    );
    assert!(msg.contains("--target wasm32-wasip2"), "{msg}");
}

#[test]
fn garbage_bytes_are_refused() {
    let engine = engine();
    let err = engine
        .load_bytes("junk.wasm", b"#!/bin/sh\necho hi\n")
        .expect_err("must fail");
    assert_eq!(
        err.to_string(),
        "junk.wasm: is not a WebAssembly binary (it does not start with \\0asm)"
    );
    // Right magic, broken body: wasmtime's parser explains.
    let err = engine
        .load_bytes("broken.wasm", b"\0asm\x0d\0\x01\0\x07\x07")
        .expect_err("must fail");
    assert!(
        err.to_string()
            .starts_with("broken.wasm: is not a valid WebAssembly component"),
        "{err}"
    );
}

#[test]
fn component_without_a_weir_world_is_refused() {
    let engine = engine();
    let wat = r#"(component
        (core module $m (func (export "run")))
        (core instance $i (instantiate $m))
        (func $run (canon lift (core func $i "run")))
        (instance $api (export "run" (func $run)))
        (export "wasi:cli/run@0.2.0" (instance $api)))"#;
    let err = load_wat(&engine, "cli.wasm", wat).expect_err("must fail");
    assert_eq!(
        err.to_string(),
        "cli.wasm: exports wasi:cli/run@0.2.0; a weir guest exports weir:transform/map or weir:transform/aggregate"
    );
}

/// What a refusal for foreign imports says after the offenders: everything allowed.
const ALLOWED_SUFFIX: &str = "which a weir guest may not use (allowed: \
    weir:transform/{log,config,types}, wasi:io/{error,streams,poll}, \
    wasi:cli/{stdout,stderr,stdin,exit,environment,terminal-input,terminal-output,\
    terminal-stdin,terminal-stdout,terminal-stderr}, wasi:clocks/{wall-clock,monotonic-clock}, \
    wasi:random/{random,insecure,insecure-seed}, wasi:filesystem/{types,preopens}, \
    wasi:sockets/{network,instance-network,tcp,tcp-create-socket,udp,udp-create-socket,\
    ip-name-lookup}, WASI at 0.2.x; wasi:http is not linked)";

#[test]
fn foreign_imports_are_all_listed_and_wasi_0_2_is_not_among_them() {
    // Filesystem and sockets load (deny-by-default); a foreign interface, wasi:http and
    // WASI 0.3 do not, all named on one line.
    let engine = engine();
    let imports = r#"
        (import "wasi:io/streams@0.2.3" (instance))
        (import "wasi:filesystem/types@0.2.3" (instance))
        (import "acme:evil/thing@1.0.0" (instance))
        (import "wasi:filesystem/preopens@0.2.3" (instance))
        (import "wasi:sockets/tcp@0.2.3" (instance))
        (import "wasi:http/outgoing-handler@0.2.3" (instance))
        (import "wasi:cli/environment@0.3.0" (instance))"#;
    let err =
        load_wat(&engine, "sneaky.wasm", &mapper_wat(imports, LOOP_BODY)).expect_err("must fail");
    assert!(matches!(err, EngineError::Invalid { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "sneaky.wasm: imports acme:evil/thing@1.0.0, wasi:http/outgoing-handler@0.2.3, \
             wasi:cli/environment@0.3.0 {ALLOWED_SUFFIX}"
        )
    );
    let wasi_only = r#"
        (import "wasi:filesystem/types@0.2.3" (instance))
        (import "wasi:sockets/tcp@0.2.9" (instance))"#;
    let module = load_wat(&engine, "files.wasm", &mapper_wat(wasi_only, LOOP_BODY));
    assert!(module.is_ok(), "{:?}", module.err());
}

#[test]
fn every_allowed_import_is_linked_in_both_worlds() {
    let engine = engine();
    let imports: String = ALLOWED_IMPORTS
        .iter()
        .map(|name| {
            let version = if name.starts_with("weir:") {
                "0.1.0"
            } else {
                "0.2.0"
            };
            format!("(import \"{name}@{version}\" (instance))\n")
        })
        .collect();
    let module = load_wat(
        &engine,
        "all-imports.wasm",
        &mapper_wat(&imports, LOOP_BODY),
    );
    assert!(module.is_ok(), "{:?}", module.err());
    // Same set against the aggregator linker: splice the imports into its component.
    let agg = aggregator_wat(false).replacen("(component", &format!("(component\n{imports}"), 1);
    let module = load_wat(&engine, "all-imports-agg.wasm", &agg);
    assert!(module.is_ok(), "{:?}", module.err());
}

#[test]
fn module_identity_is_sha256_of_its_bytes() {
    let engine = engine();
    let module = load_wat(&engine, "echo.wasm", &mapper_wat("", &echo_body(0, 0))).expect("load");
    assert_eq!(module.name(), "echo.wasm");
    assert_eq!(module.sha256_hex().len(), 64);
    assert!(module.sha256_hex().bytes().all(|b| b.is_ascii_hexdigit()));
    let err = module
        .instantiate_aggregator(&GuestLimits::default(), BTreeMap::new())
        .expect_err("must fail");
    assert_eq!(
        err.to_string(),
        "echo.wasm: implements world mapper, but this step needs world aggregator"
    );
}

// ---------------------------------------------------------------- calls and limits

#[test]
fn echo_mapper_moves_batches_and_is_reused_across_calls() {
    let engine = engine();
    let mut mapper = wat_mapper(
        &engine,
        "echo.wasm",
        &echo_body(0, 0),
        &GuestLimits::default(),
    );
    for round in 0..50 {
        let input = batch(&["a", "bb", &format!("round {round}")]);
        let out = mapper.map(input.clone()).expect("map");
        assert_eq!(out.records, input);
        assert!(out.rejections.is_empty());
    }
    let out = mapper.map(RecordBatch::default()).expect("empty batch");
    assert!(out.records.is_empty());
}

#[test]
fn rejection_index_out_of_range_is_bad_output() {
    let engine = engine();
    // One rejection at address 256: index 7, reason "no" at 272.
    let body = format!(
        "(i32.store (i32.const 256) (i32.const 7))
         (i32.store (i32.const 260) (i32.const 272))
         (i32.store (i32.const 264) (i32.const 2))
         (i32.store16 (i32.const 272) (i32.const 0x6f6e))
         {}",
        echo_body(256, 1)
    );
    let mut mapper = wat_mapper(&engine, "liar.wasm", &body, &GuestLimits::default());
    let err = mapper.map(batch(&["a", "b"])).expect_err("must fail");
    assert_eq!(
        err.to_string(),
        "liar.wasm: guest returned malformed output: rejection index 7 is out of range for an input of 2 records"
    );
    // With 8 input records index 7 is fine, and BadOutput did not poison the instance.
    let out = mapper
        .map(batch(&["a", "b", "c", "d", "e", "f", "g", "h"]))
        .expect("in range");
    assert_eq!(
        out.rejections,
        [Rejection {
            index: 7,
            reason: "no".into()
        }]
    );
}

#[test]
fn infinite_loop_hits_the_cpu_deadline_and_poisons() {
    let engine = engine();
    let timeout = Duration::from_millis(200);
    let mut mapper = wat_mapper(
        &engine,
        "spin.wasm",
        LOOP_BODY,
        &limits(DEFAULT_GUEST_MEMORY, timeout),
    );
    let start = Instant::now();
    let err = mapper.map(batch(&["x"])).expect_err("must fail");
    let elapsed = start.elapsed();
    assert!(matches!(err, EngineError::CpuDeadline { .. }), "{err:?}");
    assert!(elapsed >= timeout && elapsed < timeout * 5, "{elapsed:?}");
    assert_eq!(
        err.to_string(),
        "spin.wasm: guest call exceeded its time limit of 200ms and was stopped"
    );
    let again = mapper.map(batch(&["x"])).expect_err("must fail");
    assert!(matches!(again, EngineError::Poisoned { .. }), "{again:?}");
}

/// A mapper that imports `wasi:io/poll` and `wasi:clocks/monotonic-clock` (as Rust's
/// `std::thread::sleep` does) and runs `body` before echoing its input. In `body`,
/// `$subscribe` is `subscribe-duration` (nanoseconds -> pollable handle), `$block` is
/// `pollable.block` and `$poll` is `poll(list ptr, len, result ptr)`; memory and
/// `realloc` live in a separate core instance so the lowered `poll` can use them.
fn sleeper_wat(body: &str) -> String {
    let echo = echo_body(0, 0);
    format!(
        r#"(component
  (import "wasi:io/poll@0.2.0" (instance $io-poll
    (export "pollable" (type $p (sub resource)))
    (export "[method]pollable.block" (func (param "self" (borrow $p))))
    (export "poll" (func (param "in" (list (borrow $p))) (result (list u32))))))
  (alias export $io-poll "pollable" (type $pollable))
  (import "wasi:clocks/monotonic-clock@0.2.0" (instance $clock
    (export "pollable" (type $p (eq $pollable)))
    (export "subscribe-duration" (func (param "when" u64) (result (own $p))))))
  (core module $libc
    {CORE_COMMON})
  (core instance $libc (instantiate $libc))
  (alias core export $libc "memory" (core memory $mem))
  (alias core export $libc "realloc" (core func $realloc))
  (core func $subscribe (canon lower (func $clock "subscribe-duration")))
  (core func $block (canon lower (func $io-poll "[method]pollable.block")))
  (core func $poll (canon lower (func $io-poll "poll") (memory $mem) (realloc $realloc)))
  (core instance $wasi
    (export "subscribe" (func $subscribe))
    (export "block" (func $block))
    (export "poll" (func $poll)))
  (core module $m
    (import "libc" "memory" (memory 1))
    (import "wasi" "subscribe" (func $subscribe (param i64) (result i32)))
    (import "wasi" "block" (func $block (param i32)))
    (import "wasi" "poll" (func $poll (param i32 i32 i32)))
    (func (export "map") (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
      {body}
      {echo}))
  (core instance $i (instantiate $m
    (with "libc" (instance $libc))
    (with "wasi" (instance $wasi))))
  {TYPES}
  (func $map (param "batch" $rb) (result $out)
    (canon lift (core func $i "map") (memory $mem) (realloc $realloc)))
  (instance $api
    (export "record-batch" (type $rb))
    (export "rejection" (type $rej))
    (export "map-output" (type $out))
    (export "map" (func $map)))
  (export "weir:transform/map@0.1.0" (instance $api))
)"#
    )
}

/// `pollable.block` on a `nanos` sleep.
fn block_body(nanos: u64) -> String {
    format!("(call $block (call $subscribe (i64.const {nanos})))")
}

/// `poll([sleep of nanos])`; traps unless the result is exactly `[0]`.
fn poll_body(nanos: u64) -> String {
    format!(
        "(i32.store (i32.const 512) (call $subscribe (i64.const {nanos})))
         (call $poll (i32.const 512) (i32.const 1) (i32.const 520))
         (if (i32.ne (i32.load offset=4 (i32.const 520)) (i32.const 1)) (then unreachable))
         (if (i32.ne (i32.load (i32.load (i32.const 520))) (i32.const 0)) (then unreachable))"
    )
}

fn wat_sleeper(name: &str, body: &str, limits: &GuestLimits) -> (WasmEngine, MapperInstance) {
    let engine = engine();
    let module = load_wat(&engine, name, &sleeper_wat(body)).expect("load wat sleeper");
    let mapper = module
        .instantiate_mapper(limits, BTreeMap::new())
        .expect("instantiate wat sleeper");
    (engine, mapper)
}

#[test]
fn sleep_in_a_host_call_is_cut_off_at_the_deadline() {
    let timeout = Duration::from_millis(200);
    let limits = limits(DEFAULT_GUEST_MEMORY, timeout);
    let five_minutes = 300_000_000_000;
    // Rust's `std::thread::sleep` (`block`), wasi-libc's `poll`, and a sleep so long
    // wasmtime-wasi waits forever (`u64::MAX` ns does not fit in an `Instant`).
    for (name, body) in [
        ("block.wasm", block_body(five_minutes)),
        ("poll.wasm", poll_body(five_minutes)),
        ("forever.wasm", block_body(u64::MAX)),
    ] {
        let (_engine, mut mapper) = wat_sleeper(name, &body, &limits);
        let start = Instant::now();
        let err = mapper.map(batch(&["x"])).expect_err("must fail");
        let elapsed = start.elapsed();
        assert!(
            matches!(err, EngineError::CpuDeadline { .. }),
            "{name}: {err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!("{name}: guest call exceeded its time limit of 200ms and was stopped")
        );
        // At least the whole budget; far less than the sleep (generous: a loaded machine).
        assert!(
            elapsed >= timeout && elapsed < Duration::from_secs(10),
            "{name}: {elapsed:?}"
        );
        let again = mapper.map(batch(&["x"])).expect_err("must fail");
        assert!(matches!(again, EngineError::Poisoned { .. }), "{again:?}");
    }
}

#[test]
fn sleeps_within_the_deadline_return_to_the_guest() {
    let limits = limits(DEFAULT_GUEST_MEMORY, Duration::from_secs(2));
    let ten_ms = 10_000_000;
    for (name, body) in [
        ("block.wasm", block_body(ten_ms)),
        ("poll.wasm", poll_body(ten_ms)),
        ("zero.wasm", poll_body(0)),
    ] {
        let (_engine, mut mapper) = wat_sleeper(name, &body, &limits);
        // Each call gets its own budget: three calls sleep in turn, and the poll result
        // the guest checks holds its own pollable only, never the host's timer.
        for _ in 0..3 {
            let out = mapper.map(batch(&["a", "b"])).expect("sleep within budget");
            assert_eq!(values(&out.records), ["a", "b"], "{name}");
        }
    }
}

#[test]
fn time_waited_in_host_calls_adds_up_against_the_deadline() {
    let timeout = Duration::from_millis(200);
    // 50 ms naps forever: each returns in time, their sum does not.
    let body = format!("(loop $l {} (br $l))", block_body(50_000_000));
    let (_engine, mut mapper) =
        wat_sleeper("napper.wasm", &body, &limits(DEFAULT_GUEST_MEMORY, timeout));
    let start = Instant::now();
    let err = mapper.map(batch(&["x"])).expect_err("must fail");
    assert!(matches!(err, EngineError::CpuDeadline { .. }), "{err:?}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

/// `count` calls of `subscribe-duration`, each handle kept (never dropped).
fn hoard_handles_body(count: u32) -> String {
    format!(
        "(i32.store (i32.const 600) (i32.const 0))
         (block $done (loop $again
           (drop (call $subscribe (i64.const 1000000000)))
           (i32.store (i32.const 600) (i32.add (i32.load (i32.const 600)) (i32.const 1)))
           (br_if $again (i32.lt_u (i32.load (i32.const 600)) (i32.const {count})))))"
    )
}

#[test]
fn live_resource_handles_are_capped_per_instance() {
    // Each call that creates a handle (here a pollable: two table entries, the timer
    // and its pollable) grows host memory; a guest hoarding them traps at the cap
    // (16,384 entries) instead of pinning host memory without bound.
    let (_engine, mut fine) = wat_sleeper(
        "hoard.wasm",
        &hoard_handles_body(5_000),
        &GuestLimits::default(),
    );
    fine.map(batch(&["a"]))
        .expect("5,000 live handles are allowed");
    let (_engine, mut hoarder) = wat_sleeper(
        "hoard.wasm",
        &hoard_handles_body(20_000),
        &GuestLimits::default(),
    );
    let err = hoarder.map(batch(&["a"])).expect_err("must fail");
    assert!(matches!(err, EngineError::Trap { .. }), "{err:?}");
    assert!(
        err.to_string().contains("resource table has no free keys"),
        "{err}"
    );
}

#[test]
fn memory_hog_hits_the_memory_limit() {
    let engine = engine();
    let mut mapper = wat_mapper(
        &engine,
        "hog.wasm",
        HOG_BODY,
        &limits(4 << 20, Duration::from_secs(5)),
    );
    let err = mapper.map(batch(&["x"])).expect_err("must fail");
    assert!(
        matches!(
            err,
            EngineError::MemoryLimit {
                limit_bytes: 4194304,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "hog.wasm: guest exceeded its memory limit of 4194304 bytes"
    );
}

#[test]
fn plain_trap_is_reported_with_its_cause() {
    let engine = engine();
    let mut mapper = wat_mapper(&engine, "oops.wasm", "unreachable", &GuestLimits::default());
    let err = mapper.map(batch(&["x"])).expect_err("must fail");
    assert!(matches!(err, EngineError::Trap { .. }), "{err:?}");
    assert!(err.to_string().contains("unreachable"), "{err}");
}

#[test]
fn aggregator_update_and_emit_are_validated() {
    let engine = engine();
    let module = load_wat(&engine, "agg.wasm", &aggregator_wat(false)).expect("load");
    assert_eq!(module.world(), World::Aggregator);
    let mut agg = module
        .instantiate_aggregator(&GuestLimits::default(), BTreeMap::new())
        .expect("inst");
    let groups = GroupBatch {
        accumulator_ends: vec![0, 3],
        accumulators: b"abc".to_vec(),
        record_ends: vec![1, 2],
        records: batch(&["x", "y"]),
    };
    let out = agg.update(groups.clone()).expect("update");
    assert_eq!(out.accumulator_ends, [0, 3]);
    assert_eq!(out.accumulators, b"abc");
    let emitted = agg
        .emit(EmitBatch {
            key_ends: vec![1],
            keys: b"k".to_vec(),
            windows: vec![Some(Window { start: 0, end: 10 })],
            accumulator_ends: vec![3],
            accumulators: b"abc".to_vec(),
        })
        .expect("emit");
    assert!(emitted.is_empty());

    let module = load_wat(&engine, "agg-bad.wasm", &aggregator_wat(true)).expect("load");
    let mut agg = module
        .instantiate_aggregator(&GuestLimits::default(), BTreeMap::new())
        .expect("inst");
    let err = agg.update(groups).expect_err("must fail");
    assert_eq!(
        err.to_string(),
        "agg-bad.wasm: guest returned malformed output: update returned 0 accumulators for 2 groups"
    );
}

#[test]
fn compiled_components_are_cached_on_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wat = mapper_wat("", &echo_body(0, 0));
    let first = WasmEngine::new(Some(dir.path())).expect("engine");
    load_wat(&first, "echo.wasm", &wat).expect("load");
    assert_eq!(first.cache_stats(), Some((0, 1)));
    let second = WasmEngine::new(Some(dir.path())).expect("engine");
    load_wat(&second, "echo.wasm", &wat).expect("load");
    assert_eq!(second.cache_stats(), Some((1, 0)));
}

// ---------------------------------------------------------------- real guests

fn load_guest(engine: &WasmEngine, name: &str) -> GuestModule {
    engine
        .load(&guest_path(name))
        .unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

#[test]
fn guest_uppercase_maps_a_batch_and_is_reused() {
    let engine = engine();
    let module = load_guest(&engine, "uppercase");
    assert_eq!(module.world(), World::Mapper);
    let mut mapper = module
        .instantiate_mapper(&GuestLimits::default(), BTreeMap::new())
        .expect("inst");
    for _ in 0..20 {
        let out = mapper.map(batch(&["hello", "Wörld", ""])).expect("map");
        assert_eq!(values(&out.records), ["HELLO", "WÖRLD", ""]);
        assert!(out.rejections.is_empty());
    }
}

#[test]
fn guest_infinite_loop_is_stopped_at_the_deadline() {
    let engine = engine();
    let module = load_guest(&engine, "infinite_loop");
    let mut mapper = module
        .instantiate_mapper(&GuestLimits::default(), BTreeMap::new())
        .expect("inst");
    let out = mapper
        .map(batch(&["a", "b"]))
        .expect("records pass through until the trigger");
    assert_eq!(values(&out.records), ["a", "b"]);
    let start = Instant::now();
    let err = mapper.map(batch(&["a", "loop"])).expect_err("must fail");
    let elapsed = start.elapsed();
    assert!(matches!(err, EngineError::CpuDeadline { .. }), "{err:?}");
    assert!(
        elapsed >= DEFAULT_CALL_TIMEOUT && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
    let again = mapper.map(batch(&["a"])).expect_err("must fail");
    assert!(matches!(again, EngineError::Poisoned { .. }), "{again:?}");
    // A fresh instance from the same module works.
    let mut fresh = module
        .instantiate_mapper(&GuestLimits::default(), BTreeMap::new())
        .expect("inst");
    assert_eq!(
        values(&fresh.map(batch(&["a"])).expect("map").records),
        ["a"]
    );
}

#[test]
fn guest_sleeper_is_stopped_at_the_deadline() {
    let engine = engine();
    let module = load_guest(&engine, "sleeper");
    let mut mapper = module
        .instantiate_mapper(&GuestLimits::default(), BTreeMap::new())
        .expect("inst");
    let out = mapper
        .map(batch(&["a", "sleep 0"]))
        .expect("records pass through until the trigger");
    assert_eq!(values(&out.records), ["a", "sleep 0"]);
    // std::thread::sleep(5 s) under the 1 s default: stopped at the deadline, not after
    // the sleep (the bound is loose; a sleep that ran its course takes 5 s or more).
    let start = Instant::now();
    let err = mapper.map(batch(&["a", "sleep 5"])).expect_err("must fail");
    let elapsed = start.elapsed();
    assert_eq!(
        err.to_string(),
        "sleeper.wasm: guest call exceeded its time limit of 1s and was stopped"
    );
    assert!(
        elapsed >= DEFAULT_CALL_TIMEOUT && elapsed < Duration::from_secs(4),
        "{elapsed:?}"
    );
    let again = mapper.map(batch(&["a"])).expect_err("must fail");
    assert!(matches!(again, EngineError::Poisoned { .. }), "{again:?}");
}

#[test]
fn guest_memory_hog_hits_the_memory_limit() {
    let engine = engine();
    let module = load_guest(&engine, "memory_hog");
    let mut mapper = module
        .instantiate_mapper(&GuestLimits::default(), BTreeMap::new())
        .expect("inst");
    assert_eq!(
        values(&mapper.map(batch(&["a"])).expect("map").records),
        ["a"]
    );
    let err = mapper.map(batch(&["hog"])).expect_err("must fail");
    assert!(
        matches!(
            err,
            EngineError::MemoryLimit {
                limit_bytes: DEFAULT_GUEST_MEMORY,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn guest_panic_is_reported_with_its_message() {
    let engine = engine();
    let module = load_guest(&engine, "panicker");
    let mut mapper = module
        .instantiate_mapper(&GuestLimits::default(), BTreeMap::new())
        .expect("inst");
    assert_eq!(
        values(&mapper.map(batch(&["a"])).expect("map").records),
        ["a"]
    );
    let err = mapper.map(batch(&["a", "boom"])).expect_err("must fail");
    let EngineError::GuestPanic { message, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(message.starts_with("panicked at "), "{message}");
    assert!(
        message.ends_with("weir-test: guest panicked on purpose"),
        "{message}"
    );
}

#[test]
fn engine_types_can_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<WasmEngine>();
    send_sync::<GuestModule>();
    send::<MapperInstance>();
    send::<AggregatorInstance>();
}

#[test]
fn instances_keep_their_deadline_after_the_engine_is_dropped() {
    let engine = engine();
    let module = load_wat(&engine, "spin.wasm", &mapper_wat("", LOOP_BODY)).expect("load");
    let limits = limits(DEFAULT_GUEST_MEMORY, Duration::from_millis(50));
    let mut mapper = module
        .instantiate_mapper(&limits, BTreeMap::new())
        .expect("inst");
    drop(module);
    drop(engine);
    let err = mapper.map(batch(&["x"])).expect_err("must fail");
    assert!(matches!(err, EngineError::CpuDeadline { .. }), "{err:?}");
}

// ---------------------------------------------------------------- issue 7: output bounds,
// module files, one-line errors

/// One rejection of index 0 at address 256 with reason "no", `count` times.
fn repeated_rejection_body(count: u32) -> String {
    let mut s = String::new();
    for i in 0..count {
        let at = 256 + 12 * i;
        s.push_str(&format!(
            "(i32.store (i32.const {at}) (i32.const 0))
             (i32.store (i32.const {}) (i32.const 240))
             (i32.store (i32.const {}) (i32.const 2))\n",
            at + 4,
            at + 8
        ));
    }
    format!(
        "(i32.store16 (i32.const 240) (i32.const 0x6f6e)) {s} {}",
        echo_body(256, count)
    )
}

#[test]
fn a_record_is_rejected_at_most_once() {
    // Today's code accepted this and made 5 dead letters out of one record.
    let engine = engine();
    let body = repeated_rejection_body(5);
    let mut mapper = wat_mapper(&engine, "amplifier.wasm", &body, &GuestLimits::default());
    let err = mapper.map(batch(&["a"])).expect_err("must fail");
    assert_eq!(
        err.to_string(),
        "amplifier.wasm: guest returned malformed output: rejection index 0 appears more than \
         once; each input record can be rejected at most once"
    );
    // Once is fine.
    let mut once = wat_mapper(
        &engine,
        "once.wasm",
        &repeated_rejection_body(1),
        &GuestLimits::default(),
    );
    let out = once.map(batch(&["a"])).expect("one rejection");
    assert_eq!(out.rejections.len(), 1);
}

/// Returns `records` empty records (every list of the batch points at zeroed memory).
fn many_records_body(records: u32) -> String {
    format!(
        "(drop (memory.grow (i32.const 16)))
         (memory.fill (i32.const 65536) (i32.const 0) (i32.const 983040))
         (i32.store offset=0 (i32.const 16) (i32.const 65536))
         (i32.store offset=4 (i32.const 16) (i32.const {records}))
         (i32.store offset=8 (i32.const 16) (i32.const 65536))
         (i32.store offset=12 (i32.const 16) (i32.const {records}))
         (i32.store offset=16 (i32.const 16) (i32.const 0))
         (i32.store offset=20 (i32.const 16) (i32.const 0))
         (i32.store offset=24 (i32.const 16) (i32.const 65536))
         (i32.store offset=28 (i32.const 16) (i32.const {records}))
         (i32.store offset=32 (i32.const 16) (i32.const 0))
         (i32.store offset=36 (i32.const 16) (i32.const 0))
         (i32.store offset=40 (i32.const 16) (i32.const 0))
         (i32.store offset=44 (i32.const 16) (i32.const 0))
         (i32.const 16)"
    )
}

#[test]
fn records_out_per_call_are_bounded_by_a_multiple_of_the_input() {
    // One input record, 100,000 output records: refused (today: accepted).
    let engine = engine();
    let mut mapper = wat_mapper(
        &engine,
        "fanout.wasm",
        &many_records_body(100_000),
        &GuestLimits::default(),
    );
    let err = mapper.map(batch(&["a"])).expect_err("must fail");
    assert_eq!(
        err.to_string(),
        "fanout.wasm: guest returned malformed output: 100000 records for an input of 1; \
         a call may return at most 65536 (64 per input record, at least 65536)"
    );
    // The same output for 2,000 input records is within 64 per record.
    let inputs: Vec<String> = (0..2_000).map(|i| i.to_string()).collect();
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let out = mapper.map(batch(&inputs)).expect("within bounds");
    assert_eq!(out.records.len(), 100_000);
}

#[test]
fn a_result_past_the_hostcall_fuel_is_a_one_line_error() {
    // A map result whose `values` list is 129 MiB: wasmtime's hostcall fuel (128 MiB)
    // stops the copy. Today: a multi-line "guest trapped" with a backtrace.
    let engine = engine();
    let body = "(drop (memory.grow (i32.const 2100)))
         (memory.fill (i32.const 16) (i32.const 0) (i32.const 48))
         (i32.store offset=32 (i32.const 16) (i32.const 65536))
         (i32.store offset=36 (i32.const 16) (i32.const 135266304))
         (i32.const 16)";
    let mut mapper = wat_mapper(
        &engine,
        "bulky.wasm",
        body,
        &limits(256 << 20, DEFAULT_CALL_TIMEOUT),
    );
    let err = mapper.map(batch(&["a"])).expect_err("must fail");
    assert_eq!(
        err.to_string(),
        "bulky.wasm: guest passed more than 134217728 bytes to the host in one call and was stopped"
    );
}

/// A mapper whose body may call one host function, `$host`: `import` declares the
/// component instance `$imported` exporting it as `name`, `params` is its core signature.
fn host_call_wat(import: &str, name: &str, params: &str, body: &str) -> String {
    let echo = echo_body(0, 0);
    format!(
        r#"(component
  {import}
  (core module $libc
    {CORE_COMMON})
  (core instance $libc (instantiate $libc))
  (alias core export $libc "memory" (core memory $mem))
  (alias core export $libc "realloc" (core func $realloc))
  (core func $host (canon lower (func $imported "{name}") (memory $mem) (realloc $realloc)))
  (core instance $wasi (export "host" (func $host)))
  (core module $m
    (import "libc" "memory" (memory 1))
    (import "wasi" "host" (func $host {params}))
    (func $f (export "map") (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
      {body}
      {echo}))
  (core instance $i (instantiate $m
    (with "libc" (instance $libc))
    (with "wasi" (instance $wasi))))
  {TYPES}
  (func $map (param "batch" $rb) (result $out)
    (canon lift (core func $i "map") (memory $mem) (realloc $realloc)))
  (instance $api
    (export "record-batch" (type $rb))
    (export "rejection" (type $rej))
    (export "map-output" (type $out))
    (export "map" (func $map)))
  (export "weir:transform/map@0.1.0" (instance $api))
)"#
    )
}

/// A mapper importing `wasi:random/random.get-random-bytes` as `$host (len, retptr)`.
fn random_wat(body: &str) -> String {
    host_call_wat(
        r#"(import "wasi:random/random@0.2.0" (instance $imported
    (export "get-random-bytes" (func (param "len" u64) (result (list u8))))))"#,
        "get-random-bytes",
        "(param i64 i32)",
        body,
    )
}

/// A mapper importing weir's `log` as `$host (level, ptr, len)`.
fn log_wat(body: &str) -> String {
    host_call_wat(
        r#"(import "weir:transform/log@0.1.0" (instance $imported
    (type $level (enum "trace" "debug" "info" "warn" "error"))
    (export "level" (type $level' (eq $level)))
    (export "log" (func (param "level" $level') (param "message" string)))))"#,
        "log",
        "(param i32 i32 i32)",
        body,
    )
}

#[test]
fn a_host_call_argument_past_the_hostcall_fuel_is_a_one_line_error() {
    // `log` with a 129 MiB message: the copy into the host is stopped by wasmtime's
    // hostcall fuel (128 MiB), as a call result is.
    let engine = engine();
    let module = load_wat(
        &engine,
        "chatty.wasm",
        &log_wat(
            "(drop (memory.grow (i32.const 2100)))
             (call $host (i32.const 2) (i32.const 65536) (i32.const 135266304))",
        ),
    )
    .expect("load");
    let mut mapper = module
        .instantiate_mapper(&limits(256 << 20, DEFAULT_CALL_TIMEOUT), BTreeMap::new())
        .expect("instantiate");
    let err = mapper.map(batch(&["a"])).expect_err("must fail");
    assert_eq!(
        err.to_string(),
        "chatty.wasm: guest passed more than 134217728 bytes to the host in one call and was stopped"
    );
}

#[test]
fn a_failed_host_call_with_a_backtrace_is_one_line() {
    // get-random-bytes(1 TiB): wasmtime-wasi refuses, the trap carries a multi-line
    // wasm backtrace (today: 4 lines).
    let engine = engine();
    let module = load_wat(
        &engine,
        "greedy.wasm",
        &random_wat("(call $host (i64.const 1099511627776) (i32.const 512))"),
    )
    .expect("load");
    let mut mapper = module
        .instantiate_mapper(&GuestLimits::default(), BTreeMap::new())
        .expect("instantiate");
    let err = mapper.map(batch(&["a"])).expect_err("must fail");
    let msg = err.to_string();
    assert_eq!(
        msg,
        "greedy.wasm: guest trapped: requested len 1099511627776 exceeds limit 1048576; \
         error while executing at wasm backtrace: | 0:    0x1a2 - m!float"
    );
}

#[test]
fn a_map_export_of_the_wrong_type_is_refused_at_load() {
    // `map: func(u32) -> u32` under the right names: today load (and `weir validate`)
    // accepted it and the first batch failed.
    let engine = engine();
    let wat = r#"(component
  (core module $m (func (export "map") (param i32) (result i32) (local.get 0)))
  (core instance $i (instantiate $m))
  (func $map (param "batch" u32) (result u32) (canon lift (core func $i "map")))
  (instance $api (export "map" (func $map)))
  (export "weir:transform/map@0.1.0" (instance $api))
)"#;
    let err = load_wat(&engine, "impostor.wasm", wat).expect_err("must fail");
    assert_eq!(
        err.to_string(),
        "impostor.wasm: does not match this host's weir:transform world mapper: function map \
         of weir:transform/map@0.1.0 has the wrong type: expected `record` found `u32`"
    );
}

#[test]
fn wasmparser_errors_are_one_line() {
    let engine = engine();
    let kebab = load_wat(
        &engine,
        "kebab.wasm",
        r#"(component (import "NotKebab" (func)))"#,
    )
    .expect_err("must fail")
    .to_string();
    let layer = engine
        .load_bytes("layer.wasm", b"\0asm\x0d\0\x02\0garbage")
        .expect_err("must fail")
        .to_string();
    for msg in [kebab, layer] {
        println!("{msg}");
        assert!(
            msg.contains(": is not a valid WebAssembly component: "),
            "{msg}"
        );
        assert!(!msg.contains('\n'), "{msg}");
    }
}

// ---- module files

#[test]
fn module_files_are_checked_before_reading() {
    let engine = engine();
    let dir = tempfile::tempdir().expect("tempdir");
    // A sparse file past the limit: refused from its size, not read.
    let big = dir.path().join("big.wasm");
    let file = std::fs::File::create(&big).expect("create");
    file.set_len(MAX_MODULE_BYTES + 1).expect("set_len");
    assert_eq!(
        engine.load(&big).expect_err("too big").to_string(),
        "big.wasm: is 67108865 bytes; a module may be at most 67108864 bytes (64 MiB)"
    );
    // A FIFO with no writer: refused without blocking in open.
    let fifo = dir.path().join("pipe.wasm");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    assert_eq!(
        engine.load(&fifo).expect_err("fifo").to_string(),
        "pipe.wasm: is not a regular file (a FIFO, socket or device); a module must be a .wasm file"
    );
    // A device that never ends.
    assert_eq!(
        engine
            .load(std::path::Path::new("/dev/zero"))
            .expect_err("device")
            .to_string(),
        "zero: is not a regular file (a FIFO, socket or device); a module must be a .wasm file"
    );
    assert_eq!(
        engine.load(dir.path()).expect_err("dir").to_string(),
        format!(
            "{}: is a directory; a module must be a .wasm file",
            dir.path().file_name().expect("name").to_string_lossy()
        )
    );
    // Bytes in memory (an upload) have the same limit.
    let huge = vec![0u8; usize::try_from(MAX_MODULE_BYTES).expect("fits") + 1];
    assert_eq!(
        engine
            .load_bytes("upload.wasm", &huge)
            .expect_err("too big")
            .to_string(),
        "upload.wasm: is 67108865 bytes; a module may be at most 67108864 bytes (64 MiB)"
    );
}

// ---- property: random bytes never panic the loader or the output checks

mod fuzz {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use proptest::prelude::*;

    use super::super::output_limits::{check_output_size, check_rejections};
    use super::*;

    static LOAD_CASES: AtomicUsize = AtomicUsize::new(0);
    static OUTPUT_CASES: AtomicUsize = AtomicUsize::new(0);

    /// Bytes that start like a component more often than chance would.
    fn module_bytes() -> impl Strategy<Value = Vec<u8>> {
        (
            prop_oneof![
                Just(b"\0asm\x0d\0\x01\0".to_vec()),
                Just(b"\0asm\x01\0\0\0".to_vec()),
                Just(Vec::new())
            ],
            proptest::collection::vec(any::<u8>(), 0..256),
        )
            .prop_map(|(mut head, tail)| {
                head.extend(tail);
                head
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn loading_random_bytes_never_panics(bytes in module_bytes()) {
            thread_local!(static ENGINE: WasmEngine = engine());
            let n = LOAD_CASES.fetch_add(1, Ordering::Relaxed) + 1;
            ENGINE.with(|engine| {
                if let Err(e) = engine.load_bytes("fuzz.wasm", &bytes) {
                    let msg = e.to_string();
                    prop_assert!(!msg.contains('\n'), "{}", msg);
                    prop_assert!(msg.starts_with("fuzz.wasm: "), "{}", msg);
                }
                Ok(())
            })?;
            if n.is_multiple_of(64) {
                println!("component loading: {n} random cases run");
            }
        }

        #[test]
        fn decoding_random_guest_output_never_panics(
            timestamps in 0usize..64,
            key_ends in proptest::collection::vec(any::<u32>(), 0..64),
            keys in proptest::collection::vec(any::<u8>(), 0..64),
            value_ends in proptest::collection::vec(any::<u32>(), 0..64),
            values in proptest::collection::vec(any::<u8>(), 0..64),
            rejections in proptest::collection::vec(any::<u32>(), 0..64),
            input_len in 0usize..64,
        ) {
            let n = OUTPUT_CASES.fetch_add(1, Ordering::Relaxed) + 1;
            let records = RecordBatch::from(crate::engine::bindings::wit_types::RecordBatch {
                timestamps: vec![0; timestamps],
                key_ends,
                keys,
                value_ends,
                values,
            });
            let rejections: Vec<Rejection> = rejections
                .into_iter()
                .map(|index| Rejection { index, reason: "r".into() })
                .collect();
            if records.validate().is_ok() {
                // Only a well-framed batch may be read record by record.
                prop_assert_eq!(records.iter().count(), records.len());
            }
            let checked = check_rejections(&rejections, input_len);
            let mut seen = std::collections::HashSet::new();
            let ok = rejections
                .iter()
                .all(|r| (r.index as usize) < input_len && seen.insert(r.index));
            prop_assert_eq!(checked.is_ok(), ok);
            let _ = check_output_size(records.len(), records.byte_size(), input_len, 0);
            if n.is_multiple_of(64) {
                println!("guest-output decoding: {n} random cases run");
            }
        }
    }
}
