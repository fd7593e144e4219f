//! A pipeline as N workers (see DESIGN.md, "Beyond one machine"): which worker a
//! process is (`Worker`, from `--worker I/N`), which source partitions and key groups
//! each worker owns (`assignment`) in key-group ranges (`key_group_ranges`, also the
//! partitions of a repartition topic), which layout of workers is current (`layout`), and
//! where a new worker restores each unit from after a rescale (`rescale_plan`). A
//! leaf: it depends on no other module, so every floor (spec, connectors, checkpoint,
//! pipeline, CLI) can use it.
pub mod assignment;
pub mod key_group_ranges;
pub mod layout;
pub mod rescale_plan;
pub mod worker;

pub use assignment::{WorkerAssignment, assign};
pub use key_group_ranges::KeyGroupRanges;
pub use layout::{Layout, LayoutChoice, LayoutRefusal, LayoutStamp, ObservedLocation};
pub use rescale_plan::{Provision, RescalePlan};
pub use worker::{Worker, WorkerParseError};
