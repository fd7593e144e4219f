//! A pipeline's metrics as OpenMetrics text, the body of a worker's `/metrics`
//! (`endpoint`), written by `prometheus-client` as the server's own scrape is.
//!
//! Invariants:
//! - Every sample is labelled `pipeline` (one pipeline per process: a bounded set); the
//!   guest memory families also `step`, one sample per step of the spec (bounded by it).
//! - Names are `weir_<name>`; a counter's samples end in `_total` (its family does not),
//!   and the text ends with `# EOF`. Label values are escaped here (`Escaped`): the
//!   encoder writes them as given, and a pipeline or step named with a `"` would
//!   otherwise break the scrape.
//! - The registry is built from one [`MetricsSnapshot`] per scrape: the pipeline's
//!   counters are plain atomics its threads bump, and a scrape every few seconds costs
//!   nothing worth keeping a second copy of them for.

use std::fmt::Write;

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::metrics::MetricsSnapshot;
use crate::metrics::guest_memory::StepGuestMemory;

/// The content type of [`openmetrics_text`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A label value, written escaped as the text format needs (`\\`, `\"`, `\n`).
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
struct Escaped(String);

impl EncodeLabelValue for Escaped {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        for c in self.0.chars() {
            match c {
                '\\' => encoder.write_str("\\\\")?,
                '"' => encoder.write_str("\\\"")?,
                '\n' => encoder.write_str("\\n")?,
                c => encoder.write_char(c)?,
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PipelineLabel {
    pipeline: Escaped,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabels {
    pipeline: Escaped,
    step: Escaped,
}

/// A family's name (without `weir_`, and without `_total` for a counter), help, and
/// the pipeline's value.
type Row = (&'static str, &'static str, u64);

fn counters(m: &MetricsSnapshot) -> [Row; 7] {
    [
        ("records_in", "Records read by the sources", m.records_in),
        ("records_out", "Records handed to the sinks", m.records_out),
        (
            "dead_letters",
            "Records routed to the dead-letter output",
            m.dead_letters,
        ),
        (
            "late_records",
            "Dead letters that came after their window's lateness",
            m.late_records,
        ),
        (
            "records_skipped",
            "Input records deleted by retention before they were read",
            m.records_skipped,
        ),
        (
            "guest_log_dropped_lines",
            "Guest output lines dropped over [limits] guest_log_rate",
            m.guest_log_dropped_lines,
        ),
        (
            "checkpoints_completed",
            "Checkpoints completed by this process",
            m.checkpoints_completed,
        ),
    ]
}

fn gauges(m: &MetricsSnapshot) -> [Row; 4] {
    [
        (
            "consumer_lag",
            "Kafka records in the sources' input not read yet (in a repartition topic, frames of many records)",
            m.consumer_lag,
        ),
        (
            "last_checkpoint_id",
            "Id of the last completed checkpoint",
            m.last_checkpoint_id,
        ),
        (
            "last_checkpoint_duration_ms",
            "Duration of the last completed checkpoint",
            m.last_checkpoint_duration_ms,
        ),
        (
            "last_checkpoint_unix_ms",
            "When the last checkpoint completed (Unix ms)",
            m.last_checkpoint_unix_ms,
        ),
    ]
}

/// A guest memory family: name, help, whether a counter, and the step's value.
type StepRow = (
    &'static str,
    &'static str,
    bool,
    fn(&StepGuestMemory) -> u64,
);

const STEP_FAMILIES: [StepRow; 3] = [
    (
        "guest_memory_bytes",
        "Linear memory of the step's guest instances together",
        false,
        |s| s.total_bytes,
    ),
    (
        "guest_memory_max_instance_bytes",
        "Linear memory of the step's largest guest instance (the limit is per instance)",
        false,
        |s| s.max_bytes,
    ),
    (
        "guest_recycles",
        "Guest instances replaced by a fresh one after using half their memory headroom",
        true,
        |s| s.recycled,
    ),
];

/// An OpenMetrics gauge holds an i64: a figure past it (never, for bytes or ms) shows
/// as the largest.
fn gauge_value(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// `m` as OpenMetrics text, every sample labelled `pipeline`.
pub fn openmetrics_text(pipeline: &str, m: &MetricsSnapshot) -> String {
    let mut registry = Registry::with_prefix("weir");
    let label = PipelineLabel {
        pipeline: Escaped(pipeline.to_owned()),
    };
    for (name, help, value) in counters(m) {
        let family = Family::<PipelineLabel, Counter>::default();
        family.get_or_create(&label).inc_by(value);
        registry.register(name, help, family);
    }
    for (name, help, value) in gauges(m) {
        let family = Family::<PipelineLabel, Gauge>::default();
        family.get_or_create(&label).set(gauge_value(value));
        registry.register(name, help, family);
    }
    register_guest_memory(&mut registry, pipeline, m);
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = encode_registry(&mut text, &registry);
    let _ = encode_eof(&mut text);
    text
}

/// The guest memory gauges and the recycling counter, one sample per step in each.
fn register_guest_memory(registry: &mut Registry, pipeline: &str, m: &MetricsSnapshot) {
    let labels = |step: &str| StepLabels {
        pipeline: Escaped(pipeline.to_owned()),
        step: Escaped(step.to_owned()),
    };
    for (name, help, counter, value) in STEP_FAMILIES {
        if counter {
            let family = Family::<StepLabels, Counter>::default();
            for (step, figures) in &m.guest_memory {
                family.get_or_create(&labels(step)).inc_by(value(figures));
            }
            registry.register(name, help, family);
        } else {
            let family = Family::<StepLabels, Gauge>::default();
            for (step, figures) in &m.guest_memory {
                family
                    .get_or_create(&labels(step))
                    .set(gauge_value(value(figures)));
            }
            registry.register(name, help, family);
        }
    }
}
