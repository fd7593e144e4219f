//! `[[steps]]`: the guest steps between sources and sinks, in order.
//!
//! Invariants after parsing: `module` is an absolute path to an existing file; a window
//! has positive sizes, a hopping window's slide divides its size and puts a record in
//! at most [`MAX_WINDOWS_PER_RECORD`] windows (size / slide); `allowed_lateness` is
//! zero unless there is a window; step names, when given, are unique.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::dataflow::operators::OnError;
use crate::dataflow::window::MAX_WINDOWS_PER_RECORD;
use crate::field::checks;
use crate::field::units::{self, HumanDuration, format_duration};
use crate::spec::error::Located;
use crate::spec::tagged::{Item, from_item, split_type};

/// Default bound on the accumulators cached in memory per aggregate subtask, in
/// entries: none of its own (the byte bound, [`DEFAULT_CACHE_BYTES`], binds).
pub const DEFAULT_CACHE_ENTRIES: usize = crate::state::DEFAULT_CACHE_CAPACITY;
/// Default bytes of accumulators (keys and per-entry overhead included) cached in memory
/// per aggregate subtask: 64 MiB.
pub const DEFAULT_CACHE_BYTES: usize = crate::state::DEFAULT_CACHE_BYTES;
/// Default largest accumulator a guest may return: 1 MiB. Every accumulator of a batch's
/// groups is copied into one guest call and held in the cache, so this bounds both; a
/// guest that needs more keeps too much per key.
pub const DEFAULT_MAX_ACCUMULATOR_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepSpec {
    /// `type = "map"`: map, filter and flat-map in one guest call per batch.
    Map(MapStep),
    /// `type = "aggregate"`: key-by, then a keyed (optionally windowed) aggregate.
    Aggregate(AggregateStep),
}

impl StepSpec {
    pub fn name(&self) -> Option<&str> {
        match self {
            StepSpec::Map(s) => s.name.as_deref(),
            StepSpec::Aggregate(s) => s.name.as_deref(),
        }
    }

    /// Absolute path of the guest component.
    pub fn module(&self) -> &Path {
        match self {
            StepSpec::Map(s) => &s.module,
            StepSpec::Aggregate(s) => &s.module,
        }
    }

