//! `weir serve`: the multi-tenant hosting server.
//!
//! The control plane is an HTTP JSON API (`api`) over a SQLite catalog (`catalog`);
//! the data plane is N >= 1 worker processes per pipeline (`worker`), each the same
//! code path as `weir run` (`--worker I/N`), started and restarted one by one by the
//! `supervisor`.
//!
//! Invariants:
//! - A tenant reaches only its own objects (`app::TenantAuth`, every catalog query by
//!   tenant), and its pipelines only its own namespace (`namespace`, `hosted_spec`):
//!   Kafka names under `{tenant}.`, files under `{data_dir}/tenants/{tenant}/`. With a
//!   Kafka principal per tenant, the broker's ACLs enforce the same prefix again.
//! - No tenant's guest or pipeline runs in the server's process: a trap, a hang or an
//!   abort costs that pipeline's worker, which the supervisor restarts or leaves failed.
//! - The catalog is the truth across restarts: on start, every pipeline whose desired
//!   state is `running` is started again and resumes from its checkpoints; on SIGTERM or
//!   SIGINT, every worker stops with a final checkpoint before the server exits; on
//!   SIGKILL, the kernel kills the workers (`worker`), and the next start resumes them.
//! - Where the host has cgroups, each tenant's workers run in the tenant's group with
//!   its CPU and memory quotas (`walls`): a greedy tenant slows or kills only its own.

pub mod admission;
pub mod api;
pub mod app;
pub mod catalog;
pub mod cgroup;
pub mod config;
pub mod error;
pub mod hosted_spec;
pub mod ids;
pub mod lifecycle;
pub mod metrics;
pub mod module_store;
pub mod namespace;
pub mod redact;
pub mod retire;
pub mod spec_paths;
pub mod supervisor;
pub mod tenant_shares;
pub mod tokens;
pub mod topic_admin;
pub mod walls;
pub mod wire;
pub mod worker;
pub mod worker_log;
pub mod worker_states;

use crate::server::admission::Admission;
use crate::server::tenant_shares::TenantShares;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use axum_server::tls_rustls::RustlsConfig;

use crate::engine::{CompileIsolation, CompileLimits};
use crate::pipeline::compile_cache_dir;
use crate::server::app::App;
use crate::server::catalog::Catalog;
use crate::server::config::ServerConfig;
use crate::server::error::ServerError;
use crate::server::metrics::ServerMetrics;
use crate::server::module_store::{ModuleStore, UploadCompiles};
use crate::server::supervisor::Supervisor;
use crate::server::walls::Walls;

/// Compile limits of an uploaded module (as a spec's defaults).
const UPLOAD_COMPILE: CompileLimits = CompileLimits {
    cpu: std::time::Duration::from_secs(300),
    memory_bytes: 4 << 30,
};

/// Opens the catalog and module store and builds the server's state. `program` is the
/// `weir` executable workers and module compiles run.
pub fn open(config: ServerConfig, program: PathBuf) -> Result<Arc<App>, ServerError> {
    let data_dir = &config.data_dir;
    std::fs::create_dir_all(data_dir).map_err(|e| ServerError::io("cannot create", data_dir, e))?;
    let catalog = Arc::new(Catalog::open(&data_dir.join("catalog.sqlite"))?);
    for t in &config.tenants {
        let principal = t.kafka.as_ref().map(|k| format!("User:{}", k.username));
        catalog.put_tenant(&t.id, &t.quotas, principal.as_deref(), true)?;
    }
    let compiles = UploadCompiles {
        cache_root: compile_cache_dir(),
        isolation: CompileIsolation {
            program: program.clone(),
            limits: UPLOAD_COMPILE,
        },
    };
    let store = ModuleStore::open(data_dir.join("modules"), compiles)?;
    let admission = Admission::new(&config.compiles);
    let metrics = Arc::new(ServerMetrics::default());
    let supervisor = Supervisor::new(config.workers.clone(), catalog.clone(), metrics.clone());
    let walls = Walls::open(&config.isolation, data_dir)?;
    let tenant_shares = TenantShares::new(config.tenant_requests);
    Ok(Arc::new(App {
        config,
        catalog,
        store,
        admission,
        supervisor,
        walls,
        metrics,
        program,
        ready: AtomicBool::new(false),
        lifecycles: Default::default(),
        pipeline_names: Default::default(),
        topic_creates: Default::default(),
        tenant_shares,
    }))
}

