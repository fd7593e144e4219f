//! A tenant's pipeline spec (JSON, the TOML spec's fields) turned into the TOML spec its
//! worker runs, inside the tenant's namespace and quotas.
//!
//! Invariants of a spec that passes [`HostedSpec::build`]:
//! - It names nothing the server chooses: no `state_dir`, `checkpoint.dir`,
//!   `dead_letter`, `limits.compile_*`, Kafka `group`, `transactional_prefix`,
//!   `bootstrap` or `security`. Each refusal names the field.
//! - It touches nothing outside the tenant's namespace: sources are `kafka` or
//!   `generator`, sinks `kafka` (no files or stdio on a shared host); every topic lies
//!   under the tenant's prefix; every step's module is one of the tenant's, by id.
//! - It stays within the tenant's quotas: `parallelism` (per worker), guest `memory`,
//!   `call_timeout`, and the number of workers it runs as (`workers`, at least 1).
//! - Run as N > 1 workers, it is one `WorkerPlan::new` accepts: the rules of
//!   what workers can compute live there alone, and its one-line reason is the refusal.
//! - It does not raise the host buffers a worker keeps on the tenant's behalf past the
//!   runtime's defaults: `batch_bytes`, `limits.guest_log_rate` (what its guests may
//!   write to the worker's log each second), an aggregate's `cache_bytes` (its
//!   `cache_entries` only adds a bound), a Kafka source's or sink's `buffer_bytes`
//!   (lower is allowed); nor the partitions of the repartition topics its workers
//!   create on the shared cluster (`repartition_partitions`, at most the default 32:
//!   tenants reach the brokers only through their specs, the server holds their Kafka
//!   credentials); nor an aggregate's `max_accumulator_bytes`.
//! - Nothing it asks for outlasts what a shared server keeps: a window and its
//!   `allowed_lateness` at most [`MAX_HOSTED_WINDOW`] (a window's state stays until it
//!   fires), a Kafka sink's `transaction_timeout` at most the runtime's default (a dead
//!   worker's open transaction holds back read_committed readers that long), a Kafka
//!   client's `connect_timeout` (and a source's `failover_timeout`) at most
//!   [`MAX_HOSTED_CONNECT_TIMEOUT`]; a generator's `count` at most
//!   [`MAX_HOSTED_GENERATOR_COUNT`] (what it generates lands on the shared cluster).
//! - No topic it names is named as pipelines name their own (`names::is_derived_topic`:
//!   `.progress`, `_progress`, `-repartition`), so no tenant topic is another
//!   pipeline's progress or repartition topic, or the same name to Kafka.
//! - The server then sets the namespace: state and checkpoints under the pipeline's
//!   directory, the Kafka sinks' `transactional_prefix` to the tenant's prefix (so
//!   `KafkaNames` derives its groups, transactional ids and progress topic from it), the
//!   cluster's `bootstrap`, and the tenant's principal as `security`.
//! - The result parses as an ordinary spec (`PipelineSpec::parse`): the worker runs it
//!   exactly as `weir run` would.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::connector::kafka::names::is_derived_topic;
use crate::field::units;
use crate::pipeline::error::with_article;
use crate::pipeline::worker_plan::WorkerPlan;
use crate::server::error::ApiError;
use crate::server::ids;
use crate::server::namespace::{PipelineDir, TenantNamespace};
use crate::server::spec_paths::json_path_of_line;
use crate::server::wire::Quotas;
use crate::spec::{AggregateStep, PipelineSpec, SinkSpec, SourceConfig, SpecError, StepSpec};

/// The environment variable a worker reads its tenant's Kafka password from.
pub const WORKER_PASSWORD_ENV: &str = "WEIR_TENANT_KAFKA_PASSWORD";

/// How the tenant's workers reach Kafka.
#[derive(Debug, Clone, Default)]
pub struct KafkaAccess {
    pub bootstrap: Option<String>,
    /// `security = {...}` for every Kafka source and sink (password from
    /// `WORKER_PASSWORD_ENV`), when the tenant has a principal of its own.
    pub security: Option<Value>,
}

