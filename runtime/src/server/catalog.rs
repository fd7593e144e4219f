//! The catalog: tenants, their tokens, modules and pipelines with their desired state,
//! in one embedded SQLite database (`{data_dir}/catalog.sqlite`).
//!
//! Invariants:
//! - The schema is versioned by `PRAGMA user_version`; `MIGRATIONS[i]` takes version
//!   `i` to `i + 1`, each in its own transaction, so a catalog is always at one version
//!   and a newer server upgrades an older catalog in place. A catalog newer than this
//!   server is refused.
//! - WAL journal, `synchronous = FULL`: a write acknowledged to a client survives a
//!   SIGKILL of the server (and a power cut).
//! - Every row that belongs to a tenant has the tenant in its primary key, and every
//!   query a tenant's request makes filters by that tenant: another tenant's rows are
//!   never read on its behalf.
//! - Tokens are stored as `(key, sha256(secret))`, never as tokens (see `tokens`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, params};

use crate::server::error::ServerError;
use crate::server::wire::{Desired, Module, PipelineState, Quotas};

const MIGRATIONS: &[&str] = &[
    // 0 -> 1: the first schema.
    "CREATE TABLE tenants (
         id TEXT PRIMARY KEY,
         quotas TEXT NOT NULL,
         kafka_principal TEXT,
         created_at TEXT NOT NULL
     );
     CREATE TABLE tokens (
         key TEXT PRIMARY KEY,
         tenant TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
         secret_hash TEXT NOT NULL,
         created_at TEXT NOT NULL
     );
     CREATE TABLE modules (
         tenant TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
         id TEXT NOT NULL,
         name TEXT NOT NULL,
         world TEXT NOT NULL,
         exports TEXT NOT NULL,
         imports TEXT NOT NULL,
         size INTEGER NOT NULL,
         uploaded_at TEXT NOT NULL,
         PRIMARY KEY (tenant, id)
     );
     CREATE TABLE pipelines (
         tenant TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
         name TEXT NOT NULL,
         spec TEXT NOT NULL,
         modules TEXT NOT NULL,
         desired TEXT NOT NULL,
         state TEXT NOT NULL,
         restarts INTEGER NOT NULL DEFAULT 0,
         last_error TEXT,
         savepoint INTEGER,
         created_at TEXT NOT NULL,
         PRIMARY KEY (tenant, name)
     );",
    // 1 -> 2: pipelines run as N worker processes; every pipeline so far is one.
    "ALTER TABLE pipelines ADD COLUMN workers INTEGER NOT NULL DEFAULT 1;",
];

/// A tenant's row.
#[derive(Debug, Clone)]
pub struct TenantRow {
    pub id: String,
    pub quotas: Quotas,
    pub kafka_principal: Option<String>,
    pub created_at: String,
    pub tokens: u32,
}

/// A pipeline's row: what the tenant asked for and what the supervisor last saw.
#[derive(Debug, Clone)]
pub struct PipelineRow {
    pub tenant: String,
    pub name: String,
    /// The spec as the tenant sent it (JSON, modules by id).
    pub spec: serde_json::Value,
    /// Module ids by step name.
    pub modules: BTreeMap<String, String>,
    pub desired: Desired,
    pub state: PipelineState,
    pub restarts: u32,
    pub last_error: Option<String>,
    pub savepoint: Option<u64>,
    pub created_at: String,
    /// Worker processes it runs as (at least 1).
    pub workers: u32,
}

#[derive(Debug)]
pub struct Catalog {
    conn: Mutex<Connection>,
    path: PathBuf,
}

/// Now, as the catalog writes times: RFC 3339, UTC, seconds.
pub fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

