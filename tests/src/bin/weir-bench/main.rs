//! `weir-bench` (`make bench`): Weir's benchmarks, each figure beside a baseline
//! measured in the same run on the same machine, so ratios survive a noisy host.
//!
//! 1. map: generator -> WASM `uppercase` -> discard in one source task, against the same
//!    dataflow with two native operators: record by record (one copy of each value) and
//!    columnar (the value column upper-cased in place: no copy, the ceiling); and the
//!    operators alone on the same pre-built batches (thread CPU ns/record).
//! 2. aggregate: keyed `word-count` over RocksDB state (`aggregate`), against a native
//!    count over the same `KeyedState` and a tuned in-memory hashbrown count, in three
//!    shapes (hot keys, keys revisited, distinct keys); then the checkpoints of that
//!    state (the first, and a second of unchanged state: incremental, copies nothing).
//! 3. keys: keys that come back, end to end: the word count through `weir run`,
//!    windowed and unwindowed, over 1,000 keys (the baseline), `--keys` keys and ten
//!    times as many (uniform and Zipf 1.1), each seen 4 times on average, and each
//!    row's CPU per record over the baseline's (the target: at most 3 at a million).
//! 4. pause: the longest output pause of the aggregate while it checkpoints a
//!    1,000,000-key state, upload deferred (Weir) against inline (the task waits).
//! 5. guests: `uppercase` in Rust, Python and JavaScript: first and second load,
//!    a first run's tiered start, first call, the operator alone and end to end, each
//!    against the native operator.
//! 6. scaling: the map and the revisited-key aggregate through `weir run` at
//!    parallelism 1, 2, 4, ... up to the cores, weak scaling, with its efficiency.
//!
//! The map's and the aggregate's throughput figures are medians of `measure::RUNS` runs
//! with their spread, with both the calling thread's and the whole process's CPU per
//! record (`measure`).
//!
//! Each section runs in a child process of its own (`--section NAME`), which prints its
//! figures as JSON with its peak RSS (`VmHWM`), so every peak belongs to one section.
//! The parent prints the tables and writes them all to a JSON file (`--out`). A
//! benchmark, not a test: nothing here passes or fails.

mod aggregate;
mod guests;
mod keys;
mod map;
mod measure;
mod pause;
mod scaling;
mod weir_run;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use anyhow::Context;
use serde_json::{Value, json};
use weir::dataflow::operators::map::MapOperator;
use weir::engine::{GuestLimits, WasmEngine};

use aggregate::aggregate_figures;
use map::{
    NativeColumnarUppercase, NativeUppercase, generator_batches, map_throughput, operator_alone,
};
use measure::Figures;
pub use measure::thread_cpu;

/// Records per batch, in every benchmark.
pub const BATCH: usize = 1024;
/// Records of the map's operator-alone figure (pre-built, so held in memory: ~35 MiB),
/// and its rounds per operator.
const OPERATOR_ALONE: guests::AloneRuns = guests::AloneRuns {
    records: 256 * BATCH as u64,
    rounds: 7,
};
const SECTIONS: [&str; 6] = ["map", "aggregate", "keys", "pause", "guests", "scaling"];

struct Args {
    out: PathBuf,
    records: u64,
    keys: u64,
    sections: Vec<String>,
    /// Set in a child: run this section and print its JSON.
    section: Option<String>,
}

fn args() -> anyhow::Result<Args> {
    let mut args = Args {
        out: PathBuf::from("build/bench.json"),
        records: 2_000_000,
        keys: 1_000_000,
        sections: SECTIONS.iter().map(|s| s.to_string()).collect(),
        section: None,
    };
    let usage = "usage: weir-bench [--out PATH] [--records N] [--keys N] [--only map,aggregate,keys,pause,guests,scaling]";
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--out" => args.out = PathBuf::from(it.next().context("--out PATH")?),
            "--records" => args.records = it.next().context("--records N")?.parse()?,
            "--keys" => args.keys = it.next().context("--keys N")?.parse()?,
            "--only" => {
                let only = it.next().context("--only SECTIONS")?;
                args.sections = only.split(',').map(str::to_owned).collect();
                if let Some(bad) = args
                    .sections
                    .iter()
                    .find(|s| !SECTIONS.contains(&s.as_str()))
                {
                    anyhow::bail!("unknown section {bad}; {usage}");
                }
            }
            "--section" => args.section = Some(it.next().context("--section NAME")?),
            other => anyhow::bail!("unknown argument {other}; {usage}"),
        }
    }
    Ok(args)
}

