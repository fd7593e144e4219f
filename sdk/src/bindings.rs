//! The generated wit-bindgen bindings of both worlds, and their conversion to and from
//! the SDK's own framing types. Guest authors never see this module.
//!
//! `wit_bindgen::generate!` emits the canonical-ABI glue, which is `unsafe` code: this
//! module is the one place in weir-guest allowed to contain it (see `#[allow]` in
//! lib.rs). Both worlds are generated with `pub_export_macro`, so each world's exports
//! are only described (custom section) and defined by the `export_*!` macro that the
//! `#[map]` / `#[aggregate]` attribute expands to in the guest crate: a mapper does not
//! have to define the aggregator's exports, and vice versa.

/// The `fused-aggregator` world (the `aggregator` world plus the fused
/// `update-and-emit`, which the host calls for unwindowed aggregates); it also owns the
/// shared `types`, `log` and `config` interfaces, which the mapper bindings reuse
/// (`with:` below).
pub mod aggregator {
    wit_bindgen::generate!({
        path: "../wit",
        world: "fused-aggregator",
        pub_export_macro: true,
        export_macro_name: "export_aggregator",
        default_bindings_module: "::weir_guest::__private::aggregator",
        runtime_path: "::weir_guest::__private::wit_bindgen::rt",
    });
}

/// The `mapper` world.
pub mod mapper {
    wit_bindgen::generate!({
        path: "../wit",
        world: "mapper",
        pub_export_macro: true,
        export_macro_name: "export_mapper",
        default_bindings_module: "::weir_guest::__private::mapper",
        runtime_path: "::weir_guest::__private::wit_bindgen::rt",
        with: {
            "weir:transform/types@0.1.0": crate::bindings::aggregator::weir::transform::types,
            "weir:transform/log@0.1.0": crate::bindings::aggregator::weir::transform::log,
            "weir:transform/config@0.1.0": crate::bindings::aggregator::weir::transform::config,
        },
    });
}

use aggregator::exports::weir::transform::aggregate as wit_aggregate;
use aggregator::exports::weir::transform::update_and_emit as wit_update_and_emit;
use aggregator::weir::transform::types as wit_types;
use mapper::exports::weir::transform::map as wit_map;

pub use aggregator::exports::weir::transform::aggregate::Guest as AggregateGuest;
pub use mapper::exports::weir::transform::map::Guest as MapGuest;
pub use wit_aggregate::UpdateOutput as WitUpdateOutput;
pub use wit_aggregate::{EmitBatch as WitEmitBatch, GroupBatch as WitGroupBatch};
pub use wit_map::MapOutput as WitMapOutput;
pub use wit_types::RecordBatch as WitRecordBatch;
pub use wit_update_and_emit::Guest as UpdateAndEmitGuest;
pub use wit_update_and_emit::UpdateAndEmitOutput as WitUpdateAndEmitOutput;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Window;
use crate::aggregator::{EmitBatch, GroupBatch, UpdateOutput};
use crate::framing::Batch;
use crate::mapper::Rejection;

impl From<wit_types::RecordBatch> for Batch {
    fn from(b: wit_types::RecordBatch) -> Self {
        Self {
            timestamps: b.timestamps,
            key_ends: b.key_ends,
            keys: b.keys,
            value_ends: b.value_ends,
            values: b.values,
        }
    }
}

impl From<Batch> for wit_types::RecordBatch {
    fn from(b: Batch) -> Self {
        Self {
            timestamps: b.timestamps,
            key_ends: b.key_ends,
            keys: b.keys,
            value_ends: b.value_ends,
            values: b.values,
        }
    }
}

impl From<Rejection> for wit_types::Rejection {
    fn from(r: Rejection) -> Self {
        Self {
            index: r.index,
            reason: r.reason,
        }
    }
}

fn rejections(rejections: Vec<Rejection>) -> Vec<wit_types::Rejection> {
    rejections.into_iter().map(Into::into).collect()
}

impl From<wit_aggregate::GroupBatch> for GroupBatch {
    fn from(g: wit_aggregate::GroupBatch) -> Self {
        Self {
            accumulator_ends: g.accumulator_ends,
            accumulators: g.accumulators,
            record_ends: g.record_ends,
            records: g.records.into(),
        }
    }
}

impl From<UpdateOutput> for wit_aggregate::UpdateOutput {
    fn from(u: UpdateOutput) -> Self {
        Self {
            accumulator_ends: u.accumulator_ends,
            accumulators: u.accumulators,
            rejections: rejections(u.rejections),
        }
    }
}

impl From<wit_aggregate::EmitBatch> for EmitBatch {
    fn from(e: wit_aggregate::EmitBatch) -> Self {
        Self {
            key_ends: e.key_ends,
            keys: e.keys,
            windows: e
                .windows
                .into_iter()
                .map(|w| {
                    w.map(|w| Window {
                        start: w.start,
                        end: w.end,
                    })
                })
                .collect(),
            accumulator_ends: e.accumulator_ends,
            accumulators: e.accumulators,
        }
    }
}

/// Body of the `map` export for the user function `f`.
pub fn map<Form, F>(batch: wit_types::RecordBatch, f: F) -> wit_map::MapOutput
where
    F: crate::mapper::MapFunction<Form>,
{
    let (records, rejected) = crate::mapper::run_map(&batch.into(), f);
    wit_map::MapOutput {
        records: records.into(),
        rejections: rejections(rejected),
    }
}

/// Body of the `update` export for the user function `f`.
pub fn update<A, Form, F>(groups: wit_aggregate::GroupBatch, f: F) -> wit_aggregate::UpdateOutput
where
    A: Default + Serialize + DeserializeOwned,
    F: crate::aggregator::UpdateFunction<A, Form>,
{
    crate::aggregator::run_update(&groups.into(), f).into()
}

/// Body of the `update-and-emit` export for the user functions `f` (update) and `emit`.
pub fn update_and_emit<A, UpdateForm, F, EmitForm, E>(
    groups: wit_aggregate::GroupBatch,
    f: F,
    emit: E,
) -> wit_update_and_emit::UpdateAndEmitOutput
where
    A: Default + Serialize + DeserializeOwned,
    F: crate::aggregator::UpdateFunction<A, UpdateForm>,
    E: crate::aggregator::EmitFunction<A, EmitForm>,
{
    let (update, records) = crate::aggregator::run_update_and_emit(&groups.into(), f, emit);
    wit_update_and_emit::UpdateAndEmitOutput {
        accumulator_ends: update.accumulator_ends,
        accumulators: update.accumulators,
        rejections: rejections(update.rejections),
        records: records.into(),
    }
}

/// Body of the `emit` export for the user function `f`.
pub fn emit<A, Form, F>(entries: wit_aggregate::EmitBatch, f: F) -> wit_types::RecordBatch
where
    A: Default + DeserializeOwned,
    F: crate::aggregator::EmitFunction<A, Form>,
{
    crate::aggregator::run_emit(&entries.into(), f).into()
}

#[cfg(target_arch = "wasm32")]
pub(crate) fn log(level: crate::log::Level, message: &str) {
    use aggregator::weir::transform::log::{Level as L, log};
    let level = match level {
        crate::log::Level::Trace => L::Trace,
        crate::log::Level::Debug => L::Debug,
        crate::log::Level::Info => L::Info,
        crate::log::Level::Warn => L::Warn,
        crate::log::Level::Error => L::Error,
    };
    log(level, message);
}

#[cfg(target_arch = "wasm32")]
pub(crate) fn config(name: &str) -> Option<String> {
    aggregator::weir::transform::config::get(name)
}
