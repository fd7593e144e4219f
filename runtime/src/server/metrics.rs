//! The server's Prometheus metrics (`GET /metrics`, OpenMetrics text).
//!
//! Invariants: label values are tenant ids, HTTP methods, status codes, pipeline
//! states and upload outcomes: bounded sets, never a client-chosen string (a path, a
//! name), so a client cannot grow the metrics without bound. The metrics labelled by
//! tenant are in a registry of their own, encoded only for the admin (`encode`): an
//! unauthenticated scrape learns no tenant id.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::server::cgroup::Usage;

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
    /// The metrics labelled by tenant.
    by_tenant: Registry,
    pub http_requests: Family<RequestLabels, Counter>,
    pub worker_restarts: Family<TenantLabel, Counter>,
    pub pipeline_state_changes: Family<TenantLabel, Counter>,
    pub module_uploads: Family<OutcomeLabel, Counter>,
    /// Pipelines by state, set at every scrape from the catalog.
    pub pipelines: Family<StateLabel, Gauge>,
    /// Each tenant's cgroup, read at every admin scrape (`walls`).
    tenant_cpu_seconds: Family<TenantLabel, Gauge<f64, AtomicU64>>,
    tenant_memory_bytes: Family<TenantLabel, Gauge>,
    tenant_oom_kills: Family<TenantLabel, Gauge>,
    tenant_cpu_throttled_periods: Family<TenantLabel, Gauge>,
}

impl Default for ServerMetrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("weir_server");
        let mut by_tenant = Registry::with_prefix("weir_server");
        let m = ServerMetrics {
            http_requests: Family::default(),
            worker_restarts: Family::default(),
            pipeline_state_changes: Family::default(),
            module_uploads: Family::default(),
            pipelines: Family::default(),
            tenant_cpu_seconds: Family::default(),
            tenant_memory_bytes: Family::default(),
            tenant_oom_kills: Family::default(),
            tenant_cpu_throttled_periods: Family::default(),
            registry: Registry::default(),
            by_tenant: Registry::default(),
        };
        registry.register(
            "http_requests",
            "HTTP requests answered",
            m.http_requests.clone(),
        );
        by_tenant.register(
            "worker_restarts",
            "Pipeline worker restarts after a failure",
            m.worker_restarts.clone(),
        );
        by_tenant.register(
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
        by_tenant.register(
            "tenant_cpu_seconds",
            "CPU time of the tenant's workers (its cgroup), seconds",
            m.tenant_cpu_seconds.clone(),
        );
        for (name, help, gauge) in [
            (
                "tenant_memory_bytes",
                "Memory of the tenant's workers now (its cgroup), bytes",
                &m.tenant_memory_bytes,
            ),
            (
                "tenant_oom_kills",
                "Workers the kernel killed for the tenant's memory quota",
                &m.tenant_oom_kills,
            ),
            (
                "tenant_cpu_throttled_periods",
                "CPU periods (100 ms) in which the tenant's workers ran out of its CPU quota",
                &m.tenant_cpu_throttled_periods,
            ),
        ] {
            by_tenant.register(name, help, gauge.clone());
        }
        ServerMetrics {
            registry,
            by_tenant,
            ..m
        }
    }
}

impl ServerMetrics {
    /// Sets the tenants' cgroup gauges to `usages`, and drops those of tenants not in
    /// it (deleted ones).
    pub fn set_tenant_usages(&self, usages: &[(String, Usage)]) {
        self.tenant_cpu_seconds.clear();
        self.tenant_memory_bytes.clear();
        self.tenant_oom_kills.clear();
        self.tenant_cpu_throttled_periods.clear();
        let whole = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        for (id, usage) in usages {
            let label = TenantLabel { tenant: id.clone() };
            self.tenant_cpu_seconds
                .get_or_create(&label)
                .set(usage.cpu.as_secs_f64());
            self.tenant_memory_bytes
                .get_or_create(&label)
                .set(whole(usage.memory_bytes));
            self.tenant_oom_kills
                .get_or_create(&label)
                .set(whole(usage.oom_kills));
            self.tenant_cpu_throttled_periods
                .get_or_create(&label)
                .set(whole(usage.throttled_periods));
        }
    }

    /// The OpenMetrics text of the metrics, those labelled by tenant only if
    /// `with_tenants` (the admin's scrape).
    pub fn encode(&self, with_tenants: bool) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = encode_registry(&mut text, &self.registry);
        if with_tenants {
            let _ = encode_registry(&mut text, &self.by_tenant);
        }
        let _ = encode_eof(&mut text);
        text
    }
}
