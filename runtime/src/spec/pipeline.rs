//! `PipelineSpec`: a whole pipeline spec, parsed, validated and resolved.
//!
//! Invariants of a `PipelineSpec` (whatever the text): every path is absolute; every
//! number is in its documented range; `1 <= parallelism <= max_parallelism` and
//! `1 <= repartition_partitions <= max_parallelism`; there is
//! at least one source and one sink; at most one source reads stdin; every step's
//! module exists. A spec that breaks any of these is refused by `load` / `parse` with
//! a one-line `SpecError` naming the line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::IgnoredAny;
use toml::Spanned;
use toml::de::DeTable;

use crate::cluster::KeyGroupRanges;
use crate::connector::kafka::repartition::{DEFAULT_REPARTITION_PARTITIONS, RepartitionPartitions};
use crate::connector::kafka::{KafkaNames, KafkaSinkConfig, KafkaSourceConfig};
use crate::engine::{DEFAULT_CALL_TIMEOUT, DEFAULT_GUEST_MEMORY};
use crate::field::checks;
use crate::record::ids;
use crate::spec::error::{Located, SpecError};
use crate::spec::sink::{SinkSpec, parse_sink};
use crate::spec::source::{SourceConfig, SourceSpec, parse_source};
use crate::spec::step::{StepSpec, parse_step};
use crate::spec::tagged::{Item, array_of_tables};
use crate::storage::CheckpointLocation;

/// Default parallelism.
pub const DEFAULT_PARALLELISM: usize = 1;
/// Default number of key groups.
pub const DEFAULT_MAX_PARALLELISM: usize = 128;
/// Default records per batch.
pub const DEFAULT_BATCH_SIZE: usize = 1024;
/// Default bytes per source batch (keys, values, 16 bytes per record): 16 MiB. A batch is
/// copied into each guest's memory whole, so it must fit in `[limits] memory` (64 MiB by
/// default) with room for the guest's own output; 1,024 values of 1 MiB would otherwise
/// make a 1 GiB batch.
pub const DEFAULT_BATCH_BYTES: usize = 16 << 20;
/// Default time between checkpoints.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// Default time a checkpoint may take before it is abandoned.
pub const DEFAULT_CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default complete checkpoints kept; at least two, so recovery can fall back one.
pub const DEFAULT_CHECKPOINT_RETAIN: usize = 3;
/// Most steps in one pipeline. Every step is an operator in every subtask (a thread's
/// worth of queues, a guest instance of up to `[limits] memory` each), so the number of
/// steps multiplies host memory: 64 is far beyond any pipeline written by hand, and keeps
/// `steps x parallelism x memory` a product someone chose, not an accident of a
/// generated spec (20,000 steps once took 4.5 GB before the first record).
pub const MAX_STEPS: usize = 64;

/// A pipeline as the user wrote it, and nothing the runtime derives: which worker of N
/// runs it, with which repartition topics and in which layout, is a
/// `pipeline::WorkerPlan`.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineSpec {
    /// `[a-z0-9_-]{1,64}`.
    pub name: String,
    pub parallelism: usize,
    /// Number of key groups (fixed once the pipeline has checkpoints).
    pub max_parallelism: usize,
    /// Partitions of a repartition topic (key-group ranges, see
    /// `connector::kafka::repartition`), `1..=max_parallelism` and at most
    /// `MAX_REPARTITION_PARTITIONS`: used only by a keyed pipeline run as N > 1
    /// workers, fixed once it has checkpoints.
    pub repartition_partitions: usize,
    /// Whether the spec says `repartition_partitions` (else it is the default, and a
    /// worker adopts the count of a repartition topic that exists already: see
    /// `connector::kafka::repartition::ensure_topic`).
    pub repartition_partitions_set: bool,
    /// Records per batch.
    pub batch_size: usize,
    /// Bytes per source batch: a source cuts its batch once it holds this much (a larger
    /// record travels alone).
    pub batch_bytes: usize,
    pub state_dir: PathBuf,
    pub checkpoint: CheckpointSpec,
    pub limits: GuestLimitsSpec,
    pub sources: Vec<SourceSpec>,
    pub steps: Vec<StepSpec>,
    pub sinks: Vec<SinkSpec>,
    pub dead_letter: DeadLetterSpec,
    /// The directory relative paths were resolved against (the spec file's).
    pub base_dir: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointSpec {
    pub interval: Duration,
    pub timeout: Duration,
    /// Complete checkpoints kept, at least 2.
    pub retain: usize,
    /// A local directory (absolute) or an `s3://bucket/prefix`.
    pub dir: CheckpointLocation,
}