/// Serves until `shutdown` resolves, then stops every worker with a final checkpoint.
/// `bound` is told the URL listened on (port 0 picks one).
pub async fn serve(
    app: Arc<App>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    bound: impl FnOnce(String),
) -> Result<(), ServerError> {
    let listen = app.config.listen.clone();
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .map_err(|e| ServerError::Other(format!("cannot listen on {listen}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ServerError::Other(format!("cannot listen on {listen}: {e}")))?;
    let tls = match &app.config.tls {
        Some(tls) => Some(tls_config(tls).await?),
        None => None,
    };
    let resuming = app.clone();
    let resumed = tokio::task::spawn_blocking(move || {
        resuming.resume_pipelines()?;
        retire::finish_deletes(&resuming)
    });
    bound(format!(
        "{}://{addr}",
        if tls.is_some() { "https" } else { "http" }
    ));
    let router = api::router(app.clone());
    let served = serve_on(listener, tls, router, shutdown).await;
    let _ = resumed.await;
    let stopping = app.clone();
    let _ = tokio::task::spawn_blocking(move || {
        stopping.supervisor.shutdown();
        let tenants = stopping.catalog.tenants().unwrap_or_default();
        stopping.walls.close(tenants.into_iter().map(|t| t.id));
    })
    .await;
    served
}

/// The rustls configuration of `tls` (ring as the crypto provider).
async fn tls_config(tls: &config::TlsConfig) -> Result<RustlsConfig, ServerError> {
    // Fails only if a provider is installed already: then that one serves.
    let _ = rustls::crypto::ring::default_provider().install_default();
    RustlsConfig::from_pem_file(&tls.cert, &tls.key)
        .await
        .map_err(|e| {
            ServerError::Other(format!(
                "tls: cannot load certificate {} and key {}: {e}",
                tls.cert.display(),
                tls.key.display()
            ))
        })
}

/// A client must have sent a request's headers this long after it began (or after the
/// previous request on the connection), else its connection is closed: half-sent
/// headers cannot hold connections, and their file descriptors, open.
pub const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How often an HTTP/2 connection is pinged ...
pub const HTTP2_PING_EVERY: std::time::Duration = std::time::Duration::from_secs(10);
/// ... and how long the ping's answer may take before the connection is closed: a
/// connection whose peer stopped mid-frame is let go within their sum.
pub const HTTP2_PING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves `router` on `listener`, over TLS if `tls` is given, until `shutdown`
/// resolves (then waits up to 10 s for requests in progress).
async fn serve_on(
    listener: tokio::net::TcpListener,
    tls: Option<RustlsConfig>,
    router: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let failed = |e: std::io::Error| ServerError::Other(format!("server: {e}"));
    let listener = listener.into_std().map_err(failed)?;
    let handle = axum_server::Handle::new();
    let stopping = handle.clone();
    tokio::spawn(async move {
        shutdown.await;
        stopping.graceful_shutdown(Some(std::time::Duration::from_secs(10)));
    });
    let service = router.into_make_service();
    match tls {
        None => {
            let mut server = axum_server::from_tcp(listener).map_err(failed)?;
            with_header_timeout(server.http_builder());
            server.handle(handle).serve(service).await
        }
        Some(tls) => {
            let mut server = axum_server::from_tcp_rustls(listener, tls).map_err(failed)?;
            with_header_timeout(server.http_builder());
            server.handle(handle).serve(service).await
        }
    }
    .map_err(failed)
}

/// Sets [`HEADER_READ_TIMEOUT`] on HTTP/1 connections, and on HTTP/2 ones a ping every
/// [`HTTP2_PING_EVERY`] that must be answered within [`HTTP2_PING_TIMEOUT`]: HTTP/2 has
/// no header-read timeout of its own, and a peer that sent half a frame and stopped
/// answers no ping, so its connection is let go (hyper needs a timer for both).
fn with_header_timeout(
    builder: &mut hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>,
) {
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Some(HTTP2_PING_EVERY))
        .keep_alive_timeout(HTTP2_PING_TIMEOUT);
}
