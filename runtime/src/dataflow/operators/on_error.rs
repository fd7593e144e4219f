//! `OnError`: what a map or aggregate operator does with a record whose guest call
//! fails on its own. The spec's `on_error` of a step is this value.

use serde::Deserialize;

/// `on_error` of a map or aggregate step: what happens when a guest call fails (a trap,
/// a panic, the call deadline or the memory limit). Either way the call's records are
/// first retried record by record, each alone in a fresh instance, to find the records
/// that fail on their own (for an aggregate, each (record, window) pair of the call
/// alone with its accumulator).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnError {
    /// The pipeline fails, its error naming the first record that fails alone (its
    /// index and key); it restarts from its last checkpoint.
    #[default]
    Fail,
    /// Each record that fails alone goes to the dead-letter output with the error as
    /// its reason; the others' output is emitted in input order.
    DeadLetter,
}
