//! Tenant walls on the host: every worker process of a tenant runs in that tenant's
//! control group, which holds the tenant's CPU and memory quotas (`cpu_millicores`,
//! `memory_bytes`), so one tenant's busy or greedy guests cannot take another's CPU
//! or memory.
//!
//! Invariants:
//! - Layout: `<parent>/weir-<tag>/<tenant id>`, where `parent` is the server's own
//!   group (or `[isolation] parent`) in each hierarchy, so whatever limits the server
//!   runs under still hold over its workers, and `tag` is a hash of the data dir: two
//!   servers on one host never share a group, and a restarted server finds its own.
//! - A tenant's limits are written before each of its workers starts, so a changed quota
//!   holds from the next start on. A worker enters its group right after the spawn,
//!   before it has read its spec or loaded a guest (the kernel charges the group from
//!   then on); if it cannot enter, it is killed: with walls on, no worker runs outside.
//! - Without a CPU quota a tenant's group has no cap but the weight of one CPU, so under
//!   contention tenants share the CPUs equally, however many threads each runs.
//! - `cgroups = "auto"` (the default) runs without walls where the host has no usable
//!   cgroups, and says so at start; `"required"` refuses to start; `"off"` never tries.

use std::path::Path;
use std::process::Child;

use serde::Deserialize;

use crate::server::cgroup::{CgroupError, Group, Limits, Usage};
use crate::server::error::ServerError;
use crate::server::wire::Quotas;

/// `[isolation]` in `server.toml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IsolationConfig {
    pub cgroups: CgroupMode,
    /// The group to build under, as a path inside each hierarchy (`/weir`); default the
    /// server's own.
    pub parent: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupMode {
    #[default]
    Auto,
    Required,
    Off,
}

/// The server's walls: its base group, or none (walls off or unavailable).
#[derive(Debug)]
pub struct Walls {
    base: Option<Group>,
}

/// One tenant's group, as a worker launch holds it.
#[derive(Debug, Clone)]
pub struct TenantWall {
    group: Group,
    memory_bytes: Option<u64>,
}

impl Walls {
    /// No walls (tests of the supervisor alone, `cgroups = "off"`).
    pub fn none() -> Walls {
        Walls { base: None }
    }

    /// Finds the hierarchies and makes this server's base group (see the module
    /// invariants). `Err` only with `cgroups = "required"`.
    pub fn open(config: &IsolationConfig, data_dir: &Path) -> Result<Walls, ServerError> {
        if config.cgroups == CgroupMode::Off {
            return Ok(Walls::none());
        }
        let tag = xxhash_rust::xxh3::xxh3_64(data_dir.as_os_str().as_encoded_bytes());
        let base = Group::detect(config.parent.as_deref())
            .map(|parent| parent.child(&format!("weir-{:012x}", tag >> 16)))
            .and_then(|base| base.create().map(|()| base));
        match (base, config.cgroups) {
            (Ok(base), _) => {
                tracing::info!(group = %base.describe(), "tenants' workers run in cgroups (CPU and memory quotas)");
                Ok(Walls { base: Some(base) })
            }
            (Err(e), CgroupMode::Required) => Err(ServerError::Other(format!(
                "[isolation] cgroups = \"required\", but {e}"
            ))),
            (Err(e), _) => {
                tracing::warn!(error = %e, "tenants' workers run without CPU and memory walls (set [isolation] cgroups = \"required\" to refuse to start)");
                Ok(Walls::none())
            }
        }
    }

    /// Whether workers run in walls.
    pub fn enabled(&self) -> bool {
        self.base.is_some()
    }

    /// Tenant `id`'s group with `quotas`' limits written, made if new; `None` without
    /// walls.
    pub fn tenant(&self, id: &str, quotas: &Quotas) -> Result<Option<TenantWall>, ServerError> {
        let Some(base) = &self.base else {
            return Ok(None);
        };
        let group = base.child(id);
        let limits = Limits {
            cpu_millicores: quotas.cpu_millicores,
            memory_bytes: quotas.memory_bytes,
        };
        group
            .create()
            .and_then(|()| group.set_limits(&limits))
            .map_err(|e| wall_error(id, e))?;
        Ok(Some(TenantWall {
            group,
            memory_bytes: limits.memory_bytes,
        }))
    }

    /// What tenant `id`'s workers have used since its group was made.
    pub fn usage(&self, id: &str) -> Option<Usage> {
        Some(self.base.as_ref()?.child(id).usage())
    }

    /// Removes tenant `id`'s group (its workers have ended).
    pub fn remove_tenant(&self, id: &str) {
        if let Some(base) = &self.base
            && let Err(e) = base.child(id).remove()
        {
            tracing::warn!(tenant = id, error = %e, "cannot remove the tenant's cgroup");
        }
    }

    /// At shutdown, once every worker has ended: removes the tenants' groups and the
    /// base group (one that still holds a process stays, and is reused at the next
    /// start).
    pub fn close(&self, tenants: impl IntoIterator<Item = String>) {
        let Some(base) = &self.base else {
            return;
        };
        for id in tenants {
            self.remove_tenant(&id);
        }
        if let Err(e) = base.remove() {
            tracing::warn!(error = %e, "cannot remove the server's cgroup");
        }
    }
}

fn wall_error(tenant: &str, e: CgroupError) -> ServerError {
    ServerError::Other(format!("tenant {tenant:?}: {e}"))
}

impl TenantWall {
    /// Puts the just-spawned `child` in the tenant's group, or kills it.
    pub fn admit(&self, child: &mut Child) -> Result<(), ServerError> {
        self.group.add(child.id()).map_err(|e| {
            let _ = child.kill();
            let _ = child.wait();
            ServerError::Other(format!(
                "the worker could not enter its tenant's cgroup: {e}"
            ))
        })
    }

    /// Processes the kernel has killed for the tenant's memory quota so far.
    pub fn oom_kills(&self) -> u64 {
        self.group.oom_kills()
    }

    /// Why a worker the kernel killed for memory ended, for its `last_error`.
    pub fn out_of_memory(&self) -> String {
        let limit = self
            .memory_bytes
            .map_or("its memory".into(), |b| format!("{b} bytes"));
        format!(
            "the kernel killed the worker: the tenant's processes reached the tenant's memory quota ({limit}); lower the pipeline's parallelism or limits.memory, or ask the operator for a larger memory_bytes quota"
        )
    }
}
