//! What a checkpoint records of each operator and source: an `OperatorSnapshot` per
//! operator subtask, and a `SourcePosition` per source subtask.
//!
//! Invariant: both are JSON inside the checkpoint's `_metadata`, so a field added later
//! must have a serde default (a checkpoint written before it still decodes).

/// A source's position, stored in checkpoint metadata.
pub type SourcePosition = serde_json::Value;

/// An operator's snapshot for one checkpoint, stored in the checkpoint's metadata.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OperatorSnapshot {
    /// Operator-defined: what it needs to restore (and, for sinks, to commit).
    pub state: serde_json::Value,
    /// Files this checkpoint added to checkpoint storage (incremental state upload).
    #[serde(default)]
    pub files_added: u64,
    #[serde(default)]
    pub bytes_added: u64,
    /// Bytes of the whole state this snapshot references (shared and private files).
    #[serde(default)]
    pub state_bytes: u64,
    /// Shared files in checkpoint storage this snapshot needs, as (storage task, shared
    /// name): retention keeps them while the checkpoint is kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_files: Vec<(String, String)>,
}

impl OperatorSnapshot {
    /// A snapshot that uploaded no files.
    pub fn new(state: serde_json::Value) -> Self {
        Self {
            state,
            files_added: 0,
            bytes_added: 0,
            state_bytes: 0,
            shared_files: Vec::new(),
        }
    }
}
