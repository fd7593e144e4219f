//! The JSON bodies of `weir serve`'s HTTP API: what a client sends and receives.
//!
//! Invariants: these types are the API's contract, shared by the server's handlers,
//! its OpenAPI document (`ToSchema`) and the CLI client (`weir module`, `weir
//! pipeline`). Every error answer is an [`ErrorBody`] whose `error` is one line. Ids are
//! checked where they enter (see `names`), never trusted here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Every error answer: one line saying what was refused and why.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: String,
}

/// A tenant's quotas. Absent fields take the server's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Quotas {
    /// Pipelines the tenant may have at once.
    #[serde(default, deserialize_with = "whole::number")]
    pub pipelines: Option<u32>,
    /// Total bytes of the tenant's modules.
    #[serde(default, deserialize_with = "whole::number")]
    pub module_bytes: Option<u64>,
    /// Linear memory per guest instance, bytes (the spec's `limits.memory` at most).
    #[serde(default, deserialize_with = "whole::number")]
    pub guest_memory: Option<u64>,
    /// CPU deadline per guest call, milliseconds (the spec's `limits.call_timeout` at most).
    #[serde(default, deserialize_with = "whole::number")]
    pub call_timeout_ms: Option<u64>,
    /// Subtasks per operator in each worker (the spec's `parallelism` at most).
    #[serde(default, deserialize_with = "whole::number")]
    pub parallelism: Option<u32>,
    /// Worker processes per pipeline (a create's or upgrade's `workers` at most).
    #[schema(minimum = 1)]
    #[serde(default, deserialize_with = "whole::number")]
    pub workers: Option<u32>,
    /// Bytes of state and checkpoints per pipeline; a pipeline over it is stopped as failed.
    #[serde(default, deserialize_with = "whole::number")]
    pub checkpoint_bytes: Option<u64>,
    /// Partitions of all the topics the tenant creates through `/v1/topics`, together
    /// (the pipelines' own internal topics are not counted).
    #[serde(default, deserialize_with = "whole::number")]
    pub topic_partitions: Option<u32>,
    /// CPU of all the tenant's workers together, in thousandths of a CPU (1500: one and
    /// a half CPUs), enforced by the kernel where the server runs with cgroups; none:
    /// no cap, and under contention the share of one CPU.
    #[schema(minimum = 10, maximum = 1024000)]
    #[serde(default, deserialize_with = "whole::number")]
    pub cpu_millicores: Option<u32>,
    /// Memory of all the tenant's workers together, bytes (host memory: guests' linear
    /// memory, state caches, buffers), enforced by the kernel where the server runs with
    /// cgroups; past it the kernel kills one of the tenant's workers.
    #[schema(minimum = 67108864)]
    #[serde(default, deserialize_with = "whole::number")]
    pub memory_bytes: Option<u64>,
}

/// `POST /v1/topics`: a topic under the tenant's prefix.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTopic {
    /// The full name, starting with the tenant's prefix (`team-a.orders`): letters,
    /// digits, `.`, `_` and `-`, at most 249 bytes; not ending in `.progress` or
    /// `-repartition` (the names of pipelines' internal topics).
    pub name: String,
    /// Its partitions, at least 1, within the tenant's `topic_partitions` quota.
    #[serde(deserialize_with = "whole::required")]
    #[schema(minimum = 1)]
    pub partitions: u32,
}

/// One of the tenant's topics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TopicInfo {
    pub name: String,
    pub partitions: u32,
}

/// `POST /v1/admin/tenants`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    /// `[a-z0-9-]{1,32}`, not starting with `-`.
    pub id: String,
    #[serde(default)]
    pub quotas: Quotas,
}

/// A tenant as the admin sees it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Tenant {
    pub id: String,
    /// Quotas in force (defaults filled in).
    pub quotas: Quotas,
    /// The prefix of every Kafka name of the tenant: transactional ids, consumer groups,
    /// progress topics and the topics its pipelines may read and write.
    pub kafka_prefix: String,
    /// Whether the server runs its pipelines with a Kafka principal of its own.
    pub kafka_principal: Option<String>,
    pub tokens: u32,
    pub created_at: String,
}

/// `POST /v1/admin/tenants/{id}/tokens`: the token, shown this once (only its hash is kept).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct IssuedToken {
    pub tenant: String,
    pub token: String,
    /// The token's public key (its `weir_{key}_` part): what lists and revokes name.
    pub key: String,
}

/// One of a tenant's tokens, as the admin lists it: never the token itself.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenInfo {
    /// 16 hex digits: the `{key}` of `weir_{key}_{secret}`.
    pub key: String,
    pub created_at: String,
}

/// A module (component) uploaded by a tenant. Its id is the SHA-256 of its bytes.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Module {
    pub id: String,
    /// The name given at upload (`?name=`), for people; pipelines name modules by id.
    pub name: String,
    /// `mapper` or `aggregator`.
    pub world: String,
    pub exports: Vec<String>,
    pub imports: Vec<String>,
    pub size: u64,
    pub uploaded_at: String,
}

/// `POST /v1/pipelines`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePipeline {
    /// The pipeline spec: the TOML spec's fields as JSON. Steps name modules by id
    /// (`"module": "<sha256>"`); topics lie under the tenant's prefix; the server sets
    /// the transactional prefix, groups, state and checkpoint directories itself.
    #[schema(value_type = Object)]
    pub spec: serde_json::Value,
    /// Start it at once (default true).
    #[serde(default = "yes")]
    pub start: bool,
    /// Worker processes to run it as (default 1: the whole pipeline in one process),
    /// at most the tenant's `workers` quota. With more than one, every source must be
    /// a Kafka source and each keyed step shuffles through a repartition topic of
    /// its own (see docs/src/operations/workers.md); a spec that cannot run so is
    /// refused.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole::number"
    )]
    #[schema(minimum = 1)]
    pub workers: Option<u32>,
}