/// One of the tenant's modules, as a step uses it.
#[derive(Debug, Clone)]
pub struct TenantModule {
    pub path: std::path::PathBuf,
    /// `mapper` or `aggregator` (`World::name`).
    pub world: String,
}

/// Everything a spec is checked against and completed with.
pub struct HostedContext<'a> {
    pub namespace: &'a TenantNamespace,
    pub quotas: &'a Quotas,
    pub kafka: &'a KafkaAccess,
    /// Each of the tenant's modules, by id.
    pub module: &'a dyn Fn(&str) -> Option<TenantModule>,
    /// Worker processes the pipeline is to run as.
    pub workers: u32,
}

/// A checked hosted spec: its name, its modules by step, and the TOML the worker runs.
#[derive(Debug, Clone)]
pub struct HostedSpec {
    pub name: String,
    pub modules: BTreeMap<String, String>,
    pub toml: String,
    /// The topics the pipeline makes for itself as this many workers (progress, and
    /// repartition with several: `KafkaNames::topics`), which no other pipeline of the
    /// tenant may share.
    pub topics: Vec<String>,
}

fn refuse(field: &str, reason: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("spec field {field}: {reason}"))
}

impl HostedSpec {
    /// Checks `spec` and completes it for its directory in the tenant's namespace.
    pub fn build(spec: &Value, ctx: &HostedContext<'_>) -> Result<Self, ApiError> {
        let Value::Object(root) = spec else {
            return Err(ApiError::bad_request(
                "spec: a pipeline spec is a JSON object",
            ));
        };
        let mut root = root.clone();
        let name = match root.get("name") {
            Some(Value::String(n)) => ids::pipeline_name(n)?.to_owned(),
            _ => return Err(refuse("name", "required: the pipeline's name")),
        };
        for field in ["state_dir", "dead_letter"] {
            if root.contains_key(field) {
                return Err(refuse(field, "the server chooses it; remove it"));
            }
        }
        reject_nulls(&Value::Object(root.clone()), "spec")?;
        let dir = ctx.namespace.pipeline_dir(&name);
        check_parallelism(&root, ctx.quotas)?;
        set_checkpoint_dir(&mut root, &dir)?;
        set_limits(&mut root, ctx.quotas)?;
        root.insert("state_dir".into(), json!(dir.state()));
        let modules = set_modules(&mut root, ctx)?;
        set_sources(&mut root, ctx)?;
        set_sinks(&mut root, ctx)?;
        let toml =
            toml::to_string(&root).map_err(|e| ApiError::bad_request(format!("spec: {e}")))?;
        let parsed = PipelineSpec::parse(&toml, dir.root(), "spec")
            .map_err(|e| in_tenant_terms(&e, &toml))?;
        check_host_buffers(&parsed)?;
        check_workers(&parsed, ctx.workers, ctx.quotas)?;
        let keyed: Vec<String> = parsed
            .keyed_steps()
            .into_iter()
            .map(|n| parsed.step_id(n))
            .collect();
        let topics = ctx.namespace.kafka_names(&name).topics(&keyed, ctx.workers);
        Ok(HostedSpec {
            name,
            modules,
            toml,
            topics,
        })
    }
}

/// A refusal of the generated TOML in the tenant's terms: the line becomes the JSON
/// field it came from (`spec_paths`), or goes.
fn in_tenant_terms(e: &SpecError, toml: &str) -> ApiError {
    let SpecError::Invalid { line, message, .. } = e else {
        return ApiError::bad_request(e.to_string());
    };
    match line.and_then(|l| json_path_of_line(toml, l)) {
        Some(path) => refuse(&path, message),
        None => ApiError::bad_request(format!("spec: {message}")),
    }
}