/// Limits applied to every guest instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestLimitsSpec {
    /// Bytes of linear memory, 1 MiB ..= 4 GiB.
    pub memory: usize,
    /// CPU deadline per guest call, 1 ms ..= 60 s.
    pub call_timeout: Duration,
    /// CPU time one module may take to compile, whole seconds, 1 s ..= 1 h.
    pub compile_cpu: Duration,
    /// Data memory of the process compiling one module, 256 MiB ..= 64 GiB.
    pub compile_memory: usize,
    /// Guest text (stdout, stderr, `log`) the run shows per second, all its guests
    /// together, 1 KiB ..= 64 MiB; lines over it are dropped and counted.
    pub guest_log_rate: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterSpec {
    /// Directory of the dead-letter file sink.
    pub path: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPipeline {
    #[serde(deserialize_with = "checks::pipeline_name")]
    name: String,
    #[serde(default, deserialize_with = "checks::parallelism")]
    parallelism: Option<Spanned<usize>>,
    #[serde(default, deserialize_with = "checks::max_parallelism")]
    max_parallelism: Option<Spanned<usize>>,
    #[serde(default, deserialize_with = "checks::repartition_partitions")]
    repartition_partitions: Option<Spanned<usize>>,
    #[serde(
        default = "default_batch_size",
        deserialize_with = "checks::batch_size"
    )]
    batch_size: usize,
    #[serde(
        default = "default_batch_bytes",
        deserialize_with = "checks::batch_bytes"
    )]
    batch_bytes: usize,
    #[serde(default, deserialize_with = "checks::opt_path")]
    state_dir: Option<PathBuf>,
    #[serde(default)]
    checkpoint: RawCheckpoint,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    dead_letter: RawDeadLetter,
    // Taken out of the document before this struct is deserialized (they need the
    // spanned tree, see `tagged`); declared so an unknown key's message lists them.
    #[serde(default)]
    #[allow(dead_code, reason = "never present: only listed for messages")]
    sources: Option<IgnoredAny>,
    #[serde(default)]
    #[allow(dead_code, reason = "never present: only listed for messages")]
    steps: Option<IgnoredAny>,
    #[serde(default)]
    #[allow(dead_code, reason = "never present: only listed for messages")]
    sinks: Option<IgnoredAny>,
}

fn default_batch_size() -> usize {
    DEFAULT_BATCH_SIZE
}
fn default_batch_bytes() -> usize {
    DEFAULT_BATCH_BYTES
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheckpoint {
    #[serde(
        default = "default_interval",
        deserialize_with = "checks::checkpoint_interval"
    )]
    interval: Duration,
    #[serde(
        default = "default_timeout",
        deserialize_with = "checks::checkpoint_timeout"
    )]
    timeout: Duration,
    #[serde(default = "default_retain", deserialize_with = "checks::retain")]
    retain: usize,
    #[serde(default, deserialize_with = "checks::opt_checkpoint_location")]
    dir: Option<CheckpointLocation>,
}

fn default_interval() -> Duration {
    DEFAULT_CHECKPOINT_INTERVAL
}
fn default_timeout() -> Duration {
    DEFAULT_CHECKPOINT_TIMEOUT
}
fn default_retain() -> usize {
    DEFAULT_CHECKPOINT_RETAIN
}

impl Default for RawCheckpoint {
    fn default() -> Self {
        RawCheckpoint {
            interval: default_interval(),
            timeout: default_timeout(),
            retain: default_retain(),
            dir: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    #[serde(default = "default_memory", deserialize_with = "checks::guest_memory")]
    memory: usize,
    #[serde(
        default = "default_call_timeout",
        deserialize_with = "checks::call_timeout"
    )]
    call_timeout: Duration,
    #[serde(
        default = "default_compile_cpu",
        deserialize_with = "checks::compile_cpu"
    )]
    compile_cpu: Duration,
    #[serde(
        default = "default_compile_memory",
        deserialize_with = "checks::compile_memory"
    )]
    compile_memory: usize,
    #[serde(
        default = "default_guest_log_rate",
        deserialize_with = "checks::guest_log_rate"
    )]
    guest_log_rate: usize,
}

