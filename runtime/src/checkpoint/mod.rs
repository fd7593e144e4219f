//! Checkpoints: the coordinator that triggers and completes them, their metadata,
//! retention and the sinks' commits. Ids live in `record`, storage in `storage`.
pub mod commit;
pub mod coordinator;
pub mod layout_cleanup;
pub mod locations;
pub mod metadata;
pub mod retention;
