//! The server's shared state (`App`) and the steps every handler shares: who is
//! calling (`TenantAuth`, `AdminAuth`), and how a pipeline is prepared and started.
//!
//! Invariants:
//! - Every `/v1` route except the admin ones takes a `TenantAuth`, and every catalog
//!   query it makes is by that tenant: the tenant is the token's, never the request's.
//! - Admin routes take an `AdminAuth`: the admin token, compared in constant time.
//! - A pipeline's spec is regenerated from the tenant's JSON at every start, so the
//!   workers always run with the current namespace, quotas and module paths; all N
//!   workers of a pipeline run the one generated spec, each as `--worker I/N`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use serde_json::json;

use crate::connector::kafka::client::Endpoint;
use crate::connector::kafka::security::SecurityConfig;
use crate::server::admission::Admission;
use crate::server::catalog::{Catalog, PipelineRow, RunRecord, TenantRow};
use crate::server::config::{ServerConfig, TenantConfig, quotas_over};
use crate::server::error::{ApiError, ServerError};
use crate::server::hosted_spec::{
    HostedContext, HostedSpec, KafkaAccess, TenantModule, WORKER_PASSWORD_ENV,
};
use crate::server::lifecycle::KeyedLocks;
use crate::server::metrics::ServerMetrics;
use crate::server::module_store::ModuleStore;
use crate::server::namespace::TenantNamespace;
use crate::server::redact::Redaction;
use crate::server::supervisor::Supervisor;
use crate::server::tenant_shares::TenantShares;
use crate::server::tokens;
use crate::server::walls::Walls;
use crate::server::wire::{Desired, PipelineState};
use crate::server::worker::Launch;

#[derive(Debug)]
pub struct App {
    pub config: ServerConfig,
    pub catalog: Arc<Catalog>,
    pub store: ModuleStore,
    /// Module quota reservations and compile slots of uploads in progress.
    pub admission: Admission,
    pub supervisor: Supervisor,
    /// The tenants' CPU and memory walls (cgroups).
    pub walls: Walls,
    pub metrics: Arc<ServerMetrics>,
    /// The `weir` executable the workers run.
    pub program: PathBuf,
    pub ready: AtomicBool,
    /// One lock per pipeline (tenant, name), held by every change of it (`lifecycle`).
    pub lifecycles: KeyedLocks<(String, String)>,
    /// One lock per tenant, held from the check that a pipeline's own topics are free
    /// (`api::pipelines`) until its row is written.
    pub pipeline_names: KeyedLocks<String>,
    /// One lock per tenant, held while a topic is checked against the tenant's quota and
    /// created, so two creates at once cannot both fit the same room; other tenants'
    /// creates do not wait.
    pub topic_creates: KeyedLocks<String>,
    /// Each tenant's share of requests in flight (`api::fairness`).
    pub tenant_shares: TenantShares,
}

pub type SharedApp = Arc<App>;

/// The tenant a request's token belongs to.
#[derive(Debug, Clone)]
pub struct TenantAuth(pub TenantRow);

/// A request bearing the admin token.
#[derive(Debug, Clone, Copy)]
pub struct AdminAuth;

fn bearer(parts: &Parts) -> Option<&str> {
    bearer_of(&parts.headers)
}

fn bearer_of(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// The tenant a request's token proved, put in the request's extensions by the fair
/// share middleware (`api::fairness`), so that `TenantAuth` does not look the token up
/// a second time.
#[derive(Debug, Clone)]
pub struct ProvenTenant(pub String);

impl FromRequestParts<SharedApp> for TenantAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &SharedApp) -> Result<Self, ApiError> {
        let tenant = match parts.extensions.get::<ProvenTenant>() {
            Some(ProvenTenant(tenant)) => tenant.clone(),
            None => app
                .tenant_of(&parts.headers)?
                .ok_or_else(ApiError::unauthorized)?,
        };
        let row = app
            .catalog
            .tenant(&tenant)?
            .ok_or_else(ApiError::unauthorized)?;
        Ok(TenantAuth(row))
    }
}

impl FromRequestParts<SharedApp> for AdminAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &SharedApp) -> Result<Self, ApiError> {
        match bearer(parts) {
            Some(t) if tokens::equal(t, &app.config.admin_token) => Ok(AdminAuth),
            _ => Err(ApiError::unauthorized()),
        }
    }
}

/// `Option<AdminAuth>`: the admin's request, or anyone's (a wrong token included) for
/// routes that answer everyone and tell the admin more (`/metrics`).
impl OptionalFromRequestParts<SharedApp> for AdminAuth {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &SharedApp,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(bearer(parts)
            .is_some_and(|t| tokens::equal(t, &app.config.admin_token))
            .then_some(AdminAuth))
    }
}

