//! `ObjectStorage`: the checkpoint storage backend on an S3-compatible object store
//! (`[checkpoint] dir = "s3://bucket/prefix"`), through the `object_store` crate.
//!
//! Configuration comes from the environment, as every AWS tool reads it:
//! `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` (or a web identity:
//! `AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`, or ECS container credentials),
//! `AWS_REGION` (default `us-east-1`), and for a non-AWS server `AWS_ENDPOINT_URL`
//! (path-style requests) with `AWS_ALLOW_HTTP=true` if it speaks plain HTTP.
//!
//! The layout under the prefix is `storage::names`'s, the same as on a directory.
//! Invariants (those of `CheckpointStorage`, and how this backend keeps them):
//! - A checkpoint is complete iff `chk-<id>/_metadata` exists. [`write_metadata`] is a
//!   conditional put (`PutMode::Create`, `If-None-Match: *`): the object appears whole
//!   or not at all (S3 PUTs are atomic) and an existing one is never overwritten, even
//!   by a racing writer (the store answers 412 and it is `AlreadyComplete`).
//!   [`discard`] deletes `_metadata` FIRST, then the rest of the checkpoint.
//! - Every object this storage accepted is durable when the `put_*` call returns (S3
//!   acknowledges a PUT, or completes a multipart upload, only once it is stored), so
//!   `_metadata` is only ever written after the files it names.
//! - An object never appears half-written under its name: single PUTs and completed
//!   multipart uploads are atomic; an interrupted multipart upload leaves no object.
//! - Shared files are immutable and named uniquely by the caller: [`put_shared`] of a
//!   name that exists is a no-op returning 0 (a has-check; two racing uploads of one
//!   name carry the same bytes, so either winning is the same object).
//!   A retried PUT (the client retries one that failed with a 5xx or a dropped
//!   connection) may find the object its own first attempt stored: `_metadata` that is
//!   there byte for byte as we wrote it is success, not `AlreadyComplete`.
//! - Weir deletes only what it made: [`open`] takes an empty prefix (and writes the
//!   `.weir-checkpoints` marker object there), a prefix holding the marker, or one
//!   holding nothing but Weir's own names; any other is refused. [`remove_all`] deletes
//!   only objects under Weir's own names, from a prefix that passes the same test, every
//!   `_metadata` first (so no checkpoint looks complete with its files half gone).
//! - A prefix belongs to one pipeline: the marker names it, and is claimed with a
//!   conditional put; [`open`] and [`remove_all`] refuse a prefix whose marker names
//!   another pipeline (`OtherPipeline`). A marker naming none (an older Weir's) is
//!   adopted: rewritten for the opener. [`open_read_only`] writes nothing at all.
//! - [`gc_shared`] never deletes a shared object younger than `SHARED_GC_GRACE` (by the
//!   store's `last_modified`, against the clock when gc starts), referenced or not: an
//!   upload another instance (a zombie not yet fenced, say) has just made, and no
//!   metadata names yet, survives a gc racing it.
//! - Bad configuration (no credentials, an unreachable endpoint, a bucket that does not
//!   exist) is an error from [`open`], before anything is written, never a panic.
//! - Requests are bounded: connect timeout, request timeout and a bounded retry budget
//!   (see the constants), and every call has a deadline on top of them (`CALL_DEADLINE`,
//!   plus time for the bytes of a transfer at `MIN_THROUGHPUT`), so a store that went
//!   away, or accepts connections and never answers, is an error within minutes at
//!   worst, not a hang: the caller's thread is released at the deadline.
//!
//! The sync API is bridged to the async client by `storage::blocking` (callable from any
//! thread, inside a tokio runtime or not).
//!
//! [`open`]: ObjectStorage::open
//! [`open_read_only`]: ObjectStorage::open_read_only
//! [`gc_shared`]: ObjectStorage::gc_shared
//! [`remove_all`]: ObjectStorage::remove_all
//! [`write_metadata`]: ObjectStorage::write_metadata
//! [`discard`]: ObjectStorage::discard
//! [`put_shared`]: ObjectStorage::put_shared

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use futures_util::stream::TryStreamExt;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::buffered::BufWriter;
use object_store::path::Path as Key;
use object_store::{
    BackoffConfig, ClientConfigKey, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions,
    PutPayload, RetryConfig,
};
use tokio::io::{AsyncWriteExt, BufReader};

