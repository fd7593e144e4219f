//! `[[sources]]`: where records come from. Each connector owns its config struct (in
//! `connector/`); this file picks it by `type` and resolves its paths.
//!
//! Invariants after parsing: file paths are absolute (relative ones are resolved
//! against the spec file's directory); each config passed its connector's `validate`;
//! at most one source reads stdin; a kafka source names its topic(s) and, once the
//! pipeline is parsed, its consumer group (default `weir.<pipeline>`).

use std::path::Path;
use std::time::Duration;

use crate::connector::kafka::KafkaSourceConfig;
use crate::connector::{FileSourceConfig, GeneratorConfig, StdinSourceConfig};
use crate::field::units::HumanDuration;
use crate::spec::error::Located;
use crate::spec::tagged::{Item, from_item, locate, split_type, take};

#[derive(Debug, Clone, PartialEq)]
pub struct SourceSpec {
    pub config: SourceConfig,
    /// Bounded out-of-orderness for this source's watermarks (`out_of_orderness`,
    /// accepted on every source type, default 0ms).
    pub out_of_orderness: Duration,
}

/// One variant per `type`. Adding a connector: a variant, its config struct in
/// `connector/`, a branch in `parse_source` and one in `pipeline::sources::open_source`.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceConfig {
    Generator(GeneratorConfig),
    File(FileSourceConfig),
    Stdin(StdinSourceConfig),
    /// Partitions of Kafka topics, read_committed.
    Kafka(KafkaSourceConfig),
}

impl SourceConfig {
    /// The spec's `type` value.
    pub fn type_name(&self) -> &'static str {
        match self {
            SourceConfig::Generator(_) => "generator",
            SourceConfig::File(_) => "file",
            SourceConfig::Stdin(_) => "stdin",
            SourceConfig::Kafka(_) => "kafka",
        }
    }

    /// Whether the source can replay its input from a checkpoint (stdin cannot).
    pub fn is_replayable(&self) -> bool {
        !matches!(self, SourceConfig::Stdin(_))
    }
}

pub(crate) fn parse_source(item: Item<'_>, base_dir: &Path) -> Result<SourceSpec, Located> {
    let mut tagged = split_type(
        item,
        "source",
        &["generator", "file", "stdin", "kafka"],
        &[],
    )?;
    let out_of_orderness = match take(&mut tagged.table, "out_of_orderness") {
        Some(v) => {
            from_item::<HumanDuration>(v)
                .map_err(|e| prefix("out_of_orderness", e))?
                .0
        }
        None => Duration::ZERO,
    };
    let table = tagged.table;
    let config = match tagged.kind.as_str() {
        "generator" => {
            let c: GeneratorConfig = from_item(table.clone())?;
            c.validate().map_err(|e| locate(&table, e))?;
            SourceConfig::Generator(c)
        }
        "file" => {
            let mut c: FileSourceConfig = from_item(table.clone())?;
            c.validate().map_err(|e| locate(&table, e))?;
            c.path = base_dir.join(&c.path);
            SourceConfig::File(c)
        }
        "stdin" => {
            let c: StdinSourceConfig = from_item(table.clone())?;
            c.validate().map_err(|e| locate(&table, e))?;
            SourceConfig::Stdin(c)
        }
        "kafka" => {
            let mut c: KafkaSourceConfig = from_item(table.clone())?;
            c.validate().map_err(|e| locate(&table, e))?;
            if let Some(security) = &mut c.security {
                security.resolve_paths(base_dir);
            }
            SourceConfig::Kafka(c)
        }
        _ => {
            return Err(Located::at(
                tagged.kind_span,
                format!("the {} connector is not available yet", tagged.kind),
            ));
        }
    };
    Ok(SourceSpec {
        config,
        out_of_orderness,
    })
}

/// Names the key of a value deserialized on its own (toml only names keys of tables).
pub(crate) fn prefix(key: &str, mut e: Located) -> Located {
    e.message = format!("{key}: {}", e.message);
    e
}
