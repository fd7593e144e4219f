//! What a tenant reads about its own pipelines (a worker's last error, a refused
//! spec, a failed delete) is the worker's own text with the server's internals taken
//! out: the server's data directory and the Kafka cluster's addresses.
//!
//! Invariants: the tenant's own directory reads as `<pipelines>/NAME/...` (a place it
//! can name, not where it lies), any other path under the data directory as
//! `<server>/...`, and every bootstrap address (`host:port`, each of a list) as
//! `<kafka>`. Text that holds none of them is returned unchanged. The full text stays
//! in the worker's log, for the operator.

use std::path::Path;

/// Replaces the server's internals in `text` (see the module invariants).
pub fn redact(text: &str, data_dir: &Path, tenant: &str, bootstrap: Option<&str>) -> String {
    Redaction::new(data_dir, tenant, bootstrap).apply(text)
}

/// What to replace for one tenant, worked out once for many texts.
#[derive(Debug, Clone)]
pub struct Redaction {
    pipelines: String,
    data_dir: String,
    addresses: Vec<String>,
}

impl Redaction {
    pub fn new(data_dir: &Path, tenant: &str, bootstrap: Option<&str>) -> Self {
        let data_dir = data_dir.display().to_string();
        let data_dir = data_dir.trim_end_matches('/').to_owned();
        Redaction {
            pipelines: format!("{data_dir}/tenants/{tenant}/pipelines"),
            data_dir,
            addresses: bootstrap
                .into_iter()
                .flat_map(|b| b.split(','))
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(str::to_owned)
                .collect(),
        }
    }

    /// `text` with the server's internals replaced.
    pub fn apply(&self, text: &str) -> String {
        let mut out = text.replace(&self.pipelines, "<pipelines>");
        if !self.data_dir.is_empty() {
            out = out.replace(&self.data_dir, "<server>");
        }
        for address in &self.addresses {
            out = out.replace(address, "<kafka>");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_addresses_are_replaced_and_other_text_kept() {
        let dir = Path::new("/var/lib/weir/");
        let text = "Kafka group team-b.f5 says checkpoint 23 of pipeline f5 was committed, but checkpoint storage /var/lib/weir/tenants/team-b/pipelines/f5/checkpoints has none; no answer from Kafka at 10.0.0.7:9092 (also 10.0.0.8:9092); catalog /var/lib/weir/catalog.sqlite";
        assert_eq!(
            redact(text, dir, "team-b", Some("10.0.0.7:9092, 10.0.0.8:9092")),
            "Kafka group team-b.f5 says checkpoint 23 of pipeline f5 was committed, but checkpoint storage <pipelines>/f5/checkpoints has none; no answer from Kafka at <kafka> (also <kafka>); catalog <server>/catalog.sqlite"
        );
        assert_eq!(redact("guest trapped", dir, "t", None), "guest trapped");
    }

    #[test]
    fn another_tenants_directory_is_the_servers() {
        let dir = Path::new("/d");
        assert_eq!(
            redact("/d/tenants/b/pipelines/x", dir, "a", None),
            "<server>/tenants/b/pipelines/x"
        );
    }
}