use crate::record::CheckpointId;
use crate::storage::StorageError;
use crate::storage::backend::{CheckpointInfo, GcReport, StorageBackend};
use crate::storage::blocking::{BlockingRuntime, Interrupted};
use crate::storage::local_files;
use crate::storage::location::S3Location;
use crate::storage::names::{
    self, METADATA_FILE, OWNER_FILE, SHARED_DIR, is_weir_entry, is_worker_location,
    parse_checkpoint_dir, validate_component, validate_task,
};

/// Connect timeout of one request: an endpoint that does not answer fails fast.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Whole-request timeout. A request carries at most one `UPLOAD_BUFFER` part (8 MiB:
/// 60 s is 140 KiB/s) or a small object; a download streams in one request, so its
/// deadline is the call's (`transfer_deadline`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Retries of a failed request (connection errors, 5xx, throttling), with backoff.
const MAX_RETRIES: usize = 4;
/// Total time a request may spend being retried.
const RETRY_TIMEOUT: Duration = Duration::from_secs(60);
/// Deadline of one storage call that moves no file: the retry budget, one last
/// request's timeout, the client's longest backoff (15 s) and a margin. Past it the
/// caller gets `StorageError::Interrupted`, whatever the store does.
const CALL_DEADLINE: Duration = Duration::from_secs(150);
/// Slowest transfer a file upload or download is given time for, on top of
/// `CALL_DEADLINE`: 1 MiB/s (a 1 GiB SST: about 17 minutes).
const MIN_THROUGHPUT: u64 = 1 << 20; // bytes per second
/// Shared objects this young are never garbage-collected, referenced or not: another
/// instance's upload of a checkpoint in flight is referenced by no metadata yet. Ten
/// minutes is longer than a checkpoint's upload should take and than any plausible
/// clock skew between this host and the store.
const SHARED_GC_GRACE: Duration = Duration::from_secs(10 * 60);
/// Upload buffer: files larger than this go up as a multipart upload, in parts this size.
const UPLOAD_BUFFER: usize = 8 << 20; // 8 MiB
/// Region when `AWS_REGION` is unset (what the AWS CLI falls back to for S3).
const DEFAULT_REGION: &str = "us-east-1";

/// Checkpoint storage under a prefix of an S3-compatible bucket. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ObjectStorage {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Arc<dyn ObjectStore>,
    location: S3Location,
    /// The prefix as a key (empty: the bucket's root).
    root: Key,
    runtime: BlockingRuntime,
    /// `SHARED_GC_GRACE` (tests shorten it).
    shared_gc_grace: Duration,
    /// Every key deleted, in order (tests check `_metadata` goes first).
    #[cfg(test)]
    deleted: std::sync::Mutex<Vec<String>>,
}

impl ObjectStorage {
    /// Connects to `location`'s bucket, checks the prefix is Weir's (or empty) and not
    /// another pipeline's, and marks it as `pipeline`'s.
    pub fn open(location: &S3Location, pipeline: &str) -> Result<Self, StorageError> {
        Self::connect(location, &aws_env())?.claim(pipeline)
    }

    /// Connects to `location`'s bucket and checks the prefix is Weir's (or empty), to
    /// read it only: nothing is written.
    pub fn open_read_only(location: &S3Location) -> Result<Self, StorageError> {
        let storage = Self::connect(location, &aws_env())?;
        storage.check_ours()?;
        Ok(storage)
    }

    /// Checks the prefix is Weir's (or empty) and not another pipeline's, and makes the
    /// marker name `pipeline`: a conditional put if there is none, a rewrite of an
    /// older Weir's that names none.
    fn claim(self, pipeline: &str) -> Result<Self, StorageError> {
        let marker = self.key(OWNER_FILE);
        let root = self.inner.location.to_string();
        let content = names::owner_content(pipeline);
        match self.check_ours()? {
            Some(existing) => {
                if names::check_owner(&root, &existing, pipeline)? {
                    self.put(&marker, PutPayload::from(content))?;
                }
            }
            None => {
                if !self.put_if_absent(&marker, PutPayload::from(content))? {
                    // Another opener claimed it first (or our retried put did).
                    let existing = self.get_bytes(&marker)?.unwrap_or_default();
                    names::check_owner(&root, &existing, pipeline)?;
                }
            }
        }
        Ok(self)
    }

