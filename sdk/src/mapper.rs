//! The `map` export: one call per batch, the user function once per record.

use crate::framing::Batch;
use crate::output::IntoRecords;
use crate::{Error, Record};

/// A refused input record: its position in the input batch and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub index: u32,
    pub reason: String,
}

impl Rejection {
    pub(crate) fn new(index: usize, error: Error) -> Self {
        // The input batch's length came in a `list<s64>`, but its indices are `u32` in
        // the contract; a batch of 2^32 records cannot fit a guest's memory.
        let index = u32::try_from(index)
            .unwrap_or_else(|_| panic!("weir-guest: record index {index} exceeds u32"));
        Self {
            index,
            reason: error.into_message(),
        }
    }
}

/// Runs `f` over every record of `input`, in order: its `Ok` output records are
/// appended to the output batch, its `Err` becomes a rejection of that input record.
pub fn run_map<F, O>(input: &Batch, mut f: F) -> (Batch, Vec<Rejection>)
where
    F: FnMut(Record) -> Result<O, Error>,
    O: IntoRecords,
{
    // Most maps emit about one record per input of about its size.
    let mut output = Batch::with_capacity(input.len(), input.keys.len(), input.values.len());
    let mut rejections = Vec::new();
    for (index, (key, value, timestamp)) in input.iter().enumerate() {
        let record = Record {
            key: key.to_vec(),
            value: value.to_vec(),
            timestamp,
        };
        match f(record) {
            Ok(records) => records.push_into(&mut output),
            Err(error) => rejections.push(Rejection::new(index, error)),
        }
    }
    (output, rejections)
}

#[cfg(test)]
mod tests;