impl App {
    /// The tenant whose token the request bears, if it bears one that is valid: its key
    /// names a row, and its secret matches that row's hash (compared in constant time).
    pub fn tenant_of(&self, headers: &HeaderMap) -> Result<Option<String>, ApiError> {
        let Some((key, secret)) = bearer_of(headers).and_then(tokens::split) else {
            return Ok(None);
        };
        Ok(self
            .catalog
            .token(key)?
            .filter(|(_, hash)| tokens::verify(secret, hash))
            .map(|(tenant, _)| tenant))
    }

    pub fn namespace(&self, tenant: &str) -> TenantNamespace {
        TenantNamespace::new(&self.config.data_dir, tenant)
    }

    fn tenant_config(&self, tenant: &str) -> Option<&TenantConfig> {
        self.config.tenants.iter().find(|t| t.id == tenant)
    }

    /// How the tenant's workers reach Kafka: the server's cluster, with the tenant's
    /// own principal when the config gives it one.
    fn kafka_access(&self, tenant: &str) -> KafkaAccess {
        let kafka = &self.config.kafka;
        let security = self
            .tenant_config(tenant)
            .and_then(|t| t.kafka.as_ref())
            .map(|k| {
                json!({
                    "protocol": kafka.protocol.as_deref().unwrap_or("sasl_plaintext"),
                    "mechanism": kafka.mechanism.as_deref().unwrap_or("SCRAM-SHA-256"),
                    "username": k.username,
                    "password_env": WORKER_PASSWORD_ENV,
                })
            });
        KafkaAccess {
            bootstrap: kafka
                .bootstrap
                .clone()
                .or_else(|| std::env::var(crate::connector::kafka::config::BOOTSTRAP_ENV).ok()),
            security,
        }
    }

    /// `text` as tenant `tenant` may read it: without the server's paths or the
    /// cluster's addresses (`redact`).
    pub fn redact(&self, tenant: &str, text: &str) -> String {
        self.redaction(tenant).apply(text)
    }

    /// `redact`'s replacements for tenant `tenant`, for many texts at once.
    pub fn redaction(&self, tenant: &str) -> Redaction {
        let bootstrap = self.kafka_access(tenant).bootstrap;
        Redaction::new(&self.config.data_dir, tenant, bootstrap.as_deref())
    }

