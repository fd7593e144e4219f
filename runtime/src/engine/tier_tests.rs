//! Tiered code (`code_tier.rs`) with a real 19 MB Python guest: a first load starts on
//! baseline code, its instances learn when optimized code is ready and give the same
//! output on both, and a later load finds the optimized code in the cache.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::*;
use crate::record::batch::RecordBatch;
use crate::test_support::guest_path;

/// Longer than the optimized compile of the Python guest on a loaded 2-core machine.
const TIER_UP_WAIT: Duration = Duration::from_secs(300);

fn batch() -> RecordBatch {
    let mut b = RecordBatch::default();
    for (i, v) in ["hello", "Wörld", ""].iter().enumerate() {
        b.push(format!("k{i}").as_bytes(), v.as_bytes(), i as i64);
    }
    b
}

fn mapped(instance: &mut MapperInstance) -> Vec<String> {
    let out = instance.map(batch()).expect("map");
    out.records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value).into_owned())
        .collect()
}

fn wait_for_optimized(module: &GuestModule) {
    let started = Instant::now();
    while module.tier() != CodeTier::Optimized {
        assert!(
            started.elapsed() < TIER_UP_WAIT,
            "no optimized code after {TIER_UP_WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_large_module_starts_on_baseline_code_and_its_instances_move_to_optimized_code() {
    let cache = tempfile::tempdir().expect("tempdir");
    let path = guest_path("uppercase_py");
    let engine = WasmEngine::tiered(Some(cache.path())).expect("engine");
    let module = engine.load(&path).expect("load");
    assert_eq!(module.tier(), CodeTier::Baseline, "nothing compiled before");
    let limits = GuestLimits::default();
    let mut early = module
        .instantiate_mapper(&limits, BTreeMap::new())
        .expect("instantiate on baseline code");
    assert_eq!(mapped(&mut early), ["HELLO", "WÖRLD", ""]);
    assert!(!early.code_outdated());

    wait_for_optimized(&module);
    assert!(early.code_outdated(), "told once optimized code is ready");
    assert_eq!(mapped(&mut early), ["HELLO", "WÖRLD", ""], "still runs");
    let mut late = module
        .instantiate_mapper(&limits, BTreeMap::new())
        .expect("instantiate on optimized code");
    assert!(!late.code_outdated());
    assert_eq!(mapped(&mut late), ["HELLO", "WÖRLD", ""]);

    // The next run finds the optimized code in the cache and starts on it.
    let again = WasmEngine::tiered(Some(cache.path())).expect("engine");
    let module = again.load(&path).expect("load");
    assert_eq!(module.tier(), CodeTier::Optimized);
    let (hits, _) = again.cache_stats().expect("a cache");
    assert!(hits >= 1, "loaded from the cache");
}

#[test]
fn small_modules_start_on_optimized_code() {
    let cache = tempfile::tempdir().expect("tempdir");
    let tiered = WasmEngine::tiered(Some(cache.path())).expect("engine");
    let small = tiered.load(&guest_path("uppercase")).expect("load");
    assert_eq!(small.tier(), CodeTier::Optimized, "below TIER_UP_MIN_BYTES");
}

/// A large module using a proposal Winch lacks (tail calls) is compiled optimized at
/// once instead of failing to load.
#[test]
fn a_module_the_baseline_cannot_compile_starts_on_optimized_code() {
    let cache = tempfile::tempdir().expect("tempdir");
    let tiered = WasmEngine::tiered(Some(cache.path())).expect("engine");
    let padding = "x".repeat(TIER_UP_MIN_BYTES);
    let wat = super::tests::mapper_wat("", &super::tests::echo_body(0, 0)).replace(
        "(core module $m",
        &format!(
            "(core module $m (@custom \"padding\" \"{padding}\") \
             (func $zero (result i32) i32.const 0) \
             (func (export \"tail\") (result i32) return_call $zero)"
        ),
    );
    let bytes = wat::parse_str(&wat).expect("component");
    assert!(bytes.len() >= TIER_UP_MIN_BYTES);
    let module = tiered.load_bytes("tail.wasm", &bytes).expect("load");
    assert_eq!(module.tier(), CodeTier::Optimized);
}
