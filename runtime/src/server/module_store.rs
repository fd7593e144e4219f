//! The module store: uploaded components, one file per distinct content,
//! `{data_dir}/modules/{sha256}.wasm`.
//!
//! Invariants:
//! - An upload is streamed to a part file while it is hashed and counted; it is never
//!   held in memory whole, and it stops (413) the moment it passes the tenant's
//!   remaining module quota, or at once when `Content-Length` says it will. A part
//!   file outlives its upload only if the server is killed; the next start removes it.
//! - A module is admitted only if it is a component of a weir world whose imports the
//!   runtime allows (`WasmEngine::load`, the same check as `weir validate`), compiled in
//!   a child process under the server's compile limits so a compile bomb costs a
//!   refusal, not the server. The compiled code lands in the tenant's own compiled-code
//!   cache (`tenant_cache`), which its workers use, so a worker that starts the module
//!   compiles nothing.
//! - Compiled code is never shared between tenants: an upload compiles into its tenant's
//!   cache only, whoever uploaded the same bytes before. So how long an upload takes says
//!   nothing about other tenants' modules, and no tenant's worker loads an artifact
//!   another tenant's upload wrote.
//! - Its file is renamed into place only after that, under its SHA-256: the same bytes
//!   uploaded twice (by anyone) are one file. A file is removed when no tenant's catalog
//!   row names it.

use std::path::{Path, PathBuf};

use axum::body::Body;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::engine::{CompileIsolation, CompiledCache, GuestModule, WasmEngine};
use crate::server::catalog::now;
use crate::server::error::{ApiError, ServerError};
use crate::server::wire::Module;

#[derive(Debug)]
pub struct ModuleStore {
    dir: PathBuf,
    compiles: UploadCompiles,
}

/// How uploads are compiled.
#[derive(Debug, Clone)]
pub struct UploadCompiles {
    /// Under it, each tenant's compiled-code cache (`tenants/<id>`); none: no cache.
    pub cache_root: Option<PathBuf>,
    /// The child process and limits every upload is compiled under.
    pub isolation: CompileIsolation,
}

/// An upload on disk, not yet admitted.
#[derive(Debug)]
pub struct Received {
    part: PathBuf,
    pub sha256: String,
    pub size: u64,
}

impl Drop for Received {
    fn drop(&mut self) {
        // Admitted uploads were renamed away; anything left is a refusal's.
        let _ = std::fs::remove_file(&self.part);
    }
}

impl ModuleStore {
    /// Opens the store in `dir`, removing the part files of uploads a killed server left
    /// (no upload is in progress before the server listens).
    pub fn open(dir: PathBuf, compiles: UploadCompiles) -> Result<Self, ServerError> {
        std::fs::create_dir_all(&dir).map_err(|e| ServerError::io("cannot create", &dir, e))?;
        let entries =
            std::fs::read_dir(&dir).map_err(|e| ServerError::io("cannot read", &dir, e))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if is_part_file(&path) {
                std::fs::remove_file(&path)
                    .map_err(|e| ServerError::io("cannot remove", &path, e))?;
            }
        }
        Ok(ModuleStore { dir, compiles })
    }

    /// Tenant `tenant`'s compiled-code cache (its uploads compile into it, its workers
    /// load from it), if the server has one.
    pub fn tenant_cache(&self, tenant: &str) -> Option<PathBuf> {
        let root = CompiledCache::at(self.compiles.cache_root.as_ref()?).ok()?;
        Some(root.tenant(tenant).root().to_path_buf())
    }

    pub fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.wasm"))
    }

    /// Streams `body` to a part file, refusing it once it exceeds `limit` bytes.
    pub async fn receive(&self, body: Body, limit: u64) -> Result<Received, ApiError> {
        let part = self
            .dir
            .join(format!("upload-{:016x}.part", rand::random::<u64>()));
        let io = |e: std::io::Error| ServerError::io("cannot write", &part, e);
        let mut file = tokio::fs::File::create(&part).await.map_err(io)?;
        let mut received = Received {
            part: part.clone(),
            sha256: String::new(),
            size: 0,
        };
        let mut hasher = Sha256::new();
        let mut stream = body.into_data_stream();
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| ApiError::bad_request(format!("upload interrupted: {e}")))?;
            received.size += chunk.len() as u64;
            if received.size > limit {
                return Err(over_quota(limit));
            }
            hasher.update(&chunk);
            file.write_all(&chunk).await.map_err(io)?;
        }
        file.sync_all().await.map_err(io)?;
        if received.size == 0 {
            return Err(ApiError::bad_request(
                "the upload is empty: send the .wasm bytes as the body",
            ));
        }
        received.sha256 = hex::encode(hasher.finalize());
        Ok(received)
    }

    /// Checks the upload is a weir component (compiling it in a child process, into
    /// `tenant`'s cache) and moves it into place. Blocking: call from a blocking thread.
    pub fn admit(&self, received: &Received, name: &str, tenant: &str) -> Result<Module, ApiError> {
        let engine = WasmEngine::new(self.tenant_cache(tenant).as_deref())
            .map_err(|e| ServerError::Other(e.to_string()))?
            .with_compile_isolation(self.compiles.isolation.clone());
        let module = engine.load(&received.part).map_err(|e| {
            ApiError::bad_request(without_part_name(&e.to_string(), &received.part))
        })?;
        let target = self.path(&received.sha256);
        std::fs::rename(&received.part, &target)
            .map_err(|e| ServerError::io("cannot store module", &target, e))?;
        Ok(describe(&module, &received.sha256, name, received.size))
    }

    /// Removes a module's file (when no tenant has it any more).
    pub fn remove(&self, id: &str) {
        let _ = std::fs::remove_file(self.path(id));
    }
}

pub fn over_quota(limit: u64) -> ApiError {
    ApiError::too_large(format!(
        "the module does not fit in your module quota: {limit} bytes left"
    ))
}

fn describe(module: &GuestModule, sha256: &str, name: &str, size: u64) -> Module {
    Module {
        id: sha256.to_owned(),
        name: name.to_owned(),
        world: module.world().to_string(),
        exports: module.exports().to_vec(),
        imports: module.imports().to_vec(),
        size,
        uploaded_at: now(),
    }
}

/// The engine names the file it loaded; the client knows its upload as "the module".
/// Whether `path` is an upload's part file (`upload-<16 hex>.part`, see `receive`).
fn is_part_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("upload-")?.strip_suffix(".part"))
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn without_part_name(message: &str, part: &Path) -> String {
    let name = part
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    message
        .replace(&format!("{name}: "), "module: ")
        .replace(&name, "module")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::CompileLimits;

    #[test]
    fn opening_the_store_removes_the_part_files_a_killed_server_left() {
        let dir = tempfile::tempdir().expect("tempdir");
        let names = [
            "upload-0123456789abcdef.part",
            "upload-fedcba9876543210.part",
            "upload-x.part",
            "0123.wasm",
        ];
        for name in names {
            std::fs::write(dir.path().join(name), b"bytes").expect("write");
        }
        let compiles = UploadCompiles {
            cache_root: None,
            isolation: CompileIsolation {
                program: PathBuf::from("weir"),
                limits: CompileLimits::default(),
            },
        };
        ModuleStore::open(dir.path().to_path_buf(), compiles).expect("open");
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .expect("read")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["0123.wasm", "upload-x.part"]);
    }
}