/// Refuses a number of workers outside 1..=the tenant's quota, or more than one for a
/// spec that cannot run as workers (`WorkerPlan::new` says why).
fn check_workers(spec: &PipelineSpec, workers: u32, quotas: &Quotas) -> Result<(), ApiError> {
    let quota = quotas.workers.unwrap_or(1);
    if workers == 0 {
        return Err(ApiError::bad_request(
            "workers: 0: a pipeline runs as one worker at least",
        ));
    }
    if workers > quota {
        return Err(ApiError::bad_request(format!(
            "workers: {workers} exceeds the tenant's quota of {quota} workers per pipeline (quota workers)"
        )));
    }
    let worker = crate::cluster::Worker::new(0, workers)
        .map_err(|e| ApiError::bad_request(format!("workers: {e}")))?;
    WorkerPlan::new(spec, worker)
        .map(drop)
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

/// Refuses host buffers and repartition topics above the runtime's defaults, a
/// generator past [`MAX_HOSTED_GENERATOR_COUNT`], and windows and Kafka timeouts past
/// what a shared server keeps (`check_window`,
/// `check_kafka_timeouts`; see the module doc), naming the field: the server, not the
/// spec, bounds what a worker holds for a tenant and what its workers create on the
/// shared cluster.
fn check_host_buffers(spec: &PipelineSpec) -> Result<(), ApiError> {
    use crate::connector::kafka::config::{DEFAULT_SINK_BUFFER_BYTES, DEFAULT_SOURCE_BUFFER_BYTES};
    use crate::connector::kafka::repartition::DEFAULT_REPARTITION_PARTITIONS;
    use crate::spec::pipeline::DEFAULT_BATCH_BYTES;
    use crate::spec::step::{DEFAULT_CACHE_BYTES, DEFAULT_MAX_ACCUMULATOR_BYTES};
    let at_most = |field: String, value: usize, max: usize| {
        if value > max {
            Err(refuse(
                &field,
                format!("{value} exceeds {max}, the most a shared server allows"),
            ))
        } else {
            Ok(())
        }
    };
    at_most("batch_bytes".into(), spec.batch_bytes, DEFAULT_BATCH_BYTES)?;
    at_most(
        "limits.guest_log_rate".into(),
        spec.limits.guest_log_rate,
        crate::engine::DEFAULT_GUEST_LOG_RATE,
    )?;
    at_most(
        "repartition_partitions".into(),
        spec.repartition_partitions,
        DEFAULT_REPARTITION_PARTITIONS,
    )?;
    for (i, step) in spec.steps.iter().enumerate() {
        if let StepSpec::Aggregate(a) = step {
            let at = format!("steps[{i}]");
            at_most(
                format!("{at}.cache_bytes"),
                a.cache_bytes,
                DEFAULT_CACHE_BYTES,
            )?;
            at_most(
                format!("{at}.max_accumulator_bytes"),
                a.max_accumulator_bytes,
                DEFAULT_MAX_ACCUMULATOR_BYTES,
            )?;
            check_window(a, &at)?;
        }
    }
    for (i, source) in spec.sources.iter().enumerate() {
        match &source.config {
            SourceConfig::Kafka(k) => {
                let field = format!("sources[{i}].buffer_bytes");
                at_most(field, k.buffer_bytes, DEFAULT_SOURCE_BUFFER_BYTES)?;
            }
            SourceConfig::Generator(g) if g.count > MAX_HOSTED_GENERATOR_COUNT => {
                return Err(refuse(
                    &format!("sources[{i}].count"),
                    format!(
                        "{} exceeds {MAX_HOSTED_GENERATOR_COUNT}, the most a shared server allows (a generator's records land on the shared cluster: a larger input belongs in a topic)",
                        g.count
                    ),
                ));
            }
            _ => {}
        }
    }
    for (i, sink) in spec.sinks.iter().enumerate() {
        if let SinkSpec::Kafka(k) = sink {
            let field = format!("sinks[{i}].buffer_bytes");
            at_most(field, k.buffer_bytes, DEFAULT_SINK_BUFFER_BYTES)?;
        }
    }
    check_kafka_timeouts(spec)
}

/// The longest a hosted window, or its allowed lateness, may be: a window keeps its
/// state on the server's disk until it fires.
pub const MAX_HOSTED_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);
/// The most records a hosted generator source may generate: a generator is a source
/// for tries and load tests, and all it makes lands in the tenant's topics on the
/// shared cluster; a larger input belongs in a topic.
pub const MAX_HOSTED_GENERATOR_COUNT: u64 = 1_000_000_000;
/// The longest a hosted Kafka client may take to reach the cluster at start.
pub const MAX_HOSTED_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

