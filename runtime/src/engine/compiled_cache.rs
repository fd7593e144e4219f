//! `CompiledCache`: the layout of a compiled-code cache directory.
//!
//! ```text
//! <root>/wasmtime/                  wasmtime's own cache (artifacts keyed by wasmtime's
//!                                   hash of the bytes, its version and configuration)
//! <root>/optimized/<sha256>         marker: this build's optimized code for those bytes
//!                                   is in wasmtime/ (see `code_tier.rs`)
//! <root>/tenants/<id>/              a hosted tenant's own cache, laid out the same way
//! ```
//!
//! Invariants:
//! - Nothing but wasmtime's cache lives under `wasmtime/`: wasmtime's cleanup deletes
//!   every file and directory it does not recognise under its cache directory, so
//!   markers and tenants' caches are its siblings, never its children.
//! - A marker is written only after an optimized compile *into this cache* succeeded;
//!   it may outlive the artifact (wasmtime evicts past its size limits), which costs
//!   one synchronous optimized compile, never a wrong result: a marker only chooses
//!   which compiler runs first.

use std::path::{Path, PathBuf};

/// A compiled-code cache rooted at one directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledCache {
    root: PathBuf,
}

impl CompiledCache {
    /// The cache rooted at `root` (absolute or not; made absolute, as wasmtime requires).
    pub fn at(root: &Path) -> std::io::Result<CompiledCache> {
        Ok(CompiledCache {
            root: std::path::absolute(root)?,
        })
    }

    /// The cache's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory given to wasmtime as its cache.
    pub(crate) fn wasmtime_dir(&self) -> PathBuf {
        self.root.join("wasmtime")
    }

    /// Tenant `id`'s own cache (the server's uploads and workers of that tenant).
    pub fn tenant(&self, id: &str) -> CompiledCache {
        CompiledCache {
            root: self.root.join("tenants").join(id),
        }
    }

    /// Whether optimized code for the bytes with hex SHA-256 `sha256` was compiled into
    /// this cache by this build.
    pub(crate) fn has_optimized(&self, sha256: &str) -> bool {
        self.marker(sha256).is_file()
    }

    /// Records that optimized code for `sha256`'s bytes is now in this cache. Best
    /// effort: a marker that cannot be written only means the next load tiers again.
    pub(crate) fn mark_optimized(&self, sha256: &str) {
        let marker = self.marker(sha256);
        let written = marker
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&marker, b""));
        if let Err(e) = written {
            tracing::debug!(marker = %marker.display(), "cannot write the optimized-code marker: {e}");
        }
    }

    fn marker(&self, sha256: &str) -> PathBuf {
        // Markers are per build: another Weir version may configure wasmtime otherwise,
        // and then the artifact the marker speaks of is not the one it would look up.
        self.root
            .join("optimized")
            .join(concat!("weir-", env!("CARGO_PKG_VERSION")))
            .join(sha256)
    }
}
