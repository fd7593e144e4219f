//! A tenant's namespace: the Kafka prefix and the directories that are its own. Derived
//! by the server from the tenant id, never chosen by a spec.
//!
//! Invariants:
//! - Kafka: every name of tenant `t`'s pipeline `p` starts with `{t}.`: topics it may
//!   read and write, and, through `KafkaNames`, its transactional ids `{t}.{p}.0.{0|1}`,
//!   its consumer group `{t}.{p}` and progress topic `{t}.{p}.progress`. Tenant ids hold
//!   no `.`, so no tenant's prefix is a prefix of another's (`a.` vs `ab.`).
//! - Files: everything of tenant `t` lies under `{data_dir}/tenants/{t}/`, and of its
//!   pipeline `p` under `.../pipelines/{p}/`: the generated spec, state, checkpoints,
//!   worker logs and status files. Both components are checked ids (`ids`), so no path
//!   escapes it.
//! - A pipeline of one worker (0/1) has the files it had before workers existed
//!   (`worker.log`, `status.json`, checkpoints in `checkpoints/`); worker I of N > 1
//!   has its own, named as the runtime names its places (`worker-<I>-of-<N>`):
//!   `worker-<I>-of-<N>.log`, `worker-<I>-of-<N>.status.json`, and its checkpoints in
//!   `checkpoints/worker-<I>-of-<N>/` (where `WorkerPlan::new` puts them).

use std::path::{Path, PathBuf};

use crate::cluster::Worker;
use crate::connector::kafka::KafkaNames;

#[derive(Debug, Clone)]
pub struct TenantNamespace {
    tenant: String,
    dir: PathBuf,
}

impl TenantNamespace {
    /// `tenant` must be a checked tenant id.
    pub fn new(data_dir: &Path, tenant: &str) -> Self {
        TenantNamespace {
            tenant: tenant.to_owned(),
            dir: data_dir.join("tenants").join(tenant),
        }
    }

    /// The directory every file of the tenant lies under.
    pub fn root(&self) -> &Path {
        &self.dir
    }

    /// The prefix of every Kafka name of the tenant.
    pub fn kafka_prefix(&self) -> String {
        format!("{}.", self.tenant)
    }

    /// Whether the tenant may read or write `topic`. A pipeline's progress topics lie
    /// under the prefix too, but only its own commit unit writes them.
    pub fn owns_topic(&self, topic: &str) -> bool {
        topic
            .strip_prefix(&self.kafka_prefix())
            .is_some_and(|rest| !rest.is_empty())
    }

    /// Every Kafka name of pipeline `pipeline` (a checked name).
    pub fn kafka_names(&self, pipeline: &str) -> KafkaNames {
        KafkaNames::new(self.kafka_prefix(), pipeline)
    }

    /// The directory of pipeline `pipeline` (a checked name).
    pub fn pipeline_dir(&self, pipeline: &str) -> PipelineDir {
        PipelineDir(self.dir.join("pipelines").join(pipeline))
    }
}

/// The files of one hosted pipeline.
#[derive(Debug, Clone)]
pub struct PipelineDir(PathBuf);

impl PipelineDir {
    pub fn root(&self) -> &Path {
        &self.0
    }
    /// The TOML spec the worker runs (generated from the tenant's JSON spec).
    pub fn spec(&self) -> PathBuf {
        self.0.join("spec.toml")
    }
    pub fn state(&self) -> PathBuf {
        self.0.join("state")
    }
    pub fn checkpoints(&self) -> PathBuf {
        self.0.join("checkpoints")
    }
    /// A worker's stderr, appended to over restarts.
    pub fn log(&self, worker: Worker) -> PathBuf {
        match worker.dir_name() {
            None => self.0.join("worker.log"),
            Some(name) => self.0.join(format!("{name}.log")),
        }
    }
    /// A worker's counters and last checkpoint, rewritten once a second.
    pub fn status(&self, worker: Worker) -> PathBuf {
        match worker.dir_name() {
            None => self.0.join("status.json"),
            Some(name) => self.0.join(format!("{name}.status.json")),
        }
    }
    /// A worker's checkpoint storage.
    pub fn worker_checkpoints(&self, worker: Worker) -> PathBuf {
        match worker.dir_name() {
            None => self.checkpoints(),
            Some(name) => self.checkpoints().join(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kafka_name_lies_under_the_tenants_prefix() {
        let ns = TenantNamespace::new(Path::new("/d"), "a");
        let names = ns.kafka_names("wc");
        for name in [
            names.group(),
            names.progress_topic(),
            names.transactional_id(1),
        ] {
            assert!(name.starts_with("a."), "{name}");
        }
        assert!(ns.owns_topic("a.in"));
        assert!(!ns.owns_topic("a."));
        assert!(!ns.owns_topic("ab.in"));
        assert!(!ns.owns_topic("b.in"));
        assert!(!ns.owns_topic("in"));
    }

    #[test]
    fn a_pipelines_files_lie_under_its_tenants_dir() {
        let ns = TenantNamespace::new(Path::new("/d"), "a");
        let dir = ns.pipeline_dir("p");
        assert_eq!(dir.spec(), Path::new("/d/tenants/a/pipelines/p/spec.toml"));
        assert!(dir.checkpoints().starts_with("/d/tenants/a/"));
    }

    #[test]
    fn one_worker_keeps_its_old_files_and_each_of_n_has_its_own() {
        let dir = TenantNamespace::new(Path::new("/d"), "a").pipeline_dir("p");
        let root = Path::new("/d/tenants/a/pipelines/p");
        assert_eq!(dir.log(Worker::SINGLE), root.join("worker.log"));
        assert_eq!(dir.status(Worker::SINGLE), root.join("status.json"));
        assert_eq!(
            dir.worker_checkpoints(Worker::SINGLE),
            root.join("checkpoints")
        );
        let w = Worker::new(1, 3).expect("worker");
        assert_eq!(dir.log(w), root.join("worker-1-of-3.log"));
        assert_eq!(dir.status(w), root.join("worker-1-of-3.status.json"));
        assert_eq!(
            dir.worker_checkpoints(w),
            root.join("checkpoints/worker-1-of-3")
        );
    }
}