    /// The names of the prefixes directly below `location`'s (`a/b/<name>/...`),
    /// sorted; nothing written. The prefix is checked first as `open_read_only` does,
    /// so a missing bucket or an unreachable endpoint is the same one-line error.
    pub fn child_names(location: &S3Location) -> Result<Vec<String>, StorageError> {
        let storage = Self::connect(location, &aws_env())?;
        storage.check_ours()?;
        let mut names: Vec<String> = storage
            .root_prefixes()?
            .iter()
            .filter_map(|p| p.filename().map(str::to_owned))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Deletes every checkpoint and shared object under `location`'s prefix, and nothing
    /// else: refused (with nothing deleted) if the prefix is not Weir's or is another
    /// pipeline's than `pipeline`.
    pub fn remove_all(location: &S3Location, pipeline: &str) -> Result<(), StorageError> {
        Self::connect(location, &aws_env())?.remove_everything(pipeline)
    }

    /// [`remove_all`](Self::remove_all) on this client: every `_metadata` first, so no
    /// checkpoint ever looks complete with its files half deleted, then the rest.
    fn remove_everything(&self, pipeline: &str) -> Result<(), StorageError> {
        if let Some(existing) = self.check_ours()? {
            names::check_owner(&self.inner.location.to_string(), &existing, pipeline)?;
        }
        let root = self.inner.root.clone();
        let mut metadata = Vec::new();
        let mut rest = Vec::new();
        for meta in self.list(&root)? {
            let parts = self.relative(&meta.location);
            match parts.as_slice() {
                [first, ..]
                    if !is_weir_entry(first)
                        || first == OWNER_FILE
                        || is_worker_location(first) => {}
                [dir, file] if parse_checkpoint_dir(dir).is_some() && file == METADATA_FILE => {
                    metadata.push(meta.location)
                }
                [_, ..] => rest.push(meta.location),
                [] => {}
            }
        }
        self.delete_all(metadata)?;
        self.delete_all(rest)
    }

    /// The client for `location`, configured from `env` (the `AWS_*` variables, as
    /// [`aws_env`] reads them); nothing is sent yet.
    fn connect(location: &S3Location, env: &[(String, String)]) -> Result<Self, StorageError> {
        let config = |reason: String| StorageError::Config {
            url: location.to_string(),
            reason,
        };
        let var = |name: &str| {
            env.iter()
                .find(|(k, v)| k == name && !v.is_empty())
                .map(|(_, v)| v.as_str())
        };
        check_credentials(&var).map_err(config)?;
        let mut builder = AmazonS3Builder::new();
        for (name, value) in env {
            // What `AmazonS3Builder::from_env` does, from the variables given.
            if let Ok(key) = name.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() {
                builder = builder.with_config(key, value);
            }
        }
        builder = builder
            .with_bucket_name(&location.bucket)
            .with_retry(RetryConfig {
                backoff: BackoffConfig::default(),
                max_retries: MAX_RETRIES,
                retry_timeout: RETRY_TIMEOUT,
            });
        if var("AWS_REGION").is_none() && var("AWS_DEFAULT_REGION").is_none() {
            builder = builder.with_region(DEFAULT_REGION);
        }
        for (key, value) in [
            (ClientConfigKey::ConnectTimeout, CONNECT_TIMEOUT),
            (ClientConfigKey::Timeout, REQUEST_TIMEOUT),
        ] {
            builder = builder.with_config(
                AmazonS3ConfigKey::Client(key),
                format!("{}s", value.as_secs()),
            );
        }
        let store = builder
            .build()
            .map_err(|e| config(format!("cannot configure the S3 client: {e}")))?;
        let runtime = BlockingRuntime::new().map_err(|e| {
            config(format!(
                "cannot start the object store client's runtime: {e}"
            ))
        })?;
        let root = Key::from(location.prefix.as_str());
        Ok(Self {
            inner: Arc::new(Inner {
                store: Arc::new(store),
                location: location.clone(),
                root,
                runtime,
                shared_gc_grace: SHARED_GC_GRACE,
                #[cfg(test)]
                deleted: std::sync::Mutex::default(),
            }),
        })
    }

    /// The prefix is Weir's: it holds the marker (whose bytes this returns), or only
    /// Weir's names, or nothing (`None`). The first request to the store: a missing
    /// bucket or an unreachable endpoint shows here, as a configuration error.
    fn check_ours(&self) -> Result<Option<Vec<u8>>, StorageError> {
        let marker = self.key(OWNER_FILE);
        let store = self.inner.store.clone();
        let get_key = marker.clone();
        let got = self.run("read", &marker, async move {
            let got = store.get(&get_key).await?;
            got.bytes().await
        })?;
        let unreachable = |e: object_store::Error| StorageError::Config {
            url: self.url(&self.inner.root),
            reason: format!(
                "cannot reach the bucket ({e}); check the bucket name, AWS_ENDPOINT_URL, AWS_REGION and the credentials"
            ),
        };
        match got {
            Ok(bytes) => return Ok(Some(bytes.to_vec())),
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(unreachable(e)),
        }
        let store = self.inner.store.clone();
        let root = self.prefix_arg();
        let listed = self.run("list", &self.inner.root, async move {
            store.list_with_delimiter(root.as_ref()).await
        })?;
        let listed = match listed {
            Ok(listed) => listed,
            Err(e) if no_such_bucket(&e) => {
                return Err(StorageError::Config {
                    url: self.inner.location.to_string(),
                    reason: format!(
                        "bucket {:?} does not exist (or these credentials cannot see it): create it first",
                        self.inner.location.bucket
                    ),
                });
            }
            Err(e) => return Err(unreachable(e)),
        };
        let names = listed
            .common_prefixes
            .iter()
            .chain(listed.objects.iter().map(|meta| &meta.location));
        for name in names {
            let first = self.relative(name).into_iter().next().unwrap_or_default();
            if !is_weir_entry(&first) {
                return Err(StorageError::NotOurs {
                    root: self.inner.location.to_string(),
                    entry: first,
                });
            }
        }
        Ok(None)
    }

    /// The prefixes directly below the root (`<root>/<name>/`): one list request.
    fn root_prefixes(&self) -> Result<Vec<Key>, StorageError> {
        let store = self.inner.store.clone();
        let root = self.prefix_arg();
        let listed = self.run("list", &self.inner.root, async move {
            store.list_with_delimiter(root.as_ref()).await
        })?;
        Ok(listed
            .map_err(|e| self.store_err("list", &self.inner.root, e))?
            .common_prefixes)
    }

    /// The same storage, with shared objects younger than `grace` spared by gc.
    #[cfg(test)]
    pub fn with_shared_gc_grace(mut self, grace: Duration) -> Self {
        Arc::get_mut(&mut self.inner)
            .expect("set before the storage is shared")
            .shared_gc_grace = grace;
        self
    }

    // --- requests ---

    /// Runs one client future (operation `op` on `key`) on the owned runtime, within
    /// `CALL_DEADLINE`.
    fn run<F>(&self, op: &'static str, key: &Key, future: F) -> Result<F::Output, StorageError>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.run_within(op, key, CALL_DEADLINE, future)
    }

    /// [`run`](Self::run) with another deadline.
    fn run_within<F>(
        &self,
        op: &'static str,
        key: &Key,
        deadline: Duration,
        future: F,
    ) -> Result<F::Output, StorageError>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.inner
            .runtime
            .run(future, deadline)
            .map_err(|e: Interrupted| StorageError::Interrupted {
                url: self.url(key),
                reason: format!("cannot {op}: {e}"),
            })
    }

