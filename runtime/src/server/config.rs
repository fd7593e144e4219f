//! `server.toml`: what `weir serve` listens on, where it keeps its data, how it
//! supervises workers, the default quotas and the tenants it declares.
//!
//! ```toml
//! listen = "127.0.0.1:8080"        # default; port 0 picks a free port (printed at start)
//! data_dir = "/var/lib/weir"       # required: catalog, modules, tenants' state
//! admin_token_env = "WEIR_ADMIN_TOKEN"   # or admin_token_file = "..."; one is required
//! tls = { cert = "server.pem", key = "server.key" }   # optional: HTTPS (rustls), PEM
//!
//! [workers]
//! restart_backoff = "1s"           # first wait after a failure, doubled each time
//! max_backoff = "60s"
//! restart_limit = 5                # failures in a row before a pipeline is left failed
//! stop_timeout = "60s"             # a stop waits this long for the final checkpoint
//! log_max_bytes = "64MiB"          # a worker's log is rotated past this (one older copy kept)
//!
//! [compiles]                       # module uploads are compiled in a bounded queue
//! slots = 2                        # at once on the server; default half the CPUs, >= 1
//! per_tenant = 1                   # at once per tenant; default 1
//!
//! [isolation]                      # per-tenant CPU and memory walls (cgroups v2, else v1)
//! cgroups = "auto"                 # auto (without walls where the host has none, said at
//!                                  # start), required (refuse to start without) or off
//! parent = "/weir"                 # optional: the group to build under; default the server's
//!
//! [kafka]                          # the cluster tenants' pipelines use
//! bootstrap = "127.0.0.1:9092"     # default $KAFKA_BOOTSTRAP
//! protocol = "sasl_plaintext"      # with tenants' principals: sasl_plaintext or sasl_ssl
//! mechanism = "SCRAM-SHA-256"
//!
//! [quotas]                         # defaults for tenants that do not set their own
//! pipelines = 10
//! module_bytes = 268435456
//! workers = 2                      # worker processes per pipeline; parallelism is per worker
//! cpu_millicores = 2000            # all of a tenant's workers together: 2 CPUs (default no cap,
//!                                  # and one CPU's share under contention)
//! memory_bytes = 4294967296        # all of a tenant's workers together (default 4 GiB)
//!
//! [[tenants]]
//! id = "team-a"
//! quotas = { pipelines = 4 }
//! kafka = { username = "team-a", password_env = "TEAM_A_KAFKA_PASSWORD" }
//! ```
//!
//! Invariants after `load`: the admin token is read and not empty; tenant ids are
//! valid and unique; durations are positive. Passwords are never read here (the
//! worker reads them from its environment) and never printed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::field::units;
use crate::server::admission::CompilesConfig;
use crate::server::error::ServerError;
use crate::server::ids;
use crate::server::walls::IsolationConfig;
use crate::server::wire::Quotas;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: String,
    pub data_dir: PathBuf,
    /// The admin token (compared by hash; never logged).
    pub admin_token: String,
    pub workers: WorkersConfig,
    /// How many module compiles run at once (see `admission`).
    pub compiles: CompilesConfig,
    /// Per-tenant CPU and memory walls (see `walls`).
    pub isolation: IsolationConfig,
    pub kafka: ServerKafka,
    /// Quotas of tenants that set none of their own.
    pub quotas: Quotas,
    pub tenants: Vec<TenantConfig>,
    /// Requests of one tenant served at once; past it, 429 (`api::fairness`).
    pub tenant_requests: usize,
    /// Serve HTTPS with this certificate chain and key (PEM), absolute paths.
    pub tls: Option<TlsConfig>,
}

/// `tls = { cert = "server.pem", key = "server.key" }`: PEM files, relative to the
/// config file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServerConfig {
    #[serde(default = "default_listen")]
    listen: String,
    data_dir: PathBuf,
    #[serde(default)]
    admin_token_env: Option<String>,
    #[serde(default)]
    admin_token_file: Option<PathBuf>,
    #[serde(default)]
    workers: WorkersConfig,
    #[serde(default)]
    compiles: CompilesConfig,
    #[serde(default)]
    isolation: IsolationConfig,
    #[serde(default)]
    kafka: ServerKafka,
    #[serde(default)]
    quotas: Quotas,
    #[serde(default)]
    tenants: Vec<TenantConfig>,
    #[serde(default = "default_tenant_requests")]
    tenant_requests: usize,
    #[serde(default)]
    tls: Option<TlsConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkersConfig {
    #[serde(deserialize_with = "units::positive_duration")]
    pub restart_backoff: Duration,
    #[serde(deserialize_with = "units::positive_duration")]
    pub max_backoff: Duration,
    pub restart_limit: u32,
    #[serde(deserialize_with = "units::positive_duration")]
    pub stop_timeout: Duration,
    /// A worker's log is rotated past this size (`worker_log`), at least 1 MiB.
    #[serde(deserialize_with = "log_max_bytes")]
    pub log_max_bytes: u64,
}