impl Catalog {
    pub fn open(path: &Path) -> Result<Self, ServerError> {
        let sql = |source| ServerError::Catalog {
            path: path.display().to_string(),
            source,
        };
        let mut conn = Connection::open(path).map_err(sql)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(sql)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(sql)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(sql)?;
        migrate(&mut conn).map_err(|e| match e {
            Migration::Sql(e) => sql(e),
            Migration::TooNew(v) => ServerError::Other(format!(
                "catalog {} is at schema version {v}; this server knows up to {}: use a newer weir",
                path.display(),
                MIGRATIONS.len()
            )),
        })?;
        Ok(Catalog {
            conn: Mutex::new(conn),
            path: path.to_owned(),
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent (every write
        // is one statement or one transaction), so a poisoned lock is still usable.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn err(&self, source: rusqlite::Error) -> ServerError {
        ServerError::Catalog {
            path: self.path.display().to_string(),
            source,
        }
    }

    /// Creates the tenant if it is missing; `replace_quotas` also sets the quotas and
    /// principal of an existing one (tenants declared in the config file).
    pub fn put_tenant(
        &self,
        id: &str,
        quotas: &Quotas,
        principal: Option<&str>,
        replace_quotas: bool,
    ) -> Result<bool, ServerError> {
        let quotas = to_json(quotas);
        let conn = self.conn();
        let created = conn
            .execute(
                "INSERT OR IGNORE INTO tenants (id, quotas, kafka_principal, created_at) VALUES (?1, ?2, ?3, ?4)",
                params![id, quotas, principal, now()],
            )
            .map_err(|e| self.err(e))?
            == 1;
        if !created && replace_quotas {
            conn.execute(
                "UPDATE tenants SET quotas = ?2, kafka_principal = ?3 WHERE id = ?1",
                params![id, quotas, principal],
            )
            .map_err(|e| self.err(e))?;
        }
        Ok(created)
    }

    pub fn tenants(&self) -> Result<Vec<TenantRow>, ServerError> {
        self.query_tenants("", params![])
    }

    pub fn tenant(&self, id: &str) -> Result<Option<TenantRow>, ServerError> {
        Ok(self.query_tenants("WHERE t.id = ?1", params![id])?.pop())
    }

    fn query_tenants(
        &self,
        filter: &str,
        args: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<TenantRow>, ServerError> {
        let sql = format!(
            "SELECT t.id, t.quotas, t.kafka_principal, t.created_at,
                    (SELECT count(*) FROM tokens k WHERE k.tenant = t.id)
             FROM tenants t {filter} ORDER BY t.id"
        );
        self.query(&sql, args, |r| {
            Ok(TenantRow {
                id: r.get(0)?,
                quotas: from_json(&r.get::<_, String>(1)?),
                kafka_principal: r.get(2)?,
                created_at: r.get(3)?,
                tokens: r.get(4)?,
            })
        })
    }

    /// The rows `sql` selects, each made by `row`.
    fn query<T>(
        &self,
        sql: &str,
        args: &[&dyn rusqlite::ToSql],
        row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>, ServerError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(sql).map_err(|e| self.err(e))?;
        stmt.query_map(args, row)
            .and_then(Iterator::collect)
            .map_err(|e| self.err(e))
    }

    /// Deletes a tenant with its tokens and modules; refused (false) while it has
    /// pipelines.
    pub fn delete_tenant(&self, id: &str) -> Result<DeleteOutcome, ServerError> {
        let conn = self.conn();
        let pipelines: u32 = conn
            .query_row(
                "SELECT count(*) FROM pipelines WHERE tenant = ?1",
                [id],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        if pipelines > 0 {
            return Ok(DeleteOutcome::InUse(vec![format!("{pipelines} pipelines")]));
        }
        let n = conn
            .execute("DELETE FROM tenants WHERE id = ?1", [id])
            .map_err(|e| self.err(e))?;
        Ok(if n == 1 {
            DeleteOutcome::Deleted
        } else {
            DeleteOutcome::Missing
        })
    }

    pub fn add_token(&self, tenant: &str, key: &str, secret_hash: &str) -> Result<(), ServerError> {
        self.conn()
            .execute(
                "INSERT INTO tokens (key, tenant, secret_hash, created_at) VALUES (?1, ?2, ?3, ?4)",
                params![key, tenant, secret_hash, now()],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The keys of tenant `tenant`'s tokens and when each was issued, oldest first.
    pub fn tokens_of(&self, tenant: &str) -> Result<Vec<(String, String)>, ServerError> {
        let conn = self.conn();
        let mut statement = conn
            .prepare(
                "SELECT key, created_at FROM tokens WHERE tenant = ?1 ORDER BY created_at, key",
            )
            .map_err(|e| self.err(e))?;
        let rows = statement
            .query_map([tenant], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Revokes tenant `tenant`'s token `key`; false if it has none of that key.
    pub fn delete_token(&self, tenant: &str, key: &str) -> Result<bool, ServerError> {
        let n = self
            .conn()
            .execute(
                "DELETE FROM tokens WHERE tenant = ?1 AND key = ?2",
                params![tenant, key],
            )
            .map_err(|e| self.err(e))?;
        Ok(n == 1)
    }

    /// The tenant and stored secret hash of token `key`.
    pub fn token(&self, key: &str) -> Result<Option<(String, String)>, ServerError> {
        self.conn()
            .query_row(
                "SELECT tenant, secret_hash FROM tokens WHERE key = ?1",
                [key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Records a module for a tenant; false if the tenant already had it.
    pub fn add_module(&self, tenant: &str, m: &Module) -> Result<bool, ServerError> {
        let n = self
            .conn()
            .execute(
                "INSERT OR IGNORE INTO modules (tenant, id, name, world, exports, imports, size, uploaded_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    tenant,
                    m.id,
                    m.name,
                    m.world,
                    to_json(&m.exports),
                    to_json(&m.imports),
                    m.size,
                    m.uploaded_at
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(n == 1)
    }

    pub fn modules(&self, tenant: &str) -> Result<Vec<Module>, ServerError> {
        self.query_modules("WHERE tenant = ?1", params![tenant])
    }

    pub fn module(&self, tenant: &str, id: &str) -> Result<Option<Module>, ServerError> {
        Ok(self
            .query_modules("WHERE tenant = ?1 AND id = ?2", params![tenant, id])?
            .pop())
    }

    fn query_modules(
        &self,
        filter: &str,
        args: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<Module>, ServerError> {
        let sql = format!(
            "SELECT id, name, world, exports, imports, size, uploaded_at FROM modules {filter} ORDER BY uploaded_at, id"
        );
        self.query(&sql, args, |r| {
            Ok(Module {
                id: r.get(0)?,
                name: r.get(1)?,
                world: r.get(2)?,
                exports: from_json(&r.get::<_, String>(3)?),
                imports: from_json(&r.get::<_, String>(4)?),
                size: r.get(5)?,
                uploaded_at: r.get(6)?,
            })
        })
    }

    /// Bytes of all of a tenant's modules.
    pub fn module_bytes(&self, tenant: &str) -> Result<u64, ServerError> {
        self.conn()
            .query_row(
                "SELECT coalesce(sum(size), 0) FROM modules WHERE tenant = ?1",
                [tenant],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }

    /// Deletes a tenant's module unless one of its pipelines uses it.
    pub fn delete_module(&self, tenant: &str, id: &str) -> Result<DeleteOutcome, ServerError> {
        let users: Vec<String> = self
            .pipelines(tenant)?
            .into_iter()
            .filter(|p| p.modules.values().any(|m| m == id))
            .map(|p| p.name)
            .collect();
        if !users.is_empty() {
            return Ok(DeleteOutcome::InUse(users));
        }
        let n = self
            .conn()
            .execute(
                "DELETE FROM modules WHERE tenant = ?1 AND id = ?2",
                params![tenant, id],
            )
            .map_err(|e| self.err(e))?;
        Ok(if n == 1 {
            DeleteOutcome::Deleted
        } else {
            DeleteOutcome::Missing
        })
    }

    /// Whether any tenant still has module `id` (its file is kept while one does).
    pub fn module_in_store(&self, id: &str) -> Result<bool, ServerError> {
        self.conn()
            .query_row("SELECT count(*) FROM modules WHERE id = ?1", [id], |r| {
                r.get::<_, u32>(0)
            })
            .map(|n| n > 0)
            .map_err(|e| self.err(e))
    }

    /// Adds a pipeline unless the tenant has `quota` pipelines already or one of that
    /// name. The count and the insert are made under the one connection's lock, so two
    /// creations at once cannot both pass a quota with room for one.
    pub fn add_pipeline(&self, p: &PipelineRow, quota: u32) -> Result<AddOutcome, ServerError> {
        let conn = self.conn();
        let count: u32 = conn
            .query_row(
                "SELECT count(*) FROM pipelines WHERE tenant = ?1",
                [&p.tenant],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        if count >= quota {
            return Ok(AddOutcome::OverQuota);
        }
        let n = conn
            .execute(
                "INSERT OR IGNORE INTO pipelines
                   (tenant, name, spec, modules, desired, state, restarts, last_error, savepoint, created_at, workers)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    p.tenant,
                    p.name,
                    p.spec.to_string(),
                    to_json(&p.modules),
                    p.desired.as_str(),
                    state_text(p.state),
                    p.restarts,
                    p.last_error,
                    p.savepoint,
                    p.created_at,
                    p.workers
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(if n == 1 {
            AddOutcome::Added
        } else {
            AddOutcome::Exists
        })
    }

    /// Writes back every mutable field of a pipeline's row.
    pub fn update_pipeline(&self, p: &PipelineRow) -> Result<(), ServerError> {
        self.conn()
            .execute(
                "UPDATE pipelines SET spec = ?3, modules = ?4, desired = ?5, state = ?6, restarts = ?7,
                        last_error = ?8, savepoint = ?9, workers = ?10
                 WHERE tenant = ?1 AND name = ?2",
                params![
                    p.tenant,
                    p.name,
                    p.spec.to_string(),
                    to_json(&p.modules),
                    p.desired.as_str(),
                    state_text(p.state),
                    p.restarts,
                    p.last_error,
                    p.savepoint,
                    p.workers
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Records what the supervisor saw of a run, leaving the fields the tenant sets
    /// (spec, modules, desired state) as they are. `last_error` and `savepoint` are
    /// kept when `None`.
    pub fn record_run(
        &self,
        tenant: &str,
        name: &str,
        r: &RunRecord<'_>,
    ) -> Result<(), ServerError> {
        self.conn()
            .execute(
                "UPDATE pipelines SET state = ?3, restarts = ?4,
                        last_error = coalesce(?5, last_error), savepoint = coalesce(?6, savepoint)
                 WHERE tenant = ?1 AND name = ?2",
                params![
                    tenant,
                    name,
                    state_text(r.state),
                    r.restarts,
                    r.last_error,
                    r.savepoint
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    pub fn pipelines(&self, tenant: &str) -> Result<Vec<PipelineRow>, ServerError> {
        self.query_pipelines("WHERE tenant = ?1", params![tenant])
    }

    pub fn all_pipelines(&self) -> Result<Vec<PipelineRow>, ServerError> {
        self.query_pipelines("", params![])
    }

    pub fn pipeline(&self, tenant: &str, name: &str) -> Result<Option<PipelineRow>, ServerError> {
        Ok(self
            .query_pipelines("WHERE tenant = ?1 AND name = ?2", params![tenant, name])?
            .pop())
    }

    fn query_pipelines(
        &self,
        filter: &str,
        args: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<PipelineRow>, ServerError> {
        let sql = format!(
            "SELECT tenant, name, spec, modules, desired, state, restarts, last_error, savepoint, created_at, workers
             FROM pipelines {filter} ORDER BY tenant, name"
        );
        self.query(&sql, args, |r| {
            Ok(PipelineRow {
                tenant: r.get(0)?,
                name: r.get(1)?,
                spec: serde_json::from_str(&r.get::<_, String>(2)?).unwrap_or_default(),
                modules: from_json(&r.get::<_, String>(3)?),
                desired: parse_desired(&r.get::<_, String>(4)?),
                state: parse_state(&r.get::<_, String>(5)?),
                restarts: r.get(6)?,
                last_error: r.get(7)?,
                savepoint: r.get(8)?,
                created_at: r.get(9)?,
                workers: r.get(10)?,
            })
        })
    }

    pub fn delete_pipeline(&self, tenant: &str, name: &str) -> Result<bool, ServerError> {
        let n = self
            .conn()
            .execute(
                "DELETE FROM pipelines WHERE tenant = ?1 AND name = ?2",
                params![tenant, name],
            )
            .map_err(|e| self.err(e))?;
        Ok(n == 1)
    }
}

/// What the supervisor records of a run.
#[derive(Debug, Clone)]
pub struct RunRecord<'a> {
    pub state: PipelineState,
    pub restarts: u32,
    pub last_error: Option<&'a str>,
    pub savepoint: Option<u64>,
}

/// What adding a pipeline did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddOutcome {
    Added,
    /// Refused: the tenant has one of that name.
    Exists,
    /// Refused: the tenant has as many pipelines as its quota allows.
    OverQuota,
}

/// What a delete found.
#[derive(Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    Deleted,
    Missing,
    /// Refused: these still use it.
    InUse(Vec<String>),
}

enum Migration {
    Sql(rusqlite::Error),
    TooNew(usize),
}

fn migrate(conn: &mut Connection) -> Result<(), Migration> {
    let version: usize = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(Migration::Sql)?;
    if version > MIGRATIONS.len() {
        return Err(Migration::TooNew(version));
    }
    for (from, sql) in MIGRATIONS.iter().enumerate().skip(version) {
        let tx = conn.transaction().map_err(Migration::Sql)?;
        tx.execute_batch(sql).map_err(Migration::Sql)?;
        tx.pragma_update(None, "user_version", from + 1)
            .map_err(Migration::Sql)?;
        tx.commit().map_err(Migration::Sql)?;
    }
    Ok(())
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn from_json<T: serde::de::DeserializeOwned + Default>(text: &str) -> T {
    serde_json::from_str(text).unwrap_or_default()
}

pub fn state_text(state: PipelineState) -> &'static str {
    match state {
        PipelineState::Starting => "starting",
        PipelineState::Running => "running",
        PipelineState::Restarting => "restarting",
        PipelineState::Failed => "failed",
        PipelineState::Stopped => "stopped",
        PipelineState::Finished => "finished",
    }
}

/// A catalog's `desired` column: `running`, else (`stopped`, the only other value
/// ever written) stopped.
fn parse_desired(text: &str) -> Desired {
    match text {
        "running" => Desired::Running,
        "deleted" => Desired::Deleted,
        _ => Desired::Stopped,
    }
}

fn parse_state(text: &str) -> PipelineState {
    match text {
        "starting" => PipelineState::Starting,
        "running" => PipelineState::Running,
        "restarting" => PipelineState::Restarting,
        "failed" => PipelineState::Failed,
        "finished" => PipelineState::Finished,
        _ => PipelineState::Stopped,
    }
}

#[cfg(test)]
#[path = "catalog_tests.rs"]
mod tests;