    /// The bytes of object `key`, `None` if there is none.
    fn get_bytes(&self, key: &Key) -> Result<Option<Vec<u8>>, StorageError> {
        let store = self.inner.store.clone();
        let get_key = key.clone();
        let got = self.run("read", key, async move {
            let got = store.get(&get_key).await?;
            got.bytes().await
        })?;
        match got {
            Ok(bytes) => Ok(Some(bytes.to_vec())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.store_err("read", key, e)),
        }
    }

    /// Puts `payload` at `key`, overwriting.
    fn put(&self, key: &Key, payload: PutPayload) -> Result<(), StorageError> {
        let store = self.inner.store.clone();
        let put_key = key.clone();
        let put = self.run(
            "write",
            key,
            async move { store.put(&put_key, payload).await },
        )?;
        put.map(|_| ()).map_err(|e| self.store_err("write", key, e))
    }

    /// Whether object `key` exists.
    fn exists(&self, key: &Key) -> Result<bool, StorageError> {
        let store = self.inner.store.clone();
        let head_key = key.clone();
        match self.run("look up", key, async move { store.head(&head_key).await })? {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.store_err("look up", key, e)),
        }
    }

    /// Puts `payload` at `key` unless an object is there: true if it was created.
    fn put_if_absent(&self, key: &Key, payload: PutPayload) -> Result<bool, StorageError> {
        let store = self.inner.store.clone();
        let put_key = key.clone();
        let put = self.run("write", key, async move {
            let opts = PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            store.put_opts(&put_key, payload, opts).await
        })?;
        match put {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(self.store_err("write", key, e)),
        }
    }

    /// Streams local file `src` to `key` (one PUT, or a multipart upload above
    /// `UPLOAD_BUFFER`), overwriting. Returns its size.
    fn upload(&self, src: &Path, key: Key) -> Result<u64, StorageError> {
        let size = local_files::file_size(src)?;
        let store = self.inner.store.clone();
        let path = src.to_path_buf();
        let put_key = key.clone();
        let sent = self.run_within("upload to", &key, transfer_deadline(size), async move {
            let file = match tokio::fs::File::open(&path).await {
                Ok(file) => file,
                Err(e) => return Err(Upload::Read(e)),
            };
            let mut reader = BufReader::with_capacity(1 << 20, file);
            let mut writer = BufWriter::with_capacity(store, put_key, UPLOAD_BUFFER);
            if let Err(e) = tokio::io::copy_buf(&mut reader, &mut writer).await {
                let _ = writer.abort().await;
                return Err(Upload::Send(e));
            }
            writer.shutdown().await.map_err(Upload::Send)
        })?;
        match sent {
            Ok(()) => Ok(size),
            Err(Upload::Read(e)) => Err(StorageError::Io {
                op: "read (to upload)",
                path: src.to_path_buf(),
                source: e,
            }),
            Err(Upload::Send(e)) => Err(self.store_err("upload to", &key, store_error(e))),
        }
    }

    /// Downloads `key` to `dest` (which must not exist): a temp file next to it,
    /// fsynced, renamed into place. Returns its size.
    fn download(&self, key: Key, dest: &Path) -> Result<u64, StorageError> {
        let exists = dest.try_exists().map_err(|e| StorageError::Io {
            op: "stat",
            path: dest.to_path_buf(),
            source: e,
        })?;
        if exists {
            return Err(StorageError::Io {
                op: "restore into (already exists)",
                path: dest.to_path_buf(),
                source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
            });
        }
        let tmp = local_files::temp_path(dest);
        let store = self.inner.store.clone();
        let get_key = key.clone();
        let tmp_path = tmp.clone();
        let got = self.run("download", &key, async move { store.get(&get_key).await })?;
        let got = match got {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(StorageError::MissingFile {
                    location: self.url(&key),
                });
            }
            Err(e) => return Err(self.store_err("download", &key, e)),
        };
        let deadline = transfer_deadline(got.meta.size);
        let got = self.run_within("download", &key, deadline, async move {
            let mut file = tokio::fs::File::create(&tmp_path)
                .await
                .map_err(Download::Write)?;
            let mut stream = got.into_stream();
            let mut size = 0_u64;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(Download::Get)?;
                size += chunk.len() as u64;
                file.write_all(&chunk).await.map_err(Download::Write)?;
            }
            file.sync_all().await.map_err(Download::Write)?;
            Ok::<u64, Download>(size)
        });
        // Past the deadline the future was dropped: the temp file is ours to remove.
        let got = got.inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })?;
        let size = match got {
            Ok(size) => size,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(match e {
                    Download::Get(object_store::Error::NotFound { .. }) => {
                        StorageError::MissingFile {
                            location: self.url(&key),
                        }
                    }
                    Download::Get(e) => self.store_err("download", &key, e),
                    Download::Write(e) => StorageError::Io {
                        op: "write (restoring)",
                        path: tmp,
                        source: e,
                    },
                });
            }
        };
        std::fs::rename(&tmp, dest).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            StorageError::Io {
                op: "rename into place",
                path: dest.to_path_buf(),
                source: e,
            }
        })?;
        if let Some(dir) = dest.parent().filter(|d| !d.as_os_str().is_empty()) {
            local_files::sync_dir(dir)?;
        }
        Ok(size)
    }

    /// Every object under `prefix` (recursively).
    fn list(&self, prefix: &Key) -> Result<Vec<ObjectMeta>, StorageError> {
        let store = self.inner.store.clone();
        let list_prefix = prefix.clone();
        let listed = self.run("list", prefix, async move {
            let prefix = (!list_prefix.as_ref().is_empty()).then_some(list_prefix);
            store.list(prefix.as_ref()).try_collect::<Vec<_>>().await
        })?;
        listed.map_err(|e| self.store_err("list", prefix, e))
    }

    /// Deletes `keys`, in order (a missing one is fine).
    fn delete_all(&self, keys: Vec<Key>) -> Result<(), StorageError> {
        for key in keys {
            #[cfg(test)]
            self.inner
                .deleted
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(key.to_string());
            let store = self.inner.store.clone();
            let delete_key = key.clone();
            match self.run(
                "delete",
                &key,
                async move { store.delete(&delete_key).await },
            )? {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.store_err("delete", &key, e)),
            }
        }
        Ok(())
    }

    // --- names ---

    /// `prefix/rel` (`rel` alone at the bucket's root).
    fn key(&self, rel: &str) -> Key {
        let root = self.inner.root.as_ref();
        if root.is_empty() {
            Key::from(rel)
        } else {
            Key::from(format!("{root}/{rel}"))
        }
    }

    /// The prefix as `list`'s argument (`None` at the bucket's root).
    fn prefix_arg(&self) -> Option<Key> {
        (!self.inner.root.as_ref().is_empty()).then(|| self.inner.root.clone())
    }

    /// The parts of `key` below the prefix.
    fn relative(&self, key: &Key) -> Vec<String> {
        match key.prefix_match(&self.inner.root) {
            Some(parts) => parts.map(|p| p.as_ref().to_owned()).collect(),
            None => Vec::new(),
        }
    }

    fn metadata_key(&self, checkpoint_id: CheckpointId) -> Key {
        self.key(&format!(
            "{}/{METADATA_FILE}",
            names::checkpoint_dir_name(checkpoint_id)
        ))
    }

    fn shared_key(&self, task: &str, shared_name: &str) -> Result<Key, StorageError> {
        validate_task(task)?;
        validate_component("shared file", shared_name)?;
        Ok(self.key(&format!(
            "{SHARED_DIR}/{task}/{}",
            names::shared_file_name(shared_name)
        )))
    }

    fn private_key(
        &self,
        checkpoint_id: CheckpointId,
        task: &str,
        name: &str,
    ) -> Result<Key, StorageError> {
        validate_task(task)?;
        validate_component("private file", name)?;
        Ok(self.key(&format!(
            "{}/{task}/{name}",
            names::checkpoint_dir_name(checkpoint_id)
        )))
    }

    /// `s3://bucket/key`.
    fn url(&self, key: &Key) -> String {
        format!("s3://{}/{key}", self.inner.location.bucket)
    }

    fn store_err(&self, op: &'static str, key: &Key, source: object_store::Error) -> StorageError {
        StorageError::ObjectStore {
            op,
            url: self.url(key),
            source: Box::new(source),
        }
    }
}

