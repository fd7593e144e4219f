//! The `map` export: one call per batch, the user function once per record.
//!
//! Invariants: the input batch is read in place (a `RecordRef` per record, copied into a
//! `Record` only for the owned form); the output is written into one batch allocated
//! once per call with the input's sizes; an input record's output and its rejection are
//! exclusive (on `Err`, what it emitted is truncated away), and rejections are in input
//! order with each index once.

use crate::emitter::Emitter;
use crate::framing::Batch;
use crate::output::IntoRecords;
use crate::{Error, Record, RecordRef};

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

/// A function the `#[map]` attribute accepts, in one of three forms (the `Form` type
/// parameter only tells them apart; it is inferred):
///
/// - `fn(Record) -> Result<O>`: the record owned (its key and value copied out of the
///   batch), `O` one of [`IntoRecords`]' types;
/// - `fn(RecordRef<'_>) -> Result<O>`: the record borrowed from the batch, no copy;
/// - `fn(RecordRef<'_>, &mut Emitter<'_>) -> Result<()>`: borrowed in, and written
///   straight into the output batch.
///
/// In every form `Err` refuses that input record and it contributes no output.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a weir map function",
    note = "a map function is `fn(Record) -> Result<O>` or `fn(RecordRef<'_>) -> Result<O>` \
            with `O` = `Record`, `Option<Record>` or `Vec<Record>`, or \
            `fn(RecordRef<'_>, &mut Emitter<'_>) -> Result<()>`"
)]
pub trait MapFunction<Form> {
    /// Maps one record into `out`; `Err` refuses it (the caller discards its output).
    fn call(&mut self, record: RecordRef<'_>, out: &mut Emitter<'_>) -> Result<(), Error>;
}

/// Marks the `fn(Record) -> Result<O>` form.
#[derive(Debug)]
pub struct Owned<O>(core::marker::PhantomData<O>);
/// Marks the `fn(RecordRef<'_>) -> Result<O>` form.
#[derive(Debug)]
pub struct Borrowed<O>(core::marker::PhantomData<O>);
/// Marks the `fn(RecordRef<'_>, &mut Emitter<'_>) -> Result<()>` form.
#[derive(Debug)]
pub struct Emitting;

impl<F, O> MapFunction<Owned<O>> for F
where
    F: FnMut(Record) -> Result<O, Error>,
    O: IntoRecords,
{
    fn call(&mut self, record: RecordRef<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        self(record.to_owned()).map(|records| out.extend(records))
    }
}

impl<F, O> MapFunction<Borrowed<O>> for F
where
    F: for<'a> FnMut(RecordRef<'a>) -> Result<O, Error>,
    O: IntoRecords,
{
    fn call(&mut self, record: RecordRef<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        self(record).map(|records| out.extend(records))
    }
}

impl<F> MapFunction<Emitting> for F
where
    F: for<'a, 'e, 'b> FnMut(RecordRef<'a>, &'e mut Emitter<'b>) -> Result<(), Error>,
{
    fn call(&mut self, record: RecordRef<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        self(record, out)
    }
}

/// Runs `f` over every record of `input`, in order: what it emits is appended to the
/// output batch, its `Err` becomes a rejection of that input record and drops whatever
/// it had emitted for it.
pub fn run_map<Form, F>(input: &Batch, mut f: F) -> (Batch, Vec<Rejection>)
where
    F: MapFunction<Form>,
{
    // Most maps emit about one record per input of about its size.
    let mut output = Batch::with_capacity(input.len(), input.keys.len(), input.values.len());
    let mut rejections = Vec::new();
    let mut out = Emitter::new(&mut output);
    for (index, (key, value, timestamp)) in input.iter().enumerate() {
        let record = RecordRef {
            key,
            value,
            timestamp,
        };
        let mark = out.mark();
        if let Err(error) = f.call(record, &mut out) {
            out.truncate(mark);
            rejections.push(Rejection::new(index, error));
        }
    }
    (output, rejections)
}

#[cfg(test)]
mod tests;
