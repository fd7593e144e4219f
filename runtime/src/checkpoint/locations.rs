//! The locations of a pipeline's checkpoint root, each with its newest complete
//! checkpoint: the root itself (the pipeline run as one process, `Worker::SINGLE`) and
//! every `worker-<I>-of-<N>/` below it.
//!
//! Invariants: the root is listed once; it counts as a location only when it holds a
//! checkpoint directory of its own. Storage is only read, so another worker's location
//! may be read while that worker writes. Used at start (`pipeline::worker_layout`) and
//! by worker 0's clean-up of earlier layouts (`layout_cleanup`).

use crate::checkpoint::metadata::{CheckpointMetadata, MetadataError};
use crate::cluster::{LayoutStamp, Worker};
use crate::storage::names::parse_checkpoint_dir;
use crate::storage::{CheckpointLocation, CheckpointStorage, StorageError};

/// One location of a checkpoint root.
#[derive(Debug, Clone)]
pub struct RootLocation {
    /// `worker-<I>-of-<N>`, or `the pipeline's root` for the root itself.
    pub name: String,
    pub worker: Worker,
    pub location: CheckpointLocation,
    /// Its newest complete checkpoint, if any.
    pub newest: Option<CheckpointMetadata>,
}

impl RootLocation {
    /// The layout that took its newest complete checkpoint, if any.
    pub fn newest_layout(&self) -> Option<LayoutStamp> {
        self.newest.as_ref().map(|m| m.layout_of(self.worker))
    }
}

/// Why the locations of a checkpoint root could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LocationsError {
    /// The root could not be listed.
    #[error(transparent)]
    List(#[from] StorageError),
    /// Location `name`'s newest checkpoint could not be read.
    #[error("{name}: {source}")]
    Unreadable {
        name: String,
        #[source]
        source: MetadataError,
    },
}

/// The name the root goes by among its locations.
pub const ROOT_NAME: &str = "the pipeline's root";

/// The root (if it holds a checkpoint directory) and every worker location below it,
/// by name, each with its newest complete checkpoint.
pub fn root_locations(root: &CheckpointLocation) -> Result<Vec<RootLocation>, LocationsError> {
    let names = CheckpointStorage::child_names(root)?;
    let mut found = Vec::new();
    if names.iter().any(|n| parse_checkpoint_dir(n).is_some()) {
        found.push(read(ROOT_NAME.to_owned(), Worker::SINGLE, root.clone())?);
    }
    for name in names {
        if let Some(worker) = Worker::parse_dir_name(&name) {
            let location = root.child(&name);
            found.push(read(name, worker, location)?);
        }
    }
    Ok(found)
}

fn read(
    name: String,
    worker: Worker,
    location: CheckpointLocation,
) -> Result<RootLocation, LocationsError> {
    match CheckpointMetadata::newest_at(&location) {
        Ok(newest) => Ok(RootLocation {
            name,
            worker,
            location,
            newest,
        }),
        Err(source) => Err(LocationsError::Unreadable { name, source }),
    }
}
