//! Sources and sinks.
//!
//! Local connectors: `generator` (synthetic, deterministic), `file` (line source and
//! exactly-once sink), `stdin` (source, not replayable), `stdout` (sink,
//! at-least-once), `kafka` (read_committed source, exactly-once transactional sink).
//! Sources implement `dataflow::source::Source`, sinks `dataflow::sink::Sink`; the
//! pipeline opens them (`pipeline::sources`, `pipeline::sinks`).
//! Each connector owns its config struct, validates it (`field`) and never sees the
//! spec that holds it; the spec deserializes into it.
pub mod error;
pub mod file;
pub mod generator;
pub mod kafka;
pub mod pacer;
pub mod record_format;
pub mod stdin;
pub mod stdout;

pub use error::ConnectorError;
pub use file::{FileSink, FileSinkCommitter, FileSinkConfig, FileSource, FileSourceConfig};
pub use generator::{GeneratorConfig, GeneratorSource, KeyDistribution};
pub use record_format::{InputFormat, OutputFormat};
pub use stdin::{StdinSource, StdinSourceConfig};
pub use stdout::{StdoutSink, StdoutSinkConfig};
