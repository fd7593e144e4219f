//! The `aggregate` exports: `update` folds each group's records into its accumulator,
//! `emit` turns accumulators into output records (written into the one output batch
//! through an [`Emitter`]). One call per batch each; for unwindowed aggregates the host
//! calls the fused `update-and-emit` instead, one call doing both.
//!
//! Accumulators are the user's type serialised with postcard; an EMPTY byte string is
//! the contract's "no accumulator yet" and decodes as `A::default()`. A group whose
//! records were all refused (or that had none) gets its input accumulator back byte for
//! byte, so "none yet" stays empty and a refused record never changes state.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::emitter::Emitter;
use crate::framing::{self, Batch};
use crate::mapper::{Emitting, Rejection};
use crate::output::{IntoRecords, UpdateResult};
use crate::{Error, Record, RecordRef, Window};

/// The contract's `group-batch`, owned.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GroupBatch {
    pub accumulator_ends: Vec<u32>,
    pub accumulators: Vec<u8>,
    pub record_ends: Vec<u32>,
    pub records: Batch,
}

/// The contract's `update-output`, owned.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UpdateOutput {
    pub accumulator_ends: Vec<u32>,
    pub accumulators: Vec<u8>,
    pub rejections: Vec<Rejection>,
}

/// The contract's `emit-batch`, owned.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EmitBatch {
    pub key_ends: Vec<u32>,
    pub keys: Vec<u8>,
    pub windows: Vec<Option<Window>>,
    pub accumulator_ends: Vec<u32>,
    pub accumulators: Vec<u8>,
}

/// An aggregate's update function over accumulator `A`, in one of two forms:
///
/// - `fn(&mut A, &Record) -> R`: each record is first copied into a `Record` (one
///   scratch `Record`, refilled per record: no allocation once its buffers have grown);
/// - `fn(&mut A, RecordRef<'_>) -> R`: each record is read in place, nothing copied.
///
/// `R` is `()` or `Result<()>`. `Form` only tells the two apart; it is inferred.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a weir update function for this accumulator",
    note = "an update function is `fn(&mut Acc, &Record)` or `fn(&mut Acc, RecordRef<'_>)`, \
            returning `()` or `Result<()>`"
)]
pub trait UpdateFunction<A, Form> {
    /// Folds `record` into `acc`; `scratch` is the SDK's buffer for the owned form.
    fn call(
        &mut self,
        acc: &mut A,
        record: RecordRef<'_>,
        scratch: &mut Record,
    ) -> Result<(), Error>;
}

/// Marks the update form taking `&Record`.
#[derive(Debug)]
pub struct ByRecord<R>(core::marker::PhantomData<R>);

/// Marks the update form taking `RecordRef<'_>`.
#[derive(Debug)]
pub struct ByRef<R>(core::marker::PhantomData<R>);

impl<A, F, R> UpdateFunction<A, ByRecord<R>> for F
where
    F: FnMut(&mut A, &Record) -> R,
    R: UpdateResult,
{
    fn call(
        &mut self,
        acc: &mut A,
        record: RecordRef<'_>,
        scratch: &mut Record,
    ) -> Result<(), Error> {
        scratch.key.clear();
        scratch.key.extend_from_slice(record.key);
        scratch.value.clear();
        scratch.value.extend_from_slice(record.value);
        scratch.timestamp = record.timestamp;
        self(acc, scratch).into_result()
    }
}

impl<A, F, R> UpdateFunction<A, ByRef<R>> for F
where
    F: for<'r> FnMut(&mut A, RecordRef<'r>) -> R,
    R: UpdateResult,
{
    fn call(&mut self, acc: &mut A, record: RecordRef<'_>, _: &mut Record) -> Result<(), Error> {
        self(acc, record).into_result()
    }
}

/// Folds each group's records, in order, into the group's accumulator with `f`.
///
/// A record for which `f` returns `Err` is a rejection (index into `groups.records`).
/// `f` must leave the accumulator untouched when it refuses a record: the SDK does not
/// snapshot it (that would cost a clone per record).
pub fn run_update<A, Form, F>(groups: &GroupBatch, f: F) -> UpdateOutput
where
    A: Default + Serialize + DeserializeOwned,
    F: UpdateFunction<A, Form>,
{
    fold_groups(groups, f, |_, _: &A, _| {})
}