impl StorageBackend for ObjectStorage {
    /// Stores local file `src` as shared file `shared_name` of `task`, unless it is
    /// there already (then 0). Returns the bytes added.
    fn put_shared(&self, task: &str, shared_name: &str, src: &Path) -> Result<u64, StorageError> {
        let key = self.shared_key(task, shared_name)?;
        if self.exists(&key)? {
            return Ok(0);
        }
        self.upload(src, key)
    }

    fn has_shared(&self, task: &str, shared_name: &str) -> Result<bool, StorageError> {
        self.exists(&self.shared_key(task, shared_name)?)
    }

    /// Stores `src` as private file `name` of `task` in checkpoint `checkpoint_id`,
    /// replacing a previous attempt's (`CheckpointStorage` refuses a complete checkpoint).
    fn put_private(
        &self,
        checkpoint_id: CheckpointId,
        task: &str,
        name: &str,
        src: &Path,
    ) -> Result<u64, StorageError> {
        let key = self.private_key(checkpoint_id, task, name)?;
        self.upload(src, key)
    }

    /// Downloads shared file `shared_name` of `task` to `dest` (which must not exist).
    fn fetch_shared_into(
        &self,
        task: &str,
        shared_name: &str,
        dest: &Path,
    ) -> Result<u64, StorageError> {
        let key = self.shared_key(task, shared_name)?;
        self.download(key, dest)
    }

