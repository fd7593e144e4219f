//! Write a Weir stream-processing step as one Rust function (Weir is the runtime crate,
//! `weir`, of this workspace; it runs the component this crate helps build).
//!
//! A guest is a `cdylib` crate built for `wasm32-wasip2`: the build output is a
//! WebAssembly component that exports one of the worlds of `weir:transform`
//! (`wit/weir.wit`): `mapper`, or `fused-aggregator` (the `aggregator` world plus the
//! fused `update-and-emit` the runtime calls for unwindowed aggregates). This crate
//! hides that contract: the bindings, the columnar batches and the accumulator bytes. A
//! guest author writes one attributed function.
//!
//! # Map, filter, flat-map
//!
//! ```ignore
//! use weir_guest::{Record, Result};
//!
//! #[weir_guest::map]
//! fn uppercase(mut record: Record) -> Result<Record> {
//!     record.value = record.value_str()?.to_uppercase().into_bytes();
//!     Ok(record)
//! }
//! ```
//!
//! The function takes each input [`Record`] by value and returns `Result<O>` where `O`
//! is a [`Record`] (map), an `Option<Record>` (filter) or a `Vec<Record>` (flat-map,
//! zero or more, in order). `Err(e)` refuses that one record: the runtime routes it to
//! the pipeline's dead-letter output with `e`'s message, and the rest of the batch
//! carries on. A panic, by contrast, traps: the pipeline fails naming the record and
//! restarts from its last checkpoint, unless its step says `on_error = "dead-letter"`
//! (then that record goes to the dead letters with the panic as its reason).
//!
//! A `Record` owns copies of its key and value. To skip that copy, take a
//! [`RecordRef<'_>`](RecordRef) instead, borrowed from the input batch, and return the
//! same `Result<O>`; or take an [`Emitter`] too and write the output straight into the
//! output batch (nothing is copied into or out of a `Record`):
//!
//! ```ignore
//! use weir_guest::{Emitter, RecordRef, Result};
//!
//! #[weir_guest::map]
//! fn uppercase(record: RecordRef<'_>, out: &mut Emitter<'_>) -> Result<()> {
//!     out.emit(record.key, record.value_str()?.to_uppercase(), record.timestamp);
//!     Ok(())
//! }
//! ```
//!
//! In that form `Err` refuses the input record as well and discards whatever the
//! function emitted for it. See [`MapFunction`] for the three forms.
//!
//! # Aggregate
//!
//! ```ignore
//! use serde::{Deserialize, Serialize};
//! use weir_guest::{Record, Window};
//!
//! #[derive(Default, Serialize, Deserialize)]
//! struct Count(u64);
//!
//! #[weir_guest::aggregate(emit = emit_count)]
//! fn count(acc: &mut Count, _record: &Record) {
//!     acc.0 += 1;
//! }
//!
//! fn emit_count(key: &[u8], _window: Option<Window>, acc: &Count) -> Record {
//!     Record::new(key, acc.0.to_string())
//! }
//! ```
//!
//! The update function folds one record into the accumulator of its key (and window):
//! `fn(&mut A, &Record)` or `fn(&mut A, RecordRef<'_>)` (read in place: nothing copied
//! per record; see [`UpdateFunction`]) returning `()` or `Result<()>`, where
//! `A: Default + Serialize + DeserializeOwned` is kept by the runtime between calls
//! (serialised with postcard; a new key starts from `A::default()`). On `Err` the record
//! goes to the dead-letter output and must not have changed the accumulator: check
//! first, then mutate. The `emit` function turns an accumulator into output records when
//! the runtime emits: when a window closes (the runtime then stamps the records with
//! `window.end - 1`), or after each update for an unwindowed aggregate (`window` is
//! `None`). It is `fn(&[u8], Option<Window>, &A) -> O` with `O` as for map, or
//! `fn(&[u8], Option<Window>, &A, &mut Emitter<'_>)` to write straight into the output
//! batch (see [`EmitFunction`]; [`Emitter::capture`] runs either form in a unit test).
//!
//! # Host functions
//!
//! [`log`] writes to the pipeline's log, [`config`] reads the step's configuration.
//! A guest has no files, network, environment or clock worth using: event time comes in
//! [`Record::timestamp`].
//!
//! A guest may import weir's own interfaces and WASI 0.2 (`std::fs` pulls in
//! `wasi:filesystem`, `std::net` `wasi:sockets`), but the runtime grants nothing through
//! them: no directory, no environment variable, no socket, no name lookup; each such call
//! fails with an error the guest can handle. Any other import is refused at load.
//!
//! # Building
//!
//! ```toml
//! [lib]
//! crate-type = ["cdylib"]
//! [dependencies]
//! weir-guest = { path = "../sdk" } # see guest-examples/ for a whole workspace
//! ```
//!
//! `cargo build --release --target wasm32-wasip2` writes the component to
//! `target/wasm32-wasip2/release/<crate>.wasm`. Depend on `weir-guest` under that
//! name: the attributes expand to paths starting with `::weir_guest`.

// Lets the generated code name this crate `::weir_guest` from inside it too.
extern crate self as weir_guest;

// The generated ABI glue is the only `unsafe` code of this crate (see bindings.rs); the
// workspace forbids it everywhere else, and this crate's Cargo.toml denies it.
#[allow(unsafe_code)]
mod bindings;

mod aggregator;
pub mod ascii;
mod config;
mod emitter;
mod error;
mod framing;
pub mod log;
mod mapper;
mod output;
mod record;
mod record_ref;

pub use aggregator::{EmitFunction, UpdateFunction};
pub use config::{config, config_or};
pub use emitter::{Emitter, ValueWriter};
pub use error::{Error, Result};
pub use mapper::MapFunction;
pub use output::{IntoRecords, UpdateResult};
pub use record::{Record, Window};
pub use record_ref::RecordRef;

/// Makes a function the `map` step of this component.
///
/// See the [crate documentation](crate) for the accepted signatures.
pub use weir_guest_macros::map;

/// Makes a function the update of this component's `aggregate` step:
/// `#[aggregate(emit = path::to::emit_fn)]`.
///
/// See the [crate documentation](crate) for the accepted signatures.
pub use weir_guest_macros::aggregate;

/// What the attribute macros expand to. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::bindings::{
        AggregateGuest, MapGuest, UpdateAndEmitGuest, WitEmitBatch, WitGroupBatch, WitMapOutput,
        WitRecordBatch, WitUpdateAndEmitOutput, WitUpdateOutput, aggregator, emit, map, mapper,
        update, update_and_emit,
    };
    pub use crate::framing::Batch;
    pub use wit_bindgen;
}