fn yes() -> bool {
    true
}

/// Whole numbers in request bodies. JSON Schema counts `2.0` as an integer, so the
/// document's `integer` fields take it as 2; a number that is not whole, or out of
/// the field's range, is refused naming the value.
mod whole {
    use serde::{Deserialize, Deserializer, de::Error};

    pub fn number<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
    where
        D: Deserializer<'de>,
        T: TryFrom<u64>,
    {
        let Some(n) = Option::<serde_json::Number>::deserialize(d)? else {
            return Ok(None);
        };
        let whole = n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && (0.0..u64::MAX as f64).contains(f))
                .map(|f| f as u64)
        });
        let out_of_range = || D::Error::custom(format!("{n} is not a whole number in range"));
        let whole = whole.ok_or_else(out_of_range)?;
        T::try_from(whole).map(Some).map_err(|_| out_of_range())
    }

    /// `number` for a field that must be present.
    pub fn required<'de, D, T>(d: D) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: TryFrom<u64>,
    {
        number(d)?.ok_or_else(|| D::Error::custom("a whole number is required"))
    }
}

/// `POST /v1/pipelines/{name}/upgrade`: new module ids by step name and/or a new number
/// of workers, started from the pipeline's savepoint with its state.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpgradePipeline {
    /// New module ids by step name (or `step-N`); none: the modules stay.
    #[serde(default)]
    pub modules: BTreeMap<String, String>,
    /// Run the pipeline as this many workers from now on (a rescale: the new workers
    /// take over the old ones' savepoints); absent: as many as before. From one worker
    /// to several is a rescale too; from several back to one is refused.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole::number"
    )]
    #[schema(minimum = 1)]
    pub workers: Option<u32>,
}

/// Where a pipeline is (or one of its workers: `starting` is then never seen, and
/// `restarting` and `failed` are that worker's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PipelineState {
    /// Its workers are starting (recovering from their checkpoints).
    Starting,
    /// Every worker runs (or has finished its bounded input while others run).
    Running,
    /// A worker failed and waits out its backoff before its next start.
    Restarting,
    /// A worker failed more often than the restart limit allows, or the pipeline
    /// outgrew its disk quota; see `last_error` (which names the worker).
    Failed,
    /// Stopped on request, with a final checkpoint.
    Stopped,
    /// Its bounded sources are drained and the last checkpoint committed.
    Finished,
}

/// What the tenant asked a pipeline to be: the supervisor makes it so (and a server
/// restart starts every `running` one again, and finishes every `deleted` one's delete).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Desired {
    Running,
    Stopped,
    /// A delete was asked and has not finished (it is under way, or failed and waits
    /// for the next delete or server start): nothing else may change the pipeline.
    Deleted,
}

impl Desired {
    /// `running`, `stopped` or `deleted`, as the API and the catalog write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Desired::Running => "running",
            Desired::Stopped => "stopped",
            Desired::Deleted => "deleted",
        }
    }
}

/// `GET /v1/pipelines/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PipelineStatus {
    pub name: String,
    pub state: PipelineState,
    /// What the tenant asked for.
    pub desired: Desired,
    /// Module ids by step name (or `step-N`).
    pub modules: BTreeMap<String, String>,
    pub last_complete_checkpoint: Option<u64>,
    pub last_committed_checkpoint: Option<u64>,
    pub records_in: u64,
    pub records_out: u64,
    pub dead_letters: u64,
    /// Records in the Kafka sources' partitions not read yet, as the worker last saw
    /// them (0 without Kafka sources; none before the worker first reported); in a
    /// repartition topic, Kafka records are frames of many records.
    pub consumer_lag: Option<u64>,
    /// Worker restarts after failures, since the last start on request (all workers).
    pub restarts: u32,
    /// The last failure; with several workers it names the worker (`worker 1/3: ...`).
    pub last_error: Option<String>,
    /// The checkpoint the last stop kept as a savepoint (upgrades start from it); with
    /// several workers, the smallest of their final checkpoints (each worker's own is
    /// in `worker_status`).
    pub savepoint: Option<u64>,
    pub created_at: String,
    /// Worker processes the pipeline runs as.
    pub workers: u32,
    /// Each worker, by index: what the supervisor last saw of it (since this server
    /// started) and its own last committed checkpoint.
    pub worker_status: Vec<WorkerStatus>,
}

/// One worker process of a pipeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WorkerStatus {
    /// `I` of worker `I/N`.
    pub index: u32,
    /// `running`, `restarting`, `failed`, `stopped` or `finished`; the pipeline's state
    /// for a worker this server has not supervised yet.
    pub state: PipelineState,
    /// Its process id while it runs.
    pub pid: Option<u32>,
    /// Its restarts after failures, since the last start on request.
    pub restarts: u32,
    pub last_error: Option<String>,
    /// Its own last committed checkpoint (each worker checkpoints on its own).
    pub last_committed_checkpoint: Option<u64>,
    pub records_in: u64,
    pub records_out: u64,
    /// The last lines of its log (at most 20, each at most 1 KiB; the server's paths and
    /// the cluster's addresses replaced as in `last_error`).
    #[serde(default)]
    pub log_tail: Vec<String>,
}