    /// Downloads private file `name` of `task` in checkpoint `checkpoint_id` to `dest`
    /// (which must not exist).
    fn fetch_private_into(
        &self,
        checkpoint_id: CheckpointId,
        task: &str,
        name: &str,
        dest: &Path,
    ) -> Result<u64, StorageError> {
        let key = self.private_key(checkpoint_id, task, name)?;
        self.download(key, dest)
    }

    /// Completes checkpoint `checkpoint_id`: a conditional put of `_metadata`, refused
    /// (`AlreadyComplete`) if another one exists. One holding exactly `bytes` is success:
    /// the client retries a PUT whose answer was lost (a 5xx, a dropped connection), and
    /// the retry then finds what the first attempt stored.
    fn write_metadata(
        &self,
        checkpoint_id: CheckpointId,
        bytes: &[u8],
    ) -> Result<(), StorageError> {
        let key = self.metadata_key(checkpoint_id);
        if self.put_if_absent(&key, PutPayload::from(bytes.to_vec()))? {
            return Ok(());
        }
        match self.get_bytes(&key)? {
            Some(existing) if existing == bytes => Ok(()),
            _ => Err(StorageError::AlreadyComplete {
                checkpoint_id,
                location: self.metadata_location(checkpoint_id),
            }),
        }
    }

