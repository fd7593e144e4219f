//! `[[sinks]]`: where the records leaving the last step go. Each connector owns its
//! config struct (in `connector/`); this file picks it by `type` and resolves paths.
//!
//! Invariants after parsing: file sink paths are absolute (relative ones resolved
//! against the spec file's directory) and name a directory or nothing yet (never a
//! file); a kafka sink names a topic and a non-empty transactional prefix
//! (broker-dependent checks run when the pipeline starts).

use std::path::Path;

use crate::connector::kafka::KafkaSinkConfig;
use crate::connector::record_format::OutputFormat;
use crate::connector::{FileSinkConfig, StdoutSinkConfig};
use crate::field::InvalidField;
use crate::spec::error::Located;
use crate::spec::tagged::{Item, from_item, locate, split_type};

/// One variant per `type`. Adding a connector: a variant, its config struct in
/// `connector/`, and a branch in `parse_sink`.
#[derive(Debug, Clone, PartialEq)]
#[allow(
    clippy::large_enum_variant,
    reason = "a spec holds a handful of sinks, parsed once: boxing the Kafka config would buy nothing"
)]
pub enum SinkSpec {
    /// Exactly-once: staged files renamed into place when their checkpoint commits.
    File(FileSinkConfig),
    /// At-least-once, for demos.
    Stdout(StdoutSinkConfig),
    /// Exactly-once (transactions committed with the checkpoints) or at-least-once.
    Kafka(KafkaSinkConfig),
}

impl SinkSpec {
    /// The spec's `type` value.
    pub fn type_name(&self) -> &'static str {
        match self {
            SinkSpec::File(_) => "file",
            SinkSpec::Stdout(_) => "stdout",
            SinkSpec::Kafka(_) => "kafka",
        }
    }

    /// The sink's line format, for the sinks that write lines.
    pub fn format(&self) -> Option<OutputFormat> {
        match self {
            SinkSpec::File(c) => Some(c.format),
            SinkSpec::Stdout(c) => Some(c.format),
            SinkSpec::Kafka(_) => None,
        }
    }
}

pub(crate) fn parse_sink(item: Item<'_>, base_dir: &Path) -> Result<SinkSpec, Located> {
    let tagged = split_type(item, "sink", &["file", "stdout", "kafka"], &[])?;
    Ok(match tagged.kind.as_str() {
        "file" => {
            let table = tagged.table;
            let mut c: FileSinkConfig = from_item(table.clone())?;
            let given = c.path.clone();
            c.path = base_dir.join(&c.path);
            if c.path.exists() && !c.path.is_dir() {
                let message = format!(
                    "path {} is not a directory: a file sink writes its files into a directory",
                    given.display()
                );
                return Err(locate(&table, InvalidField::new("path", message)));
            }
            SinkSpec::File(c)
        }
        "stdout" => SinkSpec::Stdout(from_item(tagged.table)?),
        "kafka" => {
            let table = tagged.table;
            let mut c: KafkaSinkConfig = from_item(table.clone())?;
            c.validate().map_err(|e| locate(&table, e))?;
            if let Some(security) = &mut c.security {
                security.resolve_paths(base_dir);
            }
            SinkSpec::Kafka(c)
        }
        _ => {
            return Err(Located::at(
                tagged.kind_span,
                format!("the {} connector is not available yet", tagged.kind),
            ));
        }
    })
}
