//! The data every layer shares, and nothing else: record batches, what travels between
//! tasks (records, watermarks, barriers), checkpoint ids, windows, dead letters and the
//! snapshots a checkpoint records. The floor of the house: it imports no other module
//! of the crate, and every other module may import it.

pub mod batch;
pub mod checkpoint_id;
pub mod dead_letter;
pub mod ids;
pub mod message;
pub mod snapshot;
pub mod window;

pub use batch::{BatchLimit, RecordBatch, RecordRef};
pub use checkpoint_id::CheckpointId;
pub use dead_letter::DeadLetter;
pub use message::{Barrier, Message, Watermark};
pub use snapshot::{OperatorSnapshot, SnapshotError, SnapshotState, SourcePosition};
pub use window::Window;