    /// How the server itself reaches Kafka on the tenant's behalf (the topic API): the
    /// cluster of its pipelines, with the tenant's own principal when it has one, so the
    /// broker's ACLs apply to the server's calls too.
    pub fn tenant_endpoint(&self, tenant: &str) -> Result<Endpoint, ApiError> {
        let unavailable = |e: String| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                self.redact(tenant, &format!("Kafka: {e}")),
            )
        };
        let access = self.kafka_access(tenant);
        let bootstrap = access
            .bootstrap
            .ok_or_else(|| unavailable("this server has no Kafka cluster configured".into()))?;
        let (Some(mut security), Some(k)) = (
            access.security,
            self.tenant_config(tenant).and_then(|t| t.kafka.as_ref()),
        ) else {
            return Ok(Endpoint::plaintext(bootstrap));
        };
        // The workers' security, with the password where the server itself has it.
        security["password_env"] = json!(k.password_env);
        security["password_file"] = json!(k.password_file);
        let security: SecurityConfig =
            serde_json::from_value(security).map_err(|e| unavailable(e.to_string()))?;
        let security = security
            .resolve("topic API")
            .map_err(|e| unavailable(e.to_string()))?;
        Ok(Endpoint {
            bootstrap,
            security,
        })
    }

    /// The tenant's Kafka password, for its worker's environment.
    pub fn kafka_password(&self, tenant: &str) -> Result<Vec<(String, String)>, ApiError> {
        let Some(k) = self.tenant_config(tenant).and_then(|t| t.kafka.as_ref()) else {
            return Ok(Vec::new());
        };
        let password = match (&k.password_env, &k.password_file) {
            (Some(var), _) => std::env::var(var).map_err(|_| {
                ServerError::Other(format!(
                    "tenant {tenant}: environment variable {var} (its Kafka password) is not set"
                ))
            })?,
            (None, Some(file)) => std::fs::read_to_string(file)
                .map_err(|e| ServerError::io("cannot read the Kafka password of tenant", file, e))?
                .trim()
                .to_owned(),
            (None, None) => return Ok(Vec::new()),
        };
        Ok(vec![(WORKER_PASSWORD_ENV.to_owned(), password)])
    }

    /// Checks a tenant's spec, to run as `workers` processes, and completes it in its
    /// namespace.
    pub fn hosted_spec(
        &self,
        tenant: &TenantRow,
        spec: &serde_json::Value,
        workers: u32,
    ) -> Result<HostedSpec, ApiError> {
        let namespace = self.namespace(&tenant.id);
        let quotas = quotas_over(&tenant.quotas, &self.config.quotas);
        let kafka = self.kafka_access(&tenant.id);
        let module = |id: &str| -> Option<TenantModule> {
            match self.catalog.module(&tenant.id, id) {
                Ok(Some(m)) => Some(TenantModule {
                    path: self.store.path(id),
                    world: m.world,
                }),
                _ => None,
            }
        };
        HostedSpec::build(
            spec,
            &HostedContext {
                namespace: &namespace,
                quotas: &quotas,
                kafka: &kafka,
                module: &module,
                workers,
            },
        )
        .map_err(|e| ApiError::new(e.status(), self.redact(&tenant.id, e.message())))
    }

    /// Writes the pipeline's generated spec and starts supervising its workers. A start
    /// that fails here (its spec no longer passes, a password is missing) leaves the
    /// pipeline `failed` with the reason, not `starting` for ever. `from_checkpoint`:
    /// a pipeline of one worker resumes from this checkpoint explicitly (an upgrade's
    /// savepoint); restarts, and workers of N > 1, resume from their own last committed
    /// one (or rescale from the old workers').
    pub fn start_pipeline(
        &self,
        tenant: &TenantRow,
        row: &PipelineRow,
        from_checkpoint: Option<u64>,
    ) -> Result<(), ApiError> {
        self.try_start(tenant, row, from_checkpoint).inspect_err(|e| {
            let failed = RunRecord {
                state: PipelineState::Failed,
                restarts: row.restarts,
                last_error: Some(e.message()),
                savepoint: None,
            };
            if let Err(e) = self.catalog.record_run(&tenant.id, &row.name, &failed) {
                tracing::error!(tenant = %tenant.id, pipeline = %row.name, error = %e, "cannot record the failed start");
            }
        })
    }

    fn try_start(
        &self,
        tenant: &TenantRow,
        row: &PipelineRow,
        from_checkpoint: Option<u64>,
    ) -> Result<(), ApiError> {
        let hosted = self.hosted_spec(tenant, &row.spec, row.workers)?;
        let dir = self.namespace(&tenant.id).pipeline_dir(&row.name);
        std::fs::create_dir_all(dir.root())
            .map_err(|e| ServerError::io("cannot create", dir.root(), e))?;
        std::fs::write(dir.spec(), hosted.toml)
            .map_err(|e| ServerError::io("cannot write", &dir.spec(), e))?;
        let mut env = self.kafka_password(&tenant.id)?;
        if let Some(cache) = self.store.tenant_cache(&tenant.id) {
            env.push((
                "WEIR_CACHE_DIR".into(),
                cache.to_string_lossy().into_owned(),
            ));
        }
        let quotas = quotas_over(&tenant.quotas, &self.config.quotas);
        let wall = self.walls.tenant(&tenant.id, &quotas)?;
        let launches = crate::server::worker::workers(row.workers)
            .map(|worker| Launch {
                program: self.program.clone(),
                dir: dir.clone(),
                worker,
                env: env.clone(),
                from_checkpoint,
                disk_quota: quotas.checkpoint_bytes,
                wall: wall.clone(),
            })
            .collect();
        // Every refusal is the pipeline's state (workers still running, a delete under
        // way), not the server's failure.
        self.supervisor
            .start(&tenant.id, &row.name, launches)
            .map_err(ApiError::conflict)
    }

    /// Starts every pipeline whose desired state is running (at server start, on a
    /// blocking thread, while the API already answers): each under its lifecycle lock,
    /// its row read again under it, so a tenant's delete or stop meanwhile wins.
    pub fn resume_pipelines(&self) -> Result<usize, ServerError> {
        let mut started = 0;
        for row in self.catalog.all_pipelines()? {
            if row.desired != Desired::Running {
                continue;
            }
            let _lock = self
                .lifecycles
                .hold_blocking((row.tenant.clone(), row.name.clone()));
            let Some(row) = self.catalog.pipeline(&row.tenant, &row.name)? else {
                continue;
            };
            if row.desired != Desired::Running {
                continue;
            }
            let Some(tenant) = self.catalog.tenant(&row.tenant)? else {
                continue;
            };
            match self.start_pipeline(&tenant, &row, None) {
                Ok(()) => started += 1,
                Err(e) => {
                    tracing::error!(tenant = %row.tenant, pipeline = %row.name, error = %e.message(), "cannot resume pipeline")
                }
            }
        }
        self.ready.store(true, Ordering::SeqCst);
        Ok(started)
    }
}