/// The fused `update-and-emit`: [`run_update`] with `f`, and for every group whose new
/// accumulator is not empty, what [`run_emit`] with `emit` returns for it (the group's
/// key, no window), from the accumulator already in hand: no second call, no second
/// decode.
pub fn run_update_and_emit<A, UpdateForm, F, EmitForm, E>(
    groups: &GroupBatch,
    f: F,
    mut emit: E,
) -> (UpdateOutput, Batch)
where
    A: Default + Serialize + DeserializeOwned,
    F: UpdateFunction<A, UpdateForm>,
    E: EmitFunction<A, EmitForm>,
{
    let mut records = Batch::with_capacity(groups.record_ends.len(), groups.records.keys.len(), 0);
    let mut out = Emitter::new(&mut records);
    let update = fold_groups(groups, f, |key, acc, bytes| {
        if !bytes.is_empty() {
            emit.call(key, None, acc, &mut out);
        }
    });
    (update, records)
}

/// The loop of [`run_update`]: after each group, `then(key, accumulator, its bytes)`
/// with the group's key (its first record's), the new accumulator and its serialised
/// bytes as returned (empty: still "none yet").
fn fold_groups<A, Form, F>(
    groups: &GroupBatch,
    mut f: F,
    mut then: impl FnMut(&[u8], &A, &[u8]),
) -> UpdateOutput
where
    A: Default + Serialize + DeserializeOwned,
    F: UpdateFunction<A, Form>,
{
    let group_count = groups.record_ends.len();
    assert!(
        groups.accumulator_ends.len() == group_count,
        "weir-guest: malformed group-batch from the host: {} accumulators for {group_count} \
         groups",
        groups.accumulator_ends.len(),
    );
    let record_count = groups.records.len();
    assert!(
        groups.record_ends.last().map_or(0, |&end| end as usize) == record_count,
        "weir-guest: malformed group-batch from the host: the groups do not cover all \
         {record_count} records",
    );
    // Groups are contiguous and in order (checked by `ranges`), so one pass suffices.
    let mut records = groups.records.iter();
    let mut output = UpdateOutput {
        accumulator_ends: Vec::with_capacity(group_count),
        // Accumulators usually keep about their size.
        accumulators: Vec::with_capacity(groups.accumulators.len() + 8 * group_count),
        rejections: Vec::new(),
    };
    // The owned form's scratch record (see `UpdateFunction`).
    let mut scratch = Record::default();
    let accumulators = framing::frames(
        &groups.accumulator_ends,
        &groups.accumulators,
        "accumulators",
    );
    let ranges = framing::ranges(&groups.record_ends, record_count, "record-ends");
    for (bytes, range) in accumulators.zip(ranges) {
        let mut acc: A = decode(bytes, || "a group of this batch".to_owned());
        let mut changed = false;
        // The group's key: its records' (borrowed from the input; none: empty).
        let mut key: &[u8] = &[];
        for (index, (record_key, value, timestamp)) in range.zip(records.by_ref()) {
            key = record_key;
            let record = RecordRef {
                key: record_key,
                value,
                timestamp,
            };
            match f.call(&mut acc, record, &mut scratch) {
                Ok(()) => changed = true,
                Err(error) => output.rejections.push(Rejection::new(index, error)),
            }
        }
        if changed {
            let start = output.accumulators.len();
            output.accumulators =
                postcard::to_extend(&acc, core::mem::take(&mut output.accumulators))
                    .unwrap_or_else(|e| {
                        panic!(
                            "weir-guest: accumulator {} does not serialise with postcard: {e}",
                            core::any::type_name::<A>()
                        )
                    });
            framing::end_frame(&mut output.accumulator_ends, &output.accumulators);
            then(key, &acc, &output.accumulators[start..]);
        } else {
            framing::push_frame(
                &mut output.accumulator_ends,
                &mut output.accumulators,
                bytes,
            );
            then(key, &acc, bytes);
        }
    }
    output
}