    fn read_metadata(&self, checkpoint_id: CheckpointId) -> Result<Vec<u8>, StorageError> {
        let key = self.metadata_key(checkpoint_id);
        self.get_bytes(&key)?
            .ok_or_else(|| StorageError::NotComplete {
                checkpoint_id,
                location: self.url(&key),
            })
    }

    fn is_complete(&self, checkpoint_id: CheckpointId) -> Result<bool, StorageError> {
        self.exists(&self.metadata_key(checkpoint_id))
    }

    /// Every checkpoint (any object under `chk-<id>/`), complete or not, ascending.
    fn checkpoint_ids(&self) -> Result<Vec<CheckpointId>, StorageError> {
        let mut ids: Vec<CheckpointId> = self
            .root_prefixes()?
            .iter()
            .filter_map(|p| p.filename().and_then(parse_checkpoint_dir))
            .map(CheckpointId)
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// Deletes checkpoint `checkpoint_id`: `_metadata` first (so it never looks complete
    /// half-deleted), then its private objects. Returns whether it existed.
    fn discard(&self, checkpoint_id: CheckpointId) -> Result<bool, StorageError> {
        let dir = self.key(&names::checkpoint_dir_name(checkpoint_id));
        let objects = self.list(&dir)?;
        if objects.is_empty() {
            return Ok(false);
        }
        let metadata = self.metadata_key(checkpoint_id);
        if objects.iter().any(|meta| meta.location == metadata) {
            self.delete_all(vec![metadata.clone()])?;
        }
        let rest = objects
            .into_iter()
            .map(|meta| meta.location)
            .filter(|key| *key != metadata)
            .collect();
        self.delete_all(rest)?;
        Ok(true)
    }

    /// Deletes every shared object not in `referenced` and older than the grace period
    /// (`SHARED_GC_GRACE` before now, when gc starts): a younger one may be another
    /// instance's upload for a checkpoint no metadata names yet. Checkpoints are the
    /// caller's (`CheckpointStorage::gc`) to remove first.
    fn gc_shared(
        &self,
        referenced: &HashSet<(String, String)>,
        report: &mut GcReport,
    ) -> Result<(), StorageError> {
        let started = SystemTime::now();
        let cutoff = started
            .checked_sub(self.inner.shared_gc_grace)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let objects = self.list(&self.key(SHARED_DIR))?;
        let mut doomed = Vec::new();
        for meta in objects {
            if SystemTime::from(meta.last_modified) > cutoff {
                continue;
            }
            let parts = self.relative(&meta.location);
            let shared = match parts.as_slice() {
                [_, task, file] => {
                    names::parse_shared_file_name(file).map(|name| (task.clone(), name.to_owned()))
                }
                _ => None,
            };
            if shared.as_ref().is_some_and(|s| referenced.contains(s)) {
                continue;
            }
            if shared.is_some() {
                report.shared_files_removed += 1;
                report.shared_bytes_removed += meta.size;
            }
            doomed.push(meta.location);
        }
        self.delete_all(doomed)
    }

    fn checkpoint_info(&self, checkpoint_id: CheckpointId) -> Result<CheckpointInfo, StorageError> {
        let dir = self.key(&names::checkpoint_dir_name(checkpoint_id));
        let objects = self.list(&dir)?;
        if objects.is_empty() {
            return Err(StorageError::MissingFile {
                location: self.url(&dir),
            });
        }
        let metadata = self.metadata_key(checkpoint_id);
        let completed_at = objects
            .iter()
            .find(|meta| meta.location == metadata)
            .map(|meta| std::time::SystemTime::from(meta.last_modified));
        Ok(CheckpointInfo {
            checkpoint_id,
            complete: completed_at.is_some(),
            completed_at,
            private_bytes: objects.iter().map(|meta| meta.size).sum(),
        })
    }

    fn metadata_location(&self, checkpoint_id: CheckpointId) -> String {
        self.url(&self.metadata_key(checkpoint_id))
    }

    /// Where shared file `shared_name` of `task` is (for messages): its URL.
    fn shared_location(&self, task: &str, shared_name: &str) -> Result<String, StorageError> {
        Ok(self.url(&self.shared_key(task, shared_name)?))
    }

    /// Where private file `name` of `task` in checkpoint `checkpoint_id` is: its URL.
    fn private_location(
        &self,
        checkpoint_id: CheckpointId,
        task: &str,
        name: &str,
    ) -> Result<String, StorageError> {
        Ok(self.url(&self.private_key(checkpoint_id, task, name)?))
    }
}

/// Why an upload failed: the local file, or the store.
enum Upload {
    Read(std::io::Error),
    Send(std::io::Error),
}

/// Why a download failed: the store, or the local file.
enum Download {
    Get(object_store::Error),
    Write(std::io::Error),
}

/// How long a call moving `size` bytes may take: `CALL_DEADLINE`, plus the bytes at
/// `MIN_THROUGHPUT`.
fn transfer_deadline(size: u64) -> Duration {
    CALL_DEADLINE + Duration::from_secs(size / MIN_THROUGHPUT)
}

/// The client's own error inside an I/O error from its `BufWriter` (which wraps it),
/// so its kind (`NotFound`, `PermissionDenied`, ...) is kept; else a generic one.
fn store_error(e: std::io::Error) -> object_store::Error {
    let kind = e.kind();
    let source: Box<dyn std::error::Error + Send + Sync> = match e.into_inner() {
        Some(inner) => match inner.downcast::<object_store::Error>() {
            Ok(store) => return *store,
            Err(other) => other,
        },
        None => Box::new(std::io::Error::from(kind)),
    };
    object_store::Error::Generic {
        store: "S3",
        source,
    }
}

/// Whether `e` is S3's answer for a bucket that does not exist (the client reports a
/// failed listing as a generic error; the code is in its message).
fn no_such_bucket(e: &object_store::Error) -> bool {
    if matches!(e, object_store::Error::NotFound { .. }) {
        return true;
    }
    let mut source: Option<&dyn std::error::Error> = Some(e);
    while let Some(err) = source {
        if err.to_string().contains("NoSuchBucket") {
            return true;
        }
        source = err.source();
    }
    false
}

/// The process's `AWS_*` variables (the ones that are valid UTF-8).
fn aws_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| k.starts_with("AWS_"))
        .collect()
}

/// Refuses to start without credentials the client can use, instead of letting it fall
/// back to the EC2 instance metadata endpoint and time out at the first checkpoint.
fn check_credentials<'a>(var: &impl Fn(&str) -> Option<&'a str>) -> Result<(), String> {
    let set = |name: &str| var(name).is_some();
    match (set("AWS_ACCESS_KEY_ID"), set("AWS_SECRET_ACCESS_KEY")) {
        (true, true) => return Ok(()),
        (true, false) => {
            return Err("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not".into());
        }
        (false, true) => {
            return Err("AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not".into());
        }
        (false, false) => {}
    }
    let web_identity = set("AWS_WEB_IDENTITY_TOKEN_FILE") && set("AWS_ROLE_ARN");
    let container =
        set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") || set("AWS_CONTAINER_CREDENTIALS_FULL_URI");
    if web_identity || container {
        return Ok(());
    }
    Err("no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or, on Kubernetes, AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN)".into())
}

#[cfg(test)]
#[path = "object_tests.rs"]
mod tests;