/// Default bound of one worker log (two files of it on disk at most).
pub const DEFAULT_LOG_MAX_BYTES: u64 = 64 << 20;

fn log_max_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let bytes = units::size(d)? as u64;
    if bytes < 1 << 20 {
        return Err(serde::de::Error::custom(
            "log_max_bytes must be at least 1MiB",
        ));
    }
    Ok(bytes)
}

impl Default for WorkersConfig {
    fn default() -> Self {
        WorkersConfig {
            restart_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            restart_limit: 5,
            stop_timeout: Duration::from_secs(60),
            log_max_bytes: DEFAULT_LOG_MAX_BYTES,
        }
    }
}

/// The Kafka cluster of the tenants' pipelines.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerKafka {
    /// Default `$KAFKA_BOOTSTRAP` (as a spec's).
    pub bootstrap: Option<String>,
    /// The security protocol used with tenants' principals.
    pub protocol: Option<String>,
    pub mechanism: Option<String>,
}

/// A tenant declared in the config file (created at start if missing; its quotas are
/// the file's).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    pub id: String,
    #[serde(default)]
    pub quotas: Quotas,
    /// The tenant's own Kafka principal: its pipelines run with it, so the broker's
    /// ACLs hold them to the tenant's prefix whatever Weir's own checks miss.
    #[serde(default)]
    pub kafka: Option<TenantKafka>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantKafka {
    pub username: String,
    /// The environment variable of the server holding the password.
    #[serde(default)]
    pub password_env: Option<String>,
    #[serde(default)]
    pub password_file: Option<PathBuf>,
}

/// Worker processes per pipeline when neither the tenant nor `[quotas]` says: each
/// costs a process (about 30 MiB RSS before its guests), so a tenant gets 2 unless the
/// operator grants more.
pub const DEFAULT_WORKERS_QUOTA: u32 = 2;

/// Host memory of a tenant's workers together when no quota sets it.
pub const DEFAULT_MEMORY_QUOTA: u64 = 4 << 30;
/// The smallest CPU quota (the kernel's CFS quota is at least 1 ms a 100 ms period).
pub const MIN_CPU_MILLICORES: u32 = 10;
/// The largest CPU quota: 1,024 CPUs.
pub const MAX_CPU_MILLICORES: u32 = 1_024_000;
/// The smallest memory quota: a worker with one small guest needs tens of MiB.
pub const MIN_MEMORY_QUOTA: u64 = 64 << 20;

/// Quotas when neither the tenant nor the server's `[quotas]` set one.
pub fn builtin_quotas() -> Quotas {
    Quotas {
        pipelines: Some(10),
        module_bytes: Some(256 << 20),
        guest_memory: Some(256 << 20),
        call_timeout_ms: Some(1_000),
        parallelism: Some(4),
        workers: Some(DEFAULT_WORKERS_QUOTA),
        checkpoint_bytes: Some(10 << 30),
        topic_partitions: Some(64),
        cpu_millicores: None,
        memory_bytes: Some(DEFAULT_MEMORY_QUOTA),
    }
}

/// Refuses quotas that leave nothing to run: no worker process, no subtask, no guest
/// memory or call time (a pipeline could be created, and never run).
pub fn check_quotas(quotas: &Quotas) -> Result<(), String> {
    let zero = [
        ("workers", quotas.workers.map(u64::from)),
        ("parallelism", quotas.parallelism.map(u64::from)),
        ("guest_memory", quotas.guest_memory),
        ("call_timeout_ms", quotas.call_timeout_ms),
    ]
    .into_iter()
    .find(|(_, v)| *v == Some(0));
    if let Some((field, _)) = zero {
        return Err(format!("quotas.{field} must be at least 1"));
    }
    if let Some(m) = quotas.cpu_millicores
        && !(MIN_CPU_MILLICORES..=MAX_CPU_MILLICORES).contains(&m)
    {
        return Err(format!(
            "quotas.cpu_millicores must be between {MIN_CPU_MILLICORES} and {MAX_CPU_MILLICORES} (thousandths of a CPU), not {m}"
        ));
    }
    match quotas.memory_bytes {
        Some(b) if b < MIN_MEMORY_QUOTA => Err(format!(
            "quotas.memory_bytes must be at least {MIN_MEMORY_QUOTA} (64 MiB), not {b}"
        )),
        _ => Ok(()),
    }
}