fn at_most_duration(
    field: String,
    value: Duration,
    max: Duration,
    why: &str,
) -> Result<(), ApiError> {
    if value <= max {
        return Ok(());
    }
    Err(refuse(
        &field,
        format!(
            "{} exceeds {}, the most a shared server allows ({why})",
            units::format_duration(value),
            units::format_duration(max)
        ),
    ))
}

/// Refuses a window or lateness longer than [`MAX_HOSTED_WINDOW`].
fn check_window(a: &AggregateStep, at: &str) -> Result<(), ApiError> {
    let why = "a window keeps its state until it fires";
    if let Some(window) = &a.window {
        let field = format!("{at}.window.size");
        at_most_duration(field, window.size(), MAX_HOSTED_WINDOW, why)?;
    }
    let field = format!("{at}.allowed_lateness");
    at_most_duration(field, a.allowed_lateness, MAX_HOSTED_WINDOW, why)
}

/// Refuses a transaction timeout past the runtime's default (an open transaction of a
/// dead worker holds back every read_committed reader of its partitions that long) and
/// a connect or failover timeout past [`MAX_HOSTED_CONNECT_TIMEOUT`].
fn check_kafka_timeouts(spec: &PipelineSpec) -> Result<(), ApiError> {
    use crate::connector::kafka::config::DEFAULT_TRANSACTION_TIMEOUT;
    let connect = |field: String, value| {
        let why = "a worker that cannot reach Kafka fails and is restarted instead";
        at_most_duration(field, value, MAX_HOSTED_CONNECT_TIMEOUT, why)
    };
    for (i, source) in spec.sources.iter().enumerate() {
        if let SourceConfig::Kafka(k) = &source.config {
            connect(format!("sources[{i}].connect_timeout"), k.connect_timeout)?;
            connect(format!("sources[{i}].failover_timeout"), k.failover_timeout)?;
        }
    }
    for (i, sink) in spec.sinks.iter().enumerate() {
        if let SinkSpec::Kafka(k) = sink {
            connect(format!("sinks[{i}].connect_timeout"), k.connect_timeout)?;
            at_most_duration(
                format!("sinks[{i}].transaction_timeout"),
                k.transaction_timeout,
                DEFAULT_TRANSACTION_TIMEOUT,
                "a dead worker's open transaction holds back read_committed readers that long",
            )?;
        }
    }
    Ok(())
}

fn reject_nulls(value: &Value, at: &str) -> Result<(), ApiError> {
    match value {
        Value::Null => Err(refuse(at, "null is not a value; leave the field out")),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, v)| reject_nulls(v, &format!("{at}[{i}]"))),
        Value::Object(map) => map
            .iter()
            .try_for_each(|(k, v)| reject_nulls(v, &format!("{at}.{k}"))),
        _ => Ok(()),
    }
}

fn check_parallelism(root: &Map<String, Value>, quotas: &Quotas) -> Result<(), ApiError> {
    let allowed = u64::from(quotas.parallelism.unwrap_or(1));
    match root.get("parallelism").map(|v| (v, v.as_u64())) {
        None => Ok(()),
        Some((_, Some(p))) if p <= allowed => Ok(()),
        Some((v, Some(_))) => Err(refuse(
            "parallelism",
            format!("{v} exceeds the tenant's quota of {allowed}"),
        )),
        Some((v, None)) => Err(refuse(
            "parallelism",
            format!("{v} is not a number of subtasks: use 1 to {allowed}"),
        )),
    }
}

fn set_checkpoint_dir(root: &mut Map<String, Value>, dir: &PipelineDir) -> Result<(), ApiError> {
    let checkpoint = root.entry("checkpoint").or_insert_with(|| json!({}));
    let Value::Object(c) = checkpoint else {
        return Err(refuse("checkpoint", "must be an object"));
    };
    if let Some(dir) = c.get("dir") {
        // An object store URL would let a tenant read or delete any bucket and prefix
        // the server's credentials reach: hosted checkpoints stay in the tenant's
        // directory.
        let object_store = dir.as_str().is_some_and(|d| d.contains("://"));
        let why = if object_store {
            "the server chooses it (the tenant's own directory); object store URLs such as s3:// are not available to hosted pipelines; remove it"
        } else {
            "the server chooses it; remove it"
        };
        return Err(refuse("checkpoint.dir", why));
    }
    c.insert("dir".into(), json!(dir.checkpoints()));
    Ok(())
}