/// The build every figure was measured with, stamped on each row of the JSON file.
const PROFILE: &str = if cfg!(debug_assertions) {
    "dev profile WITH debug assertions (not the build `make bench` makes)"
} else {
    "[profile.dev] of Cargo.toml: opt-level 3, no debug assertions or overflow checks \
     (the build make demo, make test and make bench share)"
};

/// Adds `"profile": profile` to every row of `figures` (each object holding a
/// `process_cpu_ns_per_record`), however deep.
fn stamp_rows(figures: &mut Value, profile: &Value) {
    match figures {
        Value::Object(map) => {
            if map.contains_key("process_cpu_ns_per_record") {
                map.insert("profile".into(), profile.clone());
            }
            map.values_mut().for_each(|v| stamp_rows(v, profile));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| stamp_rows(v, profile)),
        _ => {}
    }
}

fn main() -> anyhow::Result<()> {
    let args = args()?;
    if let Some(section) = &args.section {
        let mut figures = run_section(section, &args)?;
        figures["peak_rss_mib"] = json!(peak_rss_mib()?);
        println!("{figures}");
        return Ok(());
    }
    let mut all = serde_json::Map::new();
    all.insert(
        "machine".into(),
        json!({
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            // The build measured: `[profile.dev]` (opt-level 3), without debug
            // assertions unless this says otherwise.
            "debug_assertions": cfg!(debug_assertions),
        }),
    );
    for section in &args.sections {
        eprintln!("{section} ...");
        let mut figures = section_in_child(section, &args)?;
        print_section(section, &figures, &args);
        stamp_rows(&mut figures, &json!(PROFILE));
        all.insert(section.clone(), figures);
    }
    if let Some(parent) = args.out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&args.out, serde_json::to_vec_pretty(&Value::Object(all))?)?;
    eprintln!("wrote {}", args.out.display());
    Ok(())
}

/// Runs `section` in a child process of this binary; its figures.
fn section_in_child(section: &str, args: &Args) -> anyhow::Result<Value> {
    let out = Command::new(std::env::current_exe()?)
        .args(["--section", section])
        .args(["--records", &args.records.to_string()])
        .args(["--keys", &args.keys.to_string()])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("run a section")?;
    anyhow::ensure!(out.status.success(), "section {section} failed");
    serde_json::from_slice(&out.stdout).context("a section's figures")
}

/// This process's peak resident set size, in MiB.
fn peak_rss_mib() -> anyhow::Result<f64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("VmHWM in /proc/self/status")?;
    Ok(kib / 1024.0)
}

fn run_section(section: &str, args: &Args) -> anyhow::Result<Value> {
    let guests = weir_tests::guests_dir();
    let engine = WasmEngine::new(None)?;
    match section {
        "map" => map_section(&engine, &guests, args.records),
        "aggregate" => aggregate_section(&engine, &guests, args.keys),
        "pause" => pause_section(&engine, &guests, args.keys),
        "guests" => guests_section(&guests, args.records),
        "scaling" => scaling::scaling_figures(&guests, args.records, args.keys),
        "keys" => keys::keys_figures(&guests, args.keys),
        other => anyhow::bail!("unknown section {other}"),
    }
}

fn map_section(
    engine: &WasmEngine,
    guests: &std::path::Path,
    records: u64,
) -> anyhow::Result<Value> {
    let uppercase = Arc::new(engine.load(&guests.join("uppercase.wasm"))?);
    let wasm_op = || {
        MapOperator::new(
            "step-0".into(),
            uppercase.clone(),
            GuestLimits::default(),
            BTreeMap::new(),
        )
    };
    // Warm up every path once (page faults, instantiation), then measure, the three
    // sides interleaved within each run.
    map_throughput(records / 10, Box::new(wasm_op()))?;
    map_throughput(records / 10, Box::new(NativeUppercase))?;
    let (mut wasm, mut native, mut columnar) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..measure::RUNS {
        wasm.push(map_throughput(records, Box::new(wasm_op()))?);
        native.push(map_throughput(records, Box::new(NativeUppercase))?);
        columnar.push(map_throughput(records, Box::new(NativeColumnarUppercase))?);
    }
    let [wasm, native, columnar] = [wasm, native, columnar].map(|s| Figures::of(records, &s));
    let batches = generator_batches(OPERATOR_ALONE.records);
    let alone = operator_alone(
        &mut wasm_op(),
        &mut NativeUppercase,
        &batches,
        OPERATOR_ALONE.rounds,
    )?;
    let alone_columnar = operator_alone(
        &mut wasm_op(),
        &mut NativeColumnarUppercase,
        &batches,
        OPERATOR_ALONE.rounds,
    )?;
    Ok(json!({
        "records": records,
        "end_to_end": {
            "weir": wasm.json("generator -> WASM uppercase -> discard, one source task"),
            "native_per_record": native.json("the same, native uppercase record by record (one copy)"),
            "native_columnar": columnar.json("the same, native uppercase of the value column in place"),
            "ratio_to_per_record": wasm.records_per_s / native.records_per_s,
            "ratio_to_columnar": wasm.records_per_s / columnar.records_per_s,
        },
        "operator_alone": {
            "records": OPERATOR_ALONE.records,
            "rounds": OPERATOR_ALONE.rounds,
            "wasm_cpu_ns_per_record": alone.wasm_ns_per_record,
            "native_per_record_cpu_ns_per_record": alone.native_ns_per_record,
            "native_columnar_cpu_ns_per_record": alone_columnar.native_ns_per_record,
            "ratio_to_per_record": alone.native_ns_per_record / alone.wasm_ns_per_record,
            "ratio_to_columnar": alone_columnar.native_ns_per_record / alone_columnar.wasm_ns_per_record,
        },
    }))
}