/// An aggregate's `emit` function over accumulator `A`, in one of two forms:
///
/// - `fn(&[u8], Option<Window>, &A) -> O` with `O` = `Record`, `Option<Record>` or
///   `Vec<Record>`: the records are built, then copied into the output batch;
/// - `fn(&[u8], Option<Window>, &A, &mut Emitter<'_>)`: written straight into the
///   output batch (no `Record`, no allocation of the SDK's own per entry).
///
/// `Form` only tells the two apart; it is inferred.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a weir emit function for this accumulator",
    note = "an emit function is `fn(&[u8], Option<Window>, &Acc) -> O` with `O` = `Record`, \
            `Option<Record>` or `Vec<Record>`, or \
            `fn(&[u8], Option<Window>, &Acc, &mut Emitter<'_>)`, over the update's accumulator"
)]
pub trait EmitFunction<A, Form> {
    /// Emits what the accumulator `acc` of (`key`, `window`) turns into, into `out`.
    fn call(&mut self, key: &[u8], window: Option<Window>, acc: &A, out: &mut Emitter<'_>);
}

/// Marks the form returning records.
#[derive(Debug)]
pub struct Returning<O>(core::marker::PhantomData<O>);

impl<A, F, O> EmitFunction<A, Returning<O>> for F
where
    F: FnMut(&[u8], Option<Window>, &A) -> O,
    O: IntoRecords,
{
    fn call(&mut self, key: &[u8], window: Option<Window>, acc: &A, out: &mut Emitter<'_>) {
        out.extend(self(key, window, acc));
    }
}

impl<A, F> EmitFunction<A, Emitting> for F
where
    F: for<'k, 'a, 'e, 'b> FnMut(&'k [u8], Option<Window>, &'a A, &'e mut Emitter<'b>),
{
    fn call(&mut self, key: &[u8], window: Option<Window>, acc: &A, out: &mut Emitter<'_>) {
        self(key, window, acc, out);
    }
}

/// Turns each entry's accumulator into output records with `f`, in entry order.
pub fn run_emit<A, Form, F>(entries: &EmitBatch, mut f: F) -> Batch
where
    A: Default + DeserializeOwned,
    F: EmitFunction<A, Form>,
{
    let n = entries.windows.len();
    assert!(
        entries.key_ends.len() == n && entries.accumulator_ends.len() == n,
        "weir-guest: malformed emit-batch from the host: {} keys, {n} windows, {} \
         accumulators",
        entries.key_ends.len(),
        entries.accumulator_ends.len(),
    );
    // Typically one small record per entry.
    let mut output = Batch::with_capacity(n, entries.keys.len(), 0);
    let keys = framing::frames(&entries.key_ends, &entries.keys, "keys");
    let accumulators = framing::frames(
        &entries.accumulator_ends,
        &entries.accumulators,
        "accumulators",
    );
    let mut out = Emitter::new(&mut output);
    for ((key, window), bytes) in keys.zip(entries.windows.iter().copied()).zip(accumulators) {
        let acc: A = decode(bytes, || format!("key {:?}", String::from_utf8_lossy(key)));
        f.call(key, window, &acc, &mut out);
    }
    output
}

/// Decodes an accumulator; empty bytes are "none yet", i.e. `A::default()`.
///
/// # Panics
/// If the bytes do not decode as `A`: the state was written by a guest with another
/// accumulator type. Trapping (the pipeline fails and restarts from its checkpoint) is
/// the only answer that neither loses nor silently rewrites that state.
fn decode<A: Default + DeserializeOwned>(bytes: &[u8], whose: impl FnOnce() -> String) -> A {
    if bytes.is_empty() {
        return A::default();
    }
    postcard::from_bytes(bytes).unwrap_or_else(|e| {
        panic!(
            "weir-guest: the accumulator of {} does not decode as {}: {e} (was this state \
             written by another version of the guest?)",
            whose(),
            core::any::type_name::<A>()
        )
    })
}

#[cfg(test)]
mod tests;
