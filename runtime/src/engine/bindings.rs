//! Host bindings generated from `wit/weir.wit`, and the moves between the generated
//! types and the crate's own.
//!
//! Invariants:
//! - The two worlds share one set of generated `types`, `log` and `config` modules
//!   (the aggregator bindings reuse the mapper's through `with`), so one `HostState`
//!   implements each host trait once.
//! - Converting a [`RecordBatch`] to or from the generated `record-batch` moves the five
//!   vectors; nothing is copied per record. Framing is NOT checked here: output from a
//!   guest is validated by the instance wrappers before it leaves the engine.

use crate::record::batch::RecordBatch;

pub(crate) mod mapper {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "mapper",
    });
}

pub(crate) mod aggregator {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "aggregator",
        with: {
            "weir:transform/types": super::mapper::weir::transform::types,
            "weir:transform/log": super::mapper::weir::transform::log,
            "weir:transform/config": super::mapper::weir::transform::config,
        },
    });
}

/// The result of the optional fused `update-and-emit` (interface `update-and-emit`).
/// Declared here rather than generated: the host calls that function with the
/// `aggregator` world's `group-batch`, so this record is all it needs of world
/// `fused-aggregator`. Its WIT type is checked against the guest's at load.
#[derive(Debug, wasmtime::component::ComponentType, wasmtime::component::Lift)]
#[component(record)]
pub(crate) struct WitUpdateAndEmitOutput {
    #[component(name = "accumulator-ends")]
    pub accumulator_ends: Vec<u32>,
    pub accumulators: Vec<u8>,
    pub rejections: Vec<wit_types::Rejection>,
    pub records: wit_types::RecordBatch,
}

pub(crate) use mapper::weir::transform::{
    config as wit_config, log as wit_log, types as wit_types,
};

impl From<RecordBatch> for wit_types::RecordBatch {
    fn from(b: RecordBatch) -> Self {
        let RecordBatch {
            timestamps,
            key_ends,
            keys,
            value_ends,
            values,
        } = b;
        Self {
            timestamps,
            key_ends,
            keys,
            value_ends,
            values,
        }
    }
}

impl From<wit_types::RecordBatch> for RecordBatch {
    fn from(b: wit_types::RecordBatch) -> Self {
        let wit_types::RecordBatch {
            timestamps,
            key_ends,
            keys,
            value_ends,
            values,
        } = b;
        Self {
            timestamps,
            key_ends,
            keys,
            value_ends,
            values,
        }
    }
}
