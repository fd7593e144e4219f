//! A pipeline as N workers (see DESIGN.md, "Beyond one machine"): which worker a
//! process is (`Worker`, from `--worker I/N`) and which source partitions and key
//! groups each worker owns (`assignment`). A leaf: it depends on no other module, so
//! every floor (spec, connectors, pipeline, CLI) can use it.
pub mod assignment;
pub mod worker;

pub use assignment::{WorkerAssignment, assign};
pub use worker::{Worker, WorkerParseError};