/// One entry per language; end to end over a twentieth of the map section's records.
fn guests_section(guests: &std::path::Path, records: u64) -> anyhow::Result<Value> {
    let mut figures = serde_json::Map::new();
    for (language, file, alone) in guests::GUESTS {
        eprintln!("  {language} ...");
        let alone = alone.unwrap_or(OPERATOR_ALONE);
        let f = guests::guest_figures(guests, file, alone, (records / 20).max(BATCH as u64))
            .with_context(|| format!("{language} guest {file}"))?;
        figures.insert(language.into(), f);
    }
    Ok(Value::Object(figures))
}

fn aggregate_section(
    engine: &WasmEngine,
    guests: &std::path::Path,
    keys: u64,
) -> anyhow::Result<Value> {
    let agg = aggregate_figures(engine, guests, keys)?;
    let checkpoint = |(d, files, bytes): (std::time::Duration, u64, u64)| json!({ "ms": d.as_millis() as u64, "files_added": files, "bytes_added": bytes });
    Ok(json!({
        "keys": keys,
        "shapes": agg.shapes.iter().map(|s| s.json()).collect::<Vec<_>>(),
        "guest_update_ns_per_key": agg.guest.update_ns_per_key,
        "guest_emit_ns_per_key": agg.guest.emit_ns_per_key,
        "guest_update_and_emit_ns_per_key": agg.guest.update_and_emit_ns_per_key,
        "checkpoint": {
            "first": checkpoint(agg.first_checkpoint),
            "second_unchanged": checkpoint(agg.second_checkpoint),
        },
    }))
}

fn pause_section(
    engine: &WasmEngine,
    guests: &std::path::Path,
    keys: u64,
) -> anyhow::Result<Value> {
    let word_count = Arc::new(engine.load(&guests.join("word_count.wasm"))?);
    let records = 3 * keys;
    let run = |mode| -> anyhow::Result<Value> {
        let f = pause::pause_figures(word_count.clone(), records, keys, mode)?;
        Ok(json!({
            "longest_pause_ms": f.longest_pause.as_secs_f64() * 1e3,
            "longest_barrier_call_ms": f.longest_barrier_call.as_secs_f64() * 1e3,
            "longest_gap_without_barrier_ms": f.longest_gap_without_barrier.as_secs_f64() * 1e3,
            "longest_checkpoint_ms": f.longest_checkpoint.as_secs_f64() * 1e3,
            "checkpoints": f.checkpoints,
            "records_per_s": f.records_per_s,
        }))
    };
    Ok(json!({
        "keys": keys,
        "records": records,
        "deferred": run(pause::Mode::Deferred)?,
        "inline": run(pause::Mode::Inline)?,
    }))
}

