//! The pipeline spec: a TOML file describing one pipeline, parsed and validated.
//!
//! [`PipelineSpec::load`] reads a spec file; [`PipelineSpec::parse`] parses text. Either
//! refuses anything it does not understand with one line naming the place and the reason
//! (unknown keys are errors, never ignored), resolves relative paths against the spec
//! file's directory, and returns typed values (`Duration`s, byte counts, absolute paths).
//!
//! What follows is the book's chapter `docs/src/spec-reference.md`, included here so that
//! the two cannot differ.
#![doc = include_str!("../../../docs/src/spec-reference.md")]
mod did_you_mean;
pub mod error;
pub mod pipeline;
pub mod sink;
pub mod source;
pub mod step;
mod tagged;

#[cfg(test)]
mod tests;

pub use error::SpecError;
pub use pipeline::{CheckpointSpec, DeadLetterSpec, GuestLimitsSpec, PipelineSpec};
pub use sink::SinkSpec;
pub use source::{SourceConfig, SourceSpec};
pub use step::{AggregateStep, MapStep, StepSpec, WindowSpec};