/// Guest memory and call deadline within the quota (filled in with the quota's or the
/// runtime's default, whichever is smaller).
fn set_limits(root: &mut Map<String, Value>, quotas: &Quotas) -> Result<(), ApiError> {
    let limits = root.entry("limits").or_insert_with(|| json!({}));
    let Value::Object(l) = limits else {
        return Err(refuse("limits", "must be an object"));
    };
    for field in ["compile_cpu", "compile_memory"] {
        if l.contains_key(field) {
            return Err(refuse(
                &format!("limits.{field}"),
                "the server sets compile limits",
            ));
        }
    }
    let memory_quota = quotas.guest_memory.unwrap_or(u64::MAX);
    let memory = match l.get("memory") {
        Some(Value::String(s)) => {
            units::parse_size(s).map_err(|e| refuse("limits.memory", e))? as u64
        }
        Some(_) => return Err(refuse("limits.memory", "a size such as \"64MiB\"")),
        None => (crate::engine::DEFAULT_GUEST_MEMORY as u64).min(memory_quota),
    };
    if memory > memory_quota {
        return Err(refuse(
            "limits.memory",
            format!("{memory} bytes exceeds the tenant's quota of {memory_quota}"),
        ));
    }
    l.insert("memory".into(), json!(format!("{memory}B")));
    let timeout_quota = Duration::from_millis(quotas.call_timeout_ms.unwrap_or(u64::MAX));
    let timeout = match l.get("call_timeout") {
        Some(Value::String(s)) => {
            units::parse_duration(s).map_err(|e| refuse("limits.call_timeout", e))?
        }
        Some(_) => return Err(refuse("limits.call_timeout", "a duration such as \"1s\"")),
        None => crate::engine::DEFAULT_CALL_TIMEOUT.min(timeout_quota),
    };
    if timeout > timeout_quota {
        return Err(refuse(
            "limits.call_timeout",
            format!(
                "{} exceeds the tenant's quota of {}",
                units::format_duration(timeout),
                units::format_duration(timeout_quota)
            ),
        ));
    }
    l.insert(
        "call_timeout".into(),
        json!(format!("{}ms", timeout.as_millis())),
    );
    Ok(())
}

fn entries<'a>(
    root: &'a mut Map<String, Value>,
    field: &str,
) -> Result<&'a mut Vec<Value>, ApiError> {
    match root.get_mut(field) {
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(refuse(field, "must be an array of objects")),
        None => Err(refuse(field, "required")),
    }
}

fn object<'a>(item: &'a mut Value, at: &str) -> Result<&'a mut Map<String, Value>, ApiError> {
    match item {
        Value::Object(m) => Ok(m),
        _ => Err(refuse(at, "must be an object")),
    }
}

fn set_modules(
    root: &mut Map<String, Value>,
    ctx: &HostedContext<'_>,
) -> Result<BTreeMap<String, String>, ApiError> {
    let mut modules = BTreeMap::new();
    for (i, step) in entries(root, "steps")?.iter_mut().enumerate() {
        let at = format!("steps[{i}]");
        let step = object(step, &at)?;
        let key = match step.get("name") {
            Some(Value::String(n)) => ids::step_name(n)?.to_owned(),
            _ => format!("step-{i}"),
        };
        let id = match step.get("module") {
            Some(Value::String(id)) => ids::module_id(id)?.to_owned(),
            _ => {
                return Err(refuse(
                    &format!("{at}.module"),
                    "required: the id of one of your modules",
                ));
            }
        };
        let module = (ctx.module)(&id)
            .ok_or_else(|| refuse(&format!("{at}.module"), format!("you have no module {id}")))?;
        check_world(step, &at, &id, &module.world)?;
        step.insert("module".into(), json!(module.path));
        modules.insert(key, id);
    }
    Ok(modules)
}