fn print_section(section: &str, f: &Value, args: &Args) {
    let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let rss = num(&f["peak_rss_mib"]);
    println!();
    match section {
        "map" => print_map(f, rss),
        "aggregate" => print_aggregate(f, rss, args),
        "pause" => {
            println!(
                "| checkpoints of a {}-key state, {} records (peak RSS {rss:.0} MiB) | longest output pause | longest barrier call | longest gap without a barrier | longest barrier-to-durable | checkpoints | records/s |",
                num(&f["keys"]),
                num(&f["records"])
            );
            println!("|---|---:|---:|---:|---:|---:|---:|");
            for (name, key) in [
                ("upload deferred (Weir)", "deferred"),
                ("upload inline on the task thread (baseline)", "inline"),
            ] {
                let r = &f[key];
                println!(
                    "| {name} | {:.0} ms | {:.1} ms | {:.0} ms | {:.0} ms | {} | {:.0} |",
                    num(&r["longest_pause_ms"]),
                    num(&r["longest_barrier_call_ms"]),
                    num(&r["longest_gap_without_barrier_ms"]),
                    num(&r["longest_checkpoint_ms"]),
                    num(&r["checkpoints"]),
                    num(&r["records_per_s"])
                );
            }
        }
        "guests" => guests::print(f),
        "scaling" => scaling::print(f),
        "keys" => keys::print(f),
        _ => {}
    }
}

fn print_aggregate(f: &Value, rss: f64, args: &Args) {
    let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    println!(
        "| aggregate (peak RSS {rss:.0} MiB), medians of {} runs | side | records/s (min-max) | process CPU ns/record | thread CPU ns/record | Weir's ratio |",
        measure::RUNS
    );
    println!("|---|---|---:|---:|---:|---:|");
    for shape in f["shapes"].as_array().into_iter().flatten() {
        let name = format!(
            "{} ({} keys, {} records)",
            shape["name"].as_str().unwrap_or(""),
            num(&shape["keys"]),
            num(&shape["records"])
        );
        for (side, ratio) in [
            ("weir", None),
            ("state_fold", Some("ratio_to_state_fold")),
            ("hashmap", Some("ratio_to_hashmap")),
        ] {
            let r = &shape[side];
            println!(
                "| {} | {} | {:.0} ({:.0}-{:.0}) | {:.0} | {:.0} | {} |",
                if side == "weir" { name.as_str() } else { "" },
                r["kind"].as_str().unwrap_or(side),
                num(&r["records_per_s"]),
                num(&r["records_per_s_min"]),
                num(&r["records_per_s_max"]),
                num(&r["process_cpu_ns_per_record"]),
                num(&r["thread_cpu_ns_per_record"]),
                ratio.map_or(String::new(), |k| format!("{:.2}", num(&shape[k]))),
            );
        }
    }
    println!(
        "\nword-count guest calls alone, per key: update {:.0} ns, emit {:.0} ns, fused update-and-emit {:.0} ns",
        num(&f["guest_update_ns_per_key"]),
        num(&f["guest_emit_ns_per_key"]),
        num(&f["guest_update_and_emit_ns_per_key"])
    );
    println!(
        "\n| checkpoint of {} keys | duration | SST files added | MiB added |",
        args.keys
    );
    println!("|---|---:|---:|---:|");
    for (name, key) in [
        ("first (inside Weir's span above)", "first"),
        ("second, state unchanged", "second_unchanged"),
    ] {
        let c = &f["checkpoint"][key];
        println!(
            "| {name} | {} ms | {} | {:.1} |",
            num(&c["ms"]),
            num(&c["files_added"]),
            num(&c["bytes_added"]) / (1 << 20) as f64
        );
    }
}

fn print_map(f: &Value, rss: f64) {
    let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    println!(
        "| map, end to end (peak RSS {rss:.0} MiB), medians of {} runs | records/s (min-max) | process CPU ns/record | Weir's ratio |",
        measure::RUNS
    );
    println!("|---|---:|---:|---:|");
    let e = &f["end_to_end"];
    for (side, ratio) in [
        ("weir", None),
        ("native_per_record", Some("ratio_to_per_record")),
        ("native_columnar", Some("ratio_to_columnar")),
    ] {
        let r = &e[side];
        println!(
            "| {} | {:.0} ({:.0}-{:.0}) | {:.0} | {} |",
            r["kind"].as_str().unwrap_or(side),
            num(&r["records_per_s"]),
            num(&r["records_per_s_min"]),
            num(&r["records_per_s_max"]),
            num(&r["process_cpu_ns_per_record"]),
            ratio.map_or(String::new(), |k| format!("{:.2}", num(&e[k]))),
        );
    }
    let a = &f["operator_alone"];
    println!(
        "\noperator alone (thread CPU ns/record, median of {} rounds): WASM {:.1}; native per record {:.1} ({:.2} of WASM's time); native columnar {:.1} ({:.2})",
        num(&a["rounds"]),
        num(&a["wasm_cpu_ns_per_record"]),
        num(&a["native_per_record_cpu_ns_per_record"]),
        num(&a["ratio_to_per_record"]),
        num(&a["native_columnar_cpu_ns_per_record"]),
        num(&a["ratio_to_columnar"]),
    );
}