/// `quotas` with every field it leaves out taken from `defaults`.
pub fn quotas_over(quotas: &Quotas, defaults: &Quotas) -> Quotas {
    Quotas {
        pipelines: quotas.pipelines.or(defaults.pipelines),
        module_bytes: quotas.module_bytes.or(defaults.module_bytes),
        guest_memory: quotas.guest_memory.or(defaults.guest_memory),
        call_timeout_ms: quotas.call_timeout_ms.or(defaults.call_timeout_ms),
        parallelism: quotas.parallelism.or(defaults.parallelism),
        workers: quotas.workers.or(defaults.workers),
        checkpoint_bytes: quotas.checkpoint_bytes.or(defaults.checkpoint_bytes),
        topic_partitions: quotas.topic_partitions.or(defaults.topic_partitions),
        cpu_millicores: quotas.cpu_millicores.or(defaults.cpu_millicores),
        memory_bytes: quotas.memory_bytes.or(defaults.memory_bytes),
    }
}

/// The default share of requests one tenant has in flight (`tenant_requests`).
pub const DEFAULT_TENANT_REQUESTS: usize = 16;

fn default_tenant_requests() -> usize {
    DEFAULT_TENANT_REQUESTS
}

fn default_listen() -> String {
    "127.0.0.1:8080".into()
}

impl ServerConfig {
    pub fn load(path: &Path) -> Result<Self, ServerError> {
        let invalid = |reason: String| ServerError::Config {
            path: path.display().to_string(),
            reason,
        };
        let text =
            std::fs::read_to_string(path).map_err(|e| ServerError::io("cannot read", path, e))?;
        let raw: RawServerConfig =
            toml::from_str(&text).map_err(|e| invalid(e.message().to_owned()))?;
        // Absolute, so that the data dir means the same to the workers (which run in
        // their pipeline's directory) as to the server.
        let path =
            std::path::absolute(path).map_err(|e| ServerError::io("cannot resolve", path, e))?;
        let base = path.parent().unwrap_or(Path::new("/"));
        let admin_token = admin_token(&raw, base).map_err(invalid)?;
        let mut seen = std::collections::BTreeSet::new();
        check_quotas(&raw.quotas).map_err(&invalid)?;
        if raw.tenant_requests == 0 {
            return Err(invalid(
                "tenant_requests: at least 1 (requests of one tenant served at once)".into(),
            ));
        }
        for t in &raw.tenants {
            ids::tenant_id(&t.id).map_err(|e| invalid(e.message().to_owned()))?;
            check_quotas(&t.quotas).map_err(|e| invalid(format!("tenant {:?}: {e}", t.id)))?;
            if !seen.insert(t.id.clone()) {
                return Err(invalid(format!("tenant {:?} is declared twice", t.id)));
            }
            if let Some(k) = &t.kafka
                && k.password_env.is_some() == k.password_file.is_some()
            {
                return Err(invalid(format!(
                    "tenant {:?}: kafka needs exactly one of password_env and password_file",
                    t.id
                )));
            }
        }
        Ok(ServerConfig {
            listen: raw.listen,
            data_dir: base.join(raw.data_dir),
            admin_token,
            workers: raw.workers,
            compiles: raw.compiles,
            isolation: raw.isolation,
            kafka: raw.kafka,
            quotas: quotas_over(&raw.quotas, &builtin_quotas()),
            tenants: raw.tenants,
            tenant_requests: raw.tenant_requests,
            tls: raw.tls.map(|t| TlsConfig {
                cert: base.join(t.cert),
                key: base.join(t.key),
            }),
        })
    }
}

fn admin_token(raw: &RawServerConfig, base: &Path) -> Result<String, String> {
    let token = match (&raw.admin_token_env, &raw.admin_token_file) {
        (Some(var), None) => std::env::var(var)
            .map_err(|_| format!("admin_token_env: environment variable {var} is not set"))?,
        (None, Some(file)) => std::fs::read_to_string(base.join(file))
            .map_err(|e| format!("admin_token_file {}: {e}", file.display()))?,
        _ => return Err("give exactly one of admin_token_env and admin_token_file".into()),
    };
    let token = token.trim().to_owned();
    if token.len() < 16 {
        return Err("the admin token must be at least 16 characters".into());
    }
    Ok(token)
}
