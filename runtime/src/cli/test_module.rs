//! `weir test MODULE --input FILE`: a guest over sample records, no spec, no state dir.
//!
//! Invariants:
//! - Each input line is one record: its value the line; its key the top-level JSON
//!   field `--key-field` (else empty); its event time the integer field
//!   `--timestamp-field` in ms (else the line's number, 0, 1, 2, ...), as a `jsonl` file
//!   source reads them.
//! - The module runs as a pipeline step would (`pipeline::sample_run`); stdout gets one
//!   line per emitted record (`out {json}`), per dead letter with its reason
//!   (`dead {json}`) and, for a windowed aggregate, per watermark advance
//!   (`watermark T`: every window ending at or before T has fired), in stream order;
//!   stderr gets one summary line.
//! - A guest failure (trap, deadline, memory limit) exits 1 with its one-line error;
//!   dead letters are output, not failures.

use std::collections::BTreeMap;
use std::io::BufReader;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde_json::json;

use crate::connector::record_format::{
    DEFAULT_MAX_LINE_BYTES, InputFormat, LineDecoder, LineRead, read_line_bounded, strip_line_end,
};
use crate::engine::{CompileLimits, World};
use crate::field::units;
use crate::pipeline::sample_run::{SampleEvent, SampleRun};
use crate::record::batch::RecordBatch;

#[derive(Debug, clap::Args)]
pub struct TestArgs {
    /// The guest component to run.
    pub module: PathBuf,
    /// Sample input: one record per line (`-`: stdin).
    #[arg(long, value_name = "FILE")]
    pub input: PathBuf,
    /// Take each record's key from this top-level JSON field of its line.
    #[arg(long, value_name = "FIELD")]
    pub key_field: Option<String>,
    /// Take each record's event time (ms) from this top-level JSON field; without it
    /// line i has time i.
    #[arg(long, value_name = "FIELD")]
    pub timestamp_field: Option<String>,
    /// A tumbling window for an aggregate, e.g. `10s`.
    #[arg(long, value_name = "DURATION", value_parser = units::parse_duration)]
    pub window: Option<Duration>,
    /// The step's configuration, `KEY=VALUE` (repeatable), as a spec's `config` table.
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = key_value)]
    pub config: Vec<(String, String)>,
    /// Records per guest call.
    #[arg(long, default_value_t = crate::spec::pipeline::DEFAULT_BATCH_SIZE)]
    pub batch_size: usize,
}

fn key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))
}

pub fn execute(args: TestArgs) -> anyhow::Result<()> {
    let engine = super::guest_engine(true, CompileLimits::default())?;
    let module = Arc::new(engine.load(&args.module)?);
    anyhow::ensure!(
        args.window.is_none() || module.world() == World::Aggregator,
        "--window is for an aggregator guest; {} is a mapper",
        module.name()
    );
    let records = read_input(&args)?;
    let run = SampleRun {
        module: module.clone(),
        window: args.window,
        config: args.config.iter().cloned().collect::<BTreeMap<_, _>>(),
        batch_size: args.batch_size.max(1),
    };
    let (mut out, mut dead) = (0usize, 0usize);
    let windowed = args.window.is_some();
    run.run(&records, |event| match event {
        SampleEvent::Output(batch) => {
            out += batch.len();
            for r in batch.iter() {
                println!("out {}", record_json(r.key, r.value, r.timestamp, None));
            }
        }
        SampleEvent::DeadLetter(d) => {
            dead += 1;
            println!(
                "dead {}",
                record_json(&d.key, &d.value, d.timestamp, Some(&d.reason))
            );
        }
        SampleEvent::Watermark(t) if windowed => match t {
            i64::MAX => println!("watermark end"),
            t => println!("watermark {t}"),
        },
        SampleEvent::Watermark(_) => {}
    })
    .map_err(|e| anyhow::anyhow!("{}: {e}", module.name()))?;
    eprintln!(
        "weir: test of {} ({}): {} records in, {out} out, {dead} dead letters",
        module.name(),
        module.world(),
        records.len()
    );
    Ok(())
}

/// Every line of `--input` as a record (see the module's invariants).
fn read_input(args: &TestArgs) -> anyhow::Result<RecordBatch> {
    let reader: Box<dyn std::io::Read> = if args.input.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(
            std::fs::File::open(&args.input)
                .with_context(|| format!("cannot read {}", args.input.display()))?,
        )
    };
    let mut reader = BufReader::new(reader);
    let format = if args.key_field.is_some() || args.timestamp_field.is_some() {
        InputFormat::Jsonl
    } else {
        InputFormat::Lines
    };
    let mut decoder =
        LineDecoder::new(format, args.key_field.clone(), args.timestamp_field.clone());
    let (mut records, mut line) = (RecordBatch::default(), Vec::new());
    loop {
        match read_line_bounded(&mut reader, &mut line, DEFAULT_MAX_LINE_BYTES)? {
            LineRead::End => break,
            LineRead::TooLong => anyhow::bail!(
                "{}: line {} is longer than {DEFAULT_MAX_LINE_BYTES} bytes",
                args.input.display(),
                records.len() + 1
            ),
            LineRead::Line(_) => {
                let index = records.len();
                decoder.push_line(strip_line_end(&line), &mut records);
                if args.timestamp_field.is_none() {
                    records.timestamps[index] = index as i64;
                }
            }
        }
    }
    decoder.warn_missing_fields(&args.input.display().to_string());
    Ok(records)
}

/// A record as one JSON object: key (null when empty) and value as text (invalid UTF-8
/// replaced), its event time, and a dead letter's reason.
fn record_json(key: &[u8], value: &[u8], timestamp: i64, reason: Option<&str>) -> String {
    let mut object = json!({
        "key": (!key.is_empty()).then(|| String::from_utf8_lossy(key)),
        "value": String::from_utf8_lossy(value),
        "timestamp": timestamp,
    });
    if let Some(reason) = reason {
        object["reason"] = json!(reason);
    }
    object.to_string()
}