fn default_guest_log_rate() -> usize {
    crate::engine::DEFAULT_GUEST_LOG_RATE
}

fn default_compile_cpu() -> Duration {
    crate::engine::DEFAULT_COMPILE_CPU
}
fn default_compile_memory() -> usize {
    crate::engine::DEFAULT_COMPILE_MEMORY as usize
}

fn default_memory() -> usize {
    DEFAULT_GUEST_MEMORY
}
fn default_call_timeout() -> Duration {
    DEFAULT_CALL_TIMEOUT
}

impl Default for RawLimits {
    fn default() -> Self {
        RawLimits {
            memory: default_memory(),
            call_timeout: default_call_timeout(),
            compile_cpu: default_compile_cpu(),
            compile_memory: default_compile_memory(),
            guest_log_rate: default_guest_log_rate(),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDeadLetter {
    #[serde(default, deserialize_with = "checks::opt_path")]
    path: Option<PathBuf>,
}

impl PipelineSpec {
    /// Reads, parses and validates the spec at `path`; relative paths in it are
    /// resolved against its directory, and errors name it as given.
    pub fn load(path: &Path) -> Result<PipelineSpec, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|error| SpecError::Read {
            path: path.to_owned(),
            error,
        })?;
        let base_dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Self::parse(&text, base_dir, &path.display().to_string())
    }

    /// Parses and validates spec `text`; relative paths resolve against `base_dir`
    /// (made absolute with the current directory) and errors name the spec `file`.
    pub fn parse(text: &str, base_dir: &Path, file: &str) -> Result<PipelineSpec, SpecError> {
        let base_dir = if base_dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            base_dir
        };
        let base_dir = std::path::absolute(base_dir).unwrap_or_else(|_| base_dir.to_owned());
        parse_located(text, &base_dir).map_err(|e| e.into_spec_error(text, file))
    }

    /// The source reading stdin, if any (there is at most one).
    pub fn reads_stdin(&self) -> bool {
        self.sources
            .iter()
            .any(|s| matches!(s.config, SourceConfig::Stdin(_)))
    }

    /// The Kafka sinks, in spec order.
    pub fn kafka_sinks(&self) -> impl Iterator<Item = &KafkaSinkConfig> {
        self.sinks.iter().filter_map(|s| match s {
            SinkSpec::Kafka(c) => Some(c),
            _ => None,
        })
    }

    /// The Kafka sinks with their operator ids (`sink-<i>`), in spec order.
    pub fn kafka_sink_ids(&self) -> Vec<(String, &KafkaSinkConfig)> {
        self.sinks
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                SinkSpec::Kafka(c) => Some((ids::sink_id(i), c)),
                _ => None,
            })
            .collect()
    }

    /// The Kafka sources, in spec order.
    pub fn kafka_sources(&self) -> impl Iterator<Item = &KafkaSourceConfig> {
        self.sources.iter().filter_map(|s| match &s.config {
            SourceConfig::Kafka(c) => Some(c),
            _ => None,
        })
    }

    /// The pipeline's Kafka names (as worker 0/1: see `KafkaNames::for_worker`).
    pub fn kafka_names(&self) -> KafkaNames {
        KafkaNames::for_sinks(&self.name, self.kafka_sinks())
    }

    /// What this spec asks of its repartition topics' partition count (see
    /// `connector::kafka::repartition::ensure_topic`): its own if it says
    /// `repartition_partitions`, else its default or an existing topic's.
    pub fn repartition_partitions_asked(&self) -> RepartitionPartitions {
        let ranges = self.key_group_ranges();
        if self.repartition_partitions_set {
            RepartitionPartitions::Set(ranges.count())
        } else {
            RepartitionPartitions::Default {
                count: ranges.count(),
                key_groups: ranges.key_groups(),
            }
        }
    }

    /// This spec's key groups cut into its `repartition_partitions` ranges.
    pub fn key_group_ranges(&self) -> KeyGroupRanges {
        // Both are checked by the spec's parse: K <= 32,768 and R <= 1,024.
        KeyGroupRanges::new(
            u16::try_from(self.max_parallelism).unwrap_or(u16::MAX),
            u16::try_from(self.repartition_partitions).unwrap_or(u16::MAX),
        )
    }

    /// The stable id of step `n`: its name, else `step-<n>`.
    pub fn step_id(&self, n: usize) -> String {
        self.steps[n]
            .name()
            .map_or_else(|| ids::step_id(n), ToOwned::to_owned)
    }

    /// The keyed steps (aggregates), in step order.
    pub fn keyed_steps(&self) -> Vec<usize> {
        (0..self.steps.len())
            .filter(|&n| matches!(self.steps[n], StepSpec::Aggregate(_)))
            .collect()
    }

    /// The repartition topic each keyed step has when the pipeline runs as N > 1
    /// workers (under the names of its Kafka sinks), whether or not it ever did.
    pub fn repartition_topics(&self) -> Vec<String> {
        let names = self.kafka_names();
        self.keyed_steps()
            .into_iter()
            .map(|n| names.repartition_topic(&self.step_id(n)))
            .collect()
    }
}