/// Refuses a module of the wrong world for its step (a mapper in an aggregate step),
/// at create rather than at every start.
fn check_world(step: &Map<String, Value>, at: &str, id: &str, world: &str) -> Result<(), ApiError> {
    let (kind, wants) = match step.get("type").and_then(Value::as_str) {
        Some("map") => ("map", "mapper"),
        Some("aggregate") => ("aggregate", "aggregator"),
        _ => return Ok(()),
    };
    if world == wants {
        return Ok(());
    }
    Err(refuse(
        &format!("{at}.module"),
        format!(
            "module {id} is {}; a {kind} step needs {}",
            with_article(world),
            with_article(wants)
        ),
    ))
}

fn check_topic(ns: &TenantNamespace, at: &str, topic: &Value) -> Result<(), ApiError> {
    match topic {
        Value::String(t) if is_derived_topic(t) => Err(refuse(
            at,
            format!(
                "topic {t:?} is named as pipelines name their own progress and repartition topics (.progress, _progress, -repartition): choose another name"
            ),
        )),
        Value::String(t) if ns.owns_topic(t) => Ok(()),
        Value::String(t) => Err(refuse(
            at,
            format!("topic {t:?} is outside your prefix {:?}", ns.kafka_prefix()),
        )),
        _ => Err(refuse(at, "a topic name")),
    }
}

fn server_chosen(c: &Map<String, Value>, at: &str, fields: &[&str]) -> Result<(), ApiError> {
    match fields.iter().find(|f| c.contains_key(**f)) {
        Some(f) => Err(refuse(
            &format!("{at}.{f}"),
            "the server chooses it; remove it",
        )),
        None => Ok(()),
    }
}

fn set_kafka_access(c: &mut Map<String, Value>, kafka: &KafkaAccess) {
    if let Some(b) = &kafka.bootstrap {
        c.insert("bootstrap".into(), json!(b));
    }
    if let Some(s) = &kafka.security {
        c.insert("security".into(), s.clone());
    }
}

fn set_sources(root: &mut Map<String, Value>, ctx: &HostedContext<'_>) -> Result<(), ApiError> {
    for (i, source) in entries(root, "sources")?.iter_mut().enumerate() {
        let at = format!("sources[{i}]");
        let c = object(source, &at)?;
        match c.get("type").and_then(Value::as_str) {
            Some("generator") => {}
            Some("kafka") => {
                server_chosen(c, &at, &["group", "bootstrap", "security"])?;
                if let Some(t) = c.get("topic") {
                    check_topic(ctx.namespace, &format!("{at}.topic"), t)?;
                }
                if let Some(Value::Array(ts)) = c.get("topics") {
                    for (j, t) in ts.iter().enumerate() {
                        check_topic(ctx.namespace, &format!("{at}.topics[{j}]"), t)?;
                    }
                }
                set_kafka_access(c, ctx.kafka);
            }
            Some(other) => {
                return Err(refuse(
                    &format!("{at}.type"),
                    format!("{other:?} is not available on a shared server (kafka or generator)"),
                ));
            }
            None => return Err(refuse(&format!("{at}.type"), "required")),
        }
    }
    Ok(())
}

fn set_sinks(root: &mut Map<String, Value>, ctx: &HostedContext<'_>) -> Result<(), ApiError> {
    for (i, sink) in entries(root, "sinks")?.iter_mut().enumerate() {
        let at = format!("sinks[{i}]");
        let c = object(sink, &at)?;
        match c.get("type").and_then(Value::as_str) {
            Some("kafka") => {
                server_chosen(c, &at, &["transactional_prefix", "bootstrap", "security"])?;
                check_topic(
                    ctx.namespace,
                    &format!("{at}.topic"),
                    c.get("topic").unwrap_or(&Value::Null),
                )?;
                c.insert(
                    "transactional_prefix".into(),
                    json!(ctx.namespace.kafka_prefix()),
                );
                set_kafka_access(c, ctx.kafka);
            }
            Some(other) => {
                return Err(refuse(
                    &format!("{at}.type"),
                    format!("{other:?} is not available on a shared server (kafka)"),
                ));
            }
            None => return Err(refuse(&format!("{at}.type"), "required")),
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "hosted_spec_tests.rs"]
mod tests;
