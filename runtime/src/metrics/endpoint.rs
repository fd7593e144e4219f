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
//! - `/metrics` is the counters of [`PipelineMetrics`] in the Prometheus text format,
//!   labelled with the pipeline's name only (one pipeline per process: a bounded set),
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

use crate::metrics::guest_memory::StepGuestMemory;
use crate::metrics::{MetricsSnapshot, PipelineMetrics, unix_ms};

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

/// The liveness of a pipeline whose counters are `m`, at `now_ms` (Unix milliseconds).
pub fn liveness(m: &MetricsSnapshot, now_ms: u64, stall_after: Duration) -> Liveness {
    if m.started_unix_ms == 0 {
        return Liveness::Starting;
    }
    let progress = m.started_unix_ms.max(m.last_checkpoint_unix_ms);
    let idle = now_ms.saturating_sub(progress);
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
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        prometheus_text(&s.pipeline, &s.metrics.snapshot()),
    )
}

/// A label value escaped for the text format.
fn label_value(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `m` in the Prometheus text exposition format, every sample labelled `pipeline`.
pub fn prometheus_text(pipeline: &str, m: &MetricsSnapshot) -> String {
    let label = label_value(pipeline);
    let rows: [(&str, &str, &str, u64); 11] = [
        (
            "records_in_total",
            "counter",
            "Records read by the sources",
            m.records_in,
        ),
        (
            "records_out_total",
            "counter",
            "Records handed to the sinks",
            m.records_out,
        ),
        (
            "dead_letters_total",
            "counter",
            "Records routed to the dead-letter output",
            m.dead_letters,
        ),
        (
            "late_records_total",
            "counter",
            "Dead letters that came after their window's lateness",
            m.late_records,
        ),
        (
            "records_skipped_total",
            "counter",
            "Input records deleted by retention before they were read",
            m.records_skipped,
        ),
        (
            "guest_log_dropped_lines_total",
            "counter",
            "Guest output lines dropped over [limits] guest_log_rate",
            m.guest_log_dropped_lines,
        ),
        (
            "checkpoints_completed_total",
            "counter",
            "Checkpoints completed by this process",
            m.checkpoints_completed,
        ),
        (
            "consumer_lag",
            "gauge",
            "Records in the sources' input not read yet",
            m.consumer_lag,
        ),
        (
            "last_checkpoint_id",
            "gauge",
            "Id of the last completed checkpoint",
            m.last_checkpoint_id,
        ),
        (
            "last_checkpoint_duration_ms",
            "gauge",
            "Duration of the last completed checkpoint",
            m.last_checkpoint_duration_ms,
        ),
        (
            "last_checkpoint_unix_ms",
            "gauge",
            "When the last checkpoint completed (Unix ms)",
            m.last_checkpoint_unix_ms,
        ),
    ];
    let mut text = String::new();
    for (name, kind, help, value) in rows {
        let family = name.strip_suffix("_total").unwrap_or(name);
        text.push_str(&format!(
            "# HELP weir_{family} {help}\n# TYPE weir_{family} {kind}\nweir_{name}{{pipeline=\"{label}\"}} {value}\n"
        ));
    }
    guest_memory_text(&mut text, &label, m);
    text
}

/// The guest memory gauges and the recycling counter, one sample per step in each.
fn guest_memory_text(text: &mut String, label: &str, m: &MetricsSnapshot) {
    type Family = (
        &'static str,
        &'static str,
        &'static str,
        fn(&StepGuestMemory) -> u64,
    );
    let families: [Family; 3] = [
        (
            "guest_memory_bytes",
            "gauge",
            "Linear memory of the step's guest instances together",
            |s| s.total_bytes,
        ),
        (
            "guest_memory_max_instance_bytes",
            "gauge",
            "Linear memory of the step's largest guest instance (the limit is per instance)",
            |s| s.max_bytes,
        ),
        (
            "guest_recycles_total",
            "counter",
            "Guest instances replaced by a fresh one after using half their memory headroom",
            |s| s.recycled,
        ),
    ];
    for (name, kind, help, value) in families {
        let family = name.strip_suffix("_total").unwrap_or(name);
        text.push_str(&format!(
            "# HELP weir_{family} {help}\n# TYPE weir_{family} {kind}\n"
        ));
        for (step, figures) in &m.guest_memory {
            let step = label_value(step);
            let value = value(figures);
            text.push_str(&format!(
                "weir_{name}{{pipeline=\"{label}\",step=\"{step}\"}} {value}\n"
            ));
        }
    }
}

#[cfg(test)]
#[path = "endpoint_tests.rs"]
mod tests;