fn parse_located(text: &str, base_dir: &Path) -> Result<PipelineSpec, Located> {
    let mut root = DeTable::parse(text).map_err(Located::from)?;
    let sources = root.get_mut().remove("sources");
    let steps = root.get_mut().remove("steps");
    let sinks = root.get_mut().remove("sinks");
    let raw =
        RawPipeline::deserialize(toml::de::Deserializer::from(root)).map_err(Located::from)?;

    let (parallelism, max_parallelism) = parallelism(&raw)?;
    checks::check_call_timeout_fits(raw.limits.call_timeout, raw.checkpoint.timeout)
        .map_err(|message| Located::at(0..0, message))?;
    let repartition_partitions = repartition_partitions(&raw, max_parallelism)?;
    let mut sources = parse_sources(sources, base_dir)?;
    let steps = parse_steps(steps, base_dir)?;
    let sinks = parse_sinks(sinks, base_dir)?;
    let dirs = Dirs::resolve(&raw, base_dir);
    default_kafka_groups(&mut sources, &sinks, &raw.name);
    Ok(PipelineSpec {
        name: raw.name,
        parallelism,
        max_parallelism,
        repartition_partitions,
        repartition_partitions_set: raw.repartition_partitions.is_some(),
        batch_size: raw.batch_size,
        batch_bytes: raw.batch_bytes,
        checkpoint: CheckpointSpec {
            interval: raw.checkpoint.interval,
            timeout: raw.checkpoint.timeout,
            retain: raw.checkpoint.retain,
            dir: dirs.checkpoint,
        },
        limits: GuestLimitsSpec {
            memory: raw.limits.memory,
            call_timeout: raw.limits.call_timeout,
            compile_cpu: raw.limits.compile_cpu,
            compile_memory: raw.limits.compile_memory,
            guest_log_rate: raw.limits.guest_log_rate,
        },
        sources,
        steps,
        sinks,
        dead_letter: DeadLetterSpec {
            path: dirs.dead_letter,
        },
        state_dir: dirs.state,
        base_dir: base_dir.to_owned(),
    })
}

/// `(parallelism, max_parallelism)`, defaults filled in; refused if the first exceeds
/// the second, at `max_parallelism`'s line if given, else at `parallelism`'s.
fn parallelism(raw: &RawPipeline) -> Result<(usize, usize), Located> {
    let parallelism = raw
        .parallelism
        .as_ref()
        .map_or(DEFAULT_PARALLELISM, |p| *p.get_ref());
    let max_parallelism = raw
        .max_parallelism
        .as_ref()
        .map_or(DEFAULT_MAX_PARALLELISM, |p| *p.get_ref());
    if parallelism > max_parallelism {
        let message = format!(
            "parallelism {parallelism} exceeds max_parallelism {max_parallelism} (the number of key groups): \
             raise max_parallelism or lower parallelism"
        );
        let span = match (&raw.max_parallelism, &raw.parallelism) {
            (Some(m), _) => m.span(),
            (None, Some(p)) => p.span(),
            (None, None) => 0..0,
        };
        return Err(Located::at(span, message));
    }
    Ok((parallelism, max_parallelism))
}

/// `repartition_partitions`, its default filled in (`DEFAULT_REPARTITION_PARTITIONS`, at
/// most the key groups); refused above `max_parallelism`, at its own line.
fn repartition_partitions(raw: &RawPipeline, max_parallelism: usize) -> Result<usize, Located> {
    let Some(given) = &raw.repartition_partitions else {
        return Ok(DEFAULT_REPARTITION_PARTITIONS.min(max_parallelism));
    };
    let partitions = *given.get_ref();
    if partitions > max_parallelism {
        return Err(Located::at(
            given.span(),
            format!(
                "repartition_partitions {partitions} exceeds max_parallelism {max_parallelism}: \
                 each partition holds a range of key groups, at least one"
            ),
        ));
    }
    Ok(partitions)
}

