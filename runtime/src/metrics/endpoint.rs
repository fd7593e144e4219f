//! The worker's HTTP endpoint (`weir run --http ADDR`): liveness, readiness and the
//! pipeline's counters for an orchestrator (Kubernetes probes, a Prometheus scrape).
//!
//! Invariants:
//! - It is up before recovery starts (restoring state from object storage can take
//!   minutes), answers from its own thread, and reads only atomics: a busy or stuck
//!   pipeline cannot stop it from answering, so `/healthz` reports a stuck pipeline
//!   instead of timing out.
//! - `/healthz` (liveness) fails only when the running pipeline has made no checkpoint
//!   progress (no checkpoint completed since it started, or since the last one) for
//!   longer than `stall_after`. Recovery, however long, is not a stall: that is a
//!   startup probe's business. Restarting a stalled worker is safe: exactly-once rests
//!   on the last committed checkpoint, never on the process.
//! - `/readyz` (readiness) is OK from the moment the pipeline's tasks run until a stop
//!   is requested.
//! - `/metrics` is the counters of [`PipelineMetrics`] in the OpenMetrics text format
//!   (`exposition`), labelled with the pipeline's name only (one pipeline per process: a bounded set),
//!   and the guest memory gauges labelled with it and the step's name (bounded by the
//!   spec's steps).
//! - Binding happens before anything else, so a taken or malformed address is refused at
//!   start with the address named.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::oneshot;

use crate::metrics::{MetricsSnapshot, PipelineMetrics, exposition, unix_ms};

/// Shortest stall bound, whatever the checkpoint interval: a checkpoint round of a big
/// state on a loaded machine can take a while without anything being wrong.
pub const MIN_STALL_AFTER: Duration = Duration::from_secs(30);

/// How long a running pipeline may go without completing a checkpoint before `/healthz`
/// fails: two rounds that each used their whole timeout, at least [`MIN_STALL_AFTER`].
pub fn stall_after(interval: Duration, timeout: Duration) -> Duration {
    interval
        .saturating_add(timeout)
        .saturating_mul(2)
        .max(MIN_STALL_AFTER)
}

#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("cannot serve the health endpoint on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the health endpoint's thread: {0}")]
    Thread(std::io::Error),
}

/// What `/healthz` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Recovering: no task runs yet.
    Starting,
    Alive,
    /// Running, and no checkpoint completed for `for_ms` (more than the bound).
    Stalled {
        for_ms: u64,
    },
}

/// When the pipeline whose counters are `m` last made progress (started running, or
/// completed a checkpoint), in Unix milliseconds; 0 before it started.
pub fn progress_unix_ms(m: &MetricsSnapshot) -> u64 {
    m.started_unix_ms.max(m.last_checkpoint_unix_ms)
}

/// The liveness of a pipeline whose counters are `m`, at `now_ms` (Unix milliseconds).
pub fn liveness(m: &MetricsSnapshot, now_ms: u64, stall_after: Duration) -> Liveness {
    if m.started_unix_ms == 0 {
        return Liveness::Starting;
    }
    let idle = now_ms.saturating_sub(progress_unix_ms(m));
    if u128::from(idle) > stall_after.as_millis() {
        Liveness::Stalled { for_ms: idle }
    } else {
        Liveness::Alive
    }
}

struct Shared {
    pipeline: String,
    metrics: Arc<PipelineMetrics>,
    stall_after: Duration,
    /// Non-zero once a stop was requested (see `RunOptions::stop`).
    stop: Arc<AtomicUsize>,
}

/// The running endpoint; stops (and joins its thread) when dropped.
#[derive(Debug)]
pub struct WorkerEndpoint {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl WorkerEndpoint {
    /// Binds `addr` (port 0: any free port, see [`addr`](Self::addr)) and serves the
    /// routes of the module doc for `pipeline` from its own thread.
    pub fn start(
        addr: SocketAddr,
        pipeline: &str,
        metrics: Arc<PipelineMetrics>,
        stall_after: Duration,
        stop: Arc<AtomicUsize>,
    ) -> Result<Self, EndpointError> {
        let bind_error = |source| EndpointError::Bind { addr, source };
        let listener = std::net::TcpListener::bind(addr).map_err(bind_error)?;
        listener.set_nonblocking(true).map_err(bind_error)?;
        let bound = listener.local_addr().map_err(bind_error)?;
        let shared = Arc::new(Shared {
            pipeline: pipeline.to_owned(),
            metrics,
            stall_after,
            stop,
        });
        let app = Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics_text))
            .with_state(shared);
        let (shutdown, stopped) = oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .map_err(EndpointError::Thread)?;
        let thread = std::thread::Builder::new()
            .name("weir-endpoint".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    let served = axum::serve(listener, app).with_graceful_shutdown(async {
                        let _ = stopped.await;
                    });
                    if let Err(e) = served.await {
                        tracing::warn!(error = %e, "the health endpoint stopped");
                    }
                });
            })
            .map_err(EndpointError::Thread)?;
        tracing::info!(addr = %bound, "health endpoint: /healthz /readyz /metrics");
        Ok(Self {
            addr: bound,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for WorkerEndpoint {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn healthz(State(s): State<Arc<Shared>>) -> (StatusCode, String) {
    match liveness(&s.metrics.snapshot(), unix_ms(), s.stall_after) {
        Liveness::Starting => (StatusCode::OK, "starting\n".into()),
        Liveness::Alive => (StatusCode::OK, "ok\n".into()),
        Liveness::Stalled { for_ms } => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "stalled: no checkpoint completed for {} s (bound {} s)\n",
                for_ms / 1000,
                s.stall_after.as_secs()
            ),
        ),
    }
}

async fn readyz(State(s): State<Arc<Shared>>) -> (StatusCode, &'static str) {
    if s.stop.load(Ordering::Relaxed) != 0 {
        (StatusCode::SERVICE_UNAVAILABLE, "stopping\n")
    } else if s.metrics.snapshot().started_unix_ms == 0 {
        (StatusCode::SERVICE_UNAVAILABLE, "recovering\n")
    } else {
        (StatusCode::OK, "ready\n")
    }
}

async fn metrics_text(State(s): State<Arc<Shared>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, exposition::CONTENT_TYPE)],
        exposition::openmetrics_text(&s.pipeline, &s.metrics.snapshot()),
    )
}

#[cfg(test)]
#[path = "endpoint_tests.rs"]
mod tests;
