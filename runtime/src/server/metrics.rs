//! The server's Prometheus metrics (`GET /metrics`, OpenMetrics text).
//!
//! Invariants: label values are tenant ids, HTTP methods, status codes, pipeline
//! states and upload outcomes: bounded sets, never a client-chosen string (a path, a
//! name), so a client cannot grow the metrics without bound.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLabel {
    pub tenant: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: String,
    pub status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
}

#[derive(Debug)]
pub struct ServerMetrics {
    registry: Registry,
    pub http_requests: Family<RequestLabels, Counter>,
    pub worker_restarts: Family<TenantLabel, Counter>,
    pub pipeline_state_changes: Family<TenantLabel, Counter>,
    pub module_uploads: Family<OutcomeLabel, Counter>,
    /// Pipelines by state, set at every scrape from the catalog.
    pub pipelines: Family<StateLabel, Gauge>,
}

impl Default for ServerMetrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("weir_server");
        let m = ServerMetrics {
            http_requests: Family::default(),
            worker_restarts: Family::default(),
            pipeline_state_changes: Family::default(),
            module_uploads: Family::default(),
            pipelines: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "http_requests",
            "HTTP requests answered",
            m.http_requests.clone(),
        );
        registry.register(
            "worker_restarts",
            "Pipeline worker restarts after a failure",
            m.worker_restarts.clone(),
        );
        registry.register(
            "pipeline_state_changes",
            "Pipeline state changes recorded",
            m.pipeline_state_changes.clone(),
        );
        registry.register(
            "module_uploads",
            "Module uploads by outcome",
            m.module_uploads.clone(),
        );
        registry.register("pipelines", "Pipelines by state", m.pipelines.clone());
        ServerMetrics { registry, ..m }
    }
}

impl ServerMetrics {
    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}
