//! Local files: a line-reading source and an exactly-once sink (staged files renamed
//! into place when their checkpoint commits).
pub mod committer;
pub mod sink;
pub mod source;

pub use committer::{FileSinkCommitter, committed_files, remove_committed};
pub use sink::{
    FileSink, FileSinkConfig, FileSinkSnapshot, STAGING_DIR, StagedFile, output_file_name,
};
pub use source::{FileSource, FileSourceConfig, list_input_files};