/// The `[[sources]]`: at least one, at most one reading stdin.
fn parse_sources(sources: Option<Item<'_>>, base_dir: &Path) -> Result<Vec<SourceSpec>, Located> {
    let sources_span = sources.as_ref().map(Spanned::span);
    let mut parsed = Vec::new();
    let mut stdin_seen = false;
    for item in array_of_tables("sources", sources)? {
        let span = item.span();
        let source = parse_source(item, base_dir)?;
        if matches!(source.config, SourceConfig::Stdin(_)) {
            if stdin_seen {
                return Err(Located::at(span, "only one source may read stdin"));
            }
            stdin_seen = true;
        }
        parsed.push(source);
    }
    if parsed.is_empty() {
        return Err(Located {
            span: sources_span,
            message: "a pipeline needs at least one source: add a [[sources]] table".into(),
        });
    }
    Ok(parsed)
}

/// The `[[steps]]`: at most `MAX_STEPS`, no name used twice.
fn parse_steps(steps: Option<Item<'_>>, base_dir: &Path) -> Result<Vec<StepSpec>, Located> {
    let mut parsed = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let items = array_of_tables("steps", steps)?;
    if let Some(item) = items.get(MAX_STEPS) {
        return Err(Located::at(
            item.span(),
            format!(
                "a pipeline has at most {MAX_STEPS} steps, this one has {}: \
                 combine steps into fewer guests",
                items.len()
            ),
        ));
    }
    for item in items {
        let step = parse_step(item, base_dir)?;
        if let Some(name) = &step.name {
            if names.contains(name.get_ref()) {
                return Err(Located::at(
                    name.span(),
                    format!("step name \"{}\" is used twice", name.get_ref()),
                ));
            }
            names.push(name.get_ref().clone());
        }
        parsed.push(step.step);
    }
    Ok(parsed)
}

/// The `[[sinks]]`: at least one.
fn parse_sinks(sinks: Option<Item<'_>>, base_dir: &Path) -> Result<Vec<SinkSpec>, Located> {
    let sinks_span = sinks.as_ref().map(Spanned::span);
    let parsed = array_of_tables("sinks", sinks)?
        .into_iter()
        .map(|item| parse_sink(item, base_dir))
        .collect::<Result<Vec<_>, _>>()?;
    if parsed.is_empty() {
        return Err(Located {
            span: sinks_span,
            message: "a pipeline needs at least one sink: add a [[sinks]] table".into(),
        });
    }
    Ok(parsed)
}

/// The pipeline's directories, absolute: given ones resolved against the spec's
/// directory, the others under the state directory (itself `.weir/<name>` by default).
struct Dirs {
    state: PathBuf,
    checkpoint: CheckpointLocation,
    dead_letter: PathBuf,
}

impl Dirs {
    fn resolve(raw: &RawPipeline, base_dir: &Path) -> Dirs {
        let state = match &raw.state_dir {
            Some(dir) => base_dir.join(dir),
            None => base_dir.join(Path::new(".weir").join(&raw.name)),
        };
        let checkpoint = match &raw.checkpoint.dir {
            Some(dir) => dir.clone().resolve(base_dir),
            None => CheckpointLocation::Local(state.join("checkpoints")),
        };
        let dead_letter = match &raw.dead_letter.path {
            Some(path) => base_dir.join(path),
            None => state.join("dead-letter"),
        };
        Dirs {
            state,
            checkpoint,
            dead_letter,
        }
    }
}

/// A Kafka source's consumer group defaults to the pipeline's group in its Kafka
/// namespace (`KafkaNames::group`: the sinks' transactional prefix and its name).
fn default_kafka_groups(sources: &mut [SourceSpec], sinks: &[SinkSpec], pipeline: &str) {
    let kafka_sinks = sinks.iter().filter_map(|s| match s {
        SinkSpec::Kafka(c) => Some(c),
        _ => None,
    });
    let group = KafkaNames::for_sinks(pipeline, kafka_sinks).group();
    for source in sources {
        if let SourceConfig::Kafka(c) = &mut source.config {
            c.group.get_or_insert_with(|| group.clone());
        }
    }
}
