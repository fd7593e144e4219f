//! End-to-end tests that need no broker: one `weir run` (or `weir validate`, `weir
//! test`, `weir checkpoints`) per case, on files, against the real binary and the real
//! guests. One test binary, so it links wasmtime, RocksDB and librdkafka once.
//! `object_store_checkpoints` needs the S3-compatible server `make test` starts
//! (`WEIR_SKIP_S3=1` skips it, saying so); everything else needs only `make guests`.

mod bad_input;
mod compile_limits;
mod crash_recovery;
mod docs;

mod incremental_checkpoints;
mod kubernetes_manifests;
mod memory_bounds;
mod object_store_checkpoints;
mod signals;
mod storage_ownership;
mod weir_test_command;
mod windows;
mod worker_endpoint;