    /// The string map handed to the guest.
    pub fn config(&self) -> &BTreeMap<String, String> {
        match self {
            StepSpec::Map(s) => &s.config,
            StepSpec::Aggregate(s) => &s.config,
        }
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            StepSpec::Map(_) => "map",
            StepSpec::Aggregate(_) => "aggregate",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapStep {
    pub name: Option<String>,
    pub module: PathBuf,
    pub config: BTreeMap<String, String>,
    /// What a record whose call fails on its own does (see `OnError`).
    pub on_error: OnError,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregateStep {
    pub name: Option<String>,
    pub module: PathBuf,
    /// Key by this top-level JSON field of the value instead of the record's key
    /// (rendered as `connector::record_format::json_field_key` does).
    pub key_field: Option<String>,
    pub window: Option<WindowSpec>,
    /// Zero without a window.
    pub allowed_lateness: Duration,
    pub cache_entries: usize,
    /// Bytes of cached accumulators per subtask (keys and overhead included).
    pub cache_bytes: usize,
    /// Largest accumulator the guest may return; a larger one fails the pipeline.
    pub max_accumulator_bytes: usize,
    pub config: BTreeMap<String, String>,
    /// What a record whose update call fails on its own does (see `OnError`).
    pub on_error: OnError,
}

/// An event-time window, assigned by the runtime from the record timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawWindow")]
pub enum WindowSpec {
    Tumbling {
        size: Duration,
    },
    /// Windows of `size` starting every `slide`; `slide` divides `size`.
    Hopping {
        size: Duration,
        slide: Duration,
    },
}

impl WindowSpec {
    pub fn size(&self) -> Duration {
        match *self {
            WindowSpec::Tumbling { size } | WindowSpec::Hopping { size, .. } => size,
        }
    }

    /// The distance between window starts (the size, for tumbling windows).
    pub fn slide(&self) -> Duration {
        match *self {
            WindowSpec::Tumbling { size } => size,
            WindowSpec::Hopping { slide, .. } => slide,
        }
    }
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
enum RawWindow {
    Tumbling {
        #[serde(deserialize_with = "units::positive_duration")]
        size: Duration,
    },
    Hopping {
        #[serde(deserialize_with = "units::positive_duration")]
        size: Duration,
        #[serde(deserialize_with = "units::positive_duration")]
        slide: Duration,
    },
}

impl TryFrom<RawWindow> for WindowSpec {
    type Error = String;

    fn try_from(raw: RawWindow) -> Result<Self, String> {
        Ok(match raw {
            RawWindow::Tumbling { size } => WindowSpec::Tumbling { size },
            RawWindow::Hopping { size, slide } => {
                if slide > size {
                    return Err(format!(
                        "hopping window slide {} is longer than its size {}",
                        format_duration(slide),
                        format_duration(size)
                    ));
                }
                if !size.as_millis().is_multiple_of(slide.as_millis()) {
                    return Err(format!(
                        "hopping window slide {} must divide its size {}",
                        format_duration(slide),
                        format_duration(size)
                    ));
                }
                let windows = size.as_millis() / slide.as_millis();
                if windows > MAX_WINDOWS_PER_RECORD {
                    let min_slide = size.as_millis().div_ceil(MAX_WINDOWS_PER_RECORD);
                    return Err(format!(
                        "hopping window size {} and slide {} put every record in {windows} windows; \
                         at most {MAX_WINDOWS_PER_RECORD} are allowed: make slide at least {}",
                        format_duration(size),
                        format_duration(slide),
                        format_duration(Duration::from_millis(
                            u64::try_from(min_slide).unwrap_or(u64::MAX)
                        )),
                    ));
                }
                WindowSpec::Hopping { size, slide }
            }
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMap {
    #[serde(default, deserialize_with = "checks::step_name")]
    name: Option<Spanned<String>>,
    #[serde(deserialize_with = "checks::spanned_path")]
    module: Spanned<PathBuf>,
    #[serde(default)]
    config: BTreeMap<String, String>,
    #[serde(default)]
    on_error: OnError,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAggregate {
    #[serde(default, deserialize_with = "checks::step_name")]
    name: Option<Spanned<String>>,
    #[serde(deserialize_with = "checks::spanned_path")]
    module: Spanned<PathBuf>,
    #[serde(default)]
    key_field: Option<Spanned<String>>,
    #[serde(default)]
    window: Option<WindowSpec>,
    #[serde(default)]
    allowed_lateness: Option<Spanned<HumanDuration>>,
    #[serde(
        default = "default_cache_entries",
        deserialize_with = "checks::cache_entries"
    )]
    cache_entries: usize,
    #[serde(
        default = "default_cache_bytes",
        deserialize_with = "checks::cache_bytes"
    )]
    cache_bytes: usize,
    #[serde(
        default = "default_max_accumulator_bytes",
        deserialize_with = "checks::max_accumulator_bytes"
    )]
    max_accumulator_bytes: usize,
    #[serde(default)]
    config: BTreeMap<String, String>,
    #[serde(default)]
    on_error: OnError,
}

fn default_cache_entries() -> usize {
    DEFAULT_CACHE_ENTRIES
}
fn default_cache_bytes() -> usize {
    DEFAULT_CACHE_BYTES
}
fn default_max_accumulator_bytes() -> usize {
    DEFAULT_MAX_ACCUMULATOR_BYTES
}

/// A parsed step with the places of its name, for the uniqueness check.
pub(crate) struct ParsedStep {
    pub step: StepSpec,
    pub name: Option<Spanned<String>>,
}

pub(crate) fn parse_step(item: Item<'_>, base_dir: &Path) -> Result<ParsedStep, Located> {
    let tagged = split_type(item, "step", &["map", "aggregate"], &[])?;
    if tagged.kind == "map" {
        let raw: RawMap = from_item(tagged.table)?;
        let module = resolve_module(&raw.module, base_dir)?;
        Ok(ParsedStep {
            step: StepSpec::Map(MapStep {
                name: raw.name.as_ref().map(|n| n.get_ref().clone()),
                module,
                config: raw.config,
                on_error: raw.on_error,
            }),
            name: raw.name,
        })
    } else {
        let raw: RawAggregate = from_item(tagged.table)?;
        let module = resolve_module(&raw.module, base_dir)?;
        if let Some(field) = &raw.key_field
            && field.get_ref().is_empty()
        {
            return Err(Located::at(field.span(), "key_field must not be empty"));
        }
        let allowed_lateness = match (&raw.allowed_lateness, &raw.window) {
            (None, _) => Duration::ZERO,
            (Some(l), Some(_)) => l.get_ref().0,
            (Some(l), None) => {
                return Err(Located::at(
                    l.span(),
                    "allowed_lateness needs a window: add window = { type = ..., size = ... }",
                ));
            }
        };
        Ok(ParsedStep {
            step: StepSpec::Aggregate(AggregateStep {
                name: raw.name.as_ref().map(|n| n.get_ref().clone()),
                module,
                key_field: raw.key_field.map(Spanned::into_inner),
                window: raw.window,
                allowed_lateness,
                cache_entries: raw.cache_entries,
                cache_bytes: raw.cache_bytes,
                max_accumulator_bytes: raw.max_accumulator_bytes,
                config: raw.config,
                on_error: raw.on_error,
            }),
            name: raw.name,
        })
    }
}

fn resolve_module(module: &Spanned<PathBuf>, base_dir: &Path) -> Result<PathBuf, Located> {
    let path = base_dir.join(module.get_ref());
    if !path.is_file() {
        return Err(Located::at(
            module.span(),
            format!(
                "module {} not found (looked for {})",
                module.get_ref().display(),
                path.display()
            ),
        ));
    }
    Ok(path)
}
