//! A pipeline as N workers (docs/src/architecture.md, "Beyond one process"): which worker a
//! process is (`Worker`, from `--worker I/N`), which source partitions and key groups
//! each worker owns (`assignment`) in key-group ranges (`key_group_ranges`, also the
//! partitions of a repartition topic), which layout of workers is current (`layout`), and
//! where a new worker restores each unit from after a rescale (`rescale_plan`). A
//! leaf: it depends on no other module, so every floor (spec, connectors, checkpoint,
//! pipeline, CLI) can use it.
//!
//! The decisions are all here, pure and unit-tested; each floor does its part of the
//! I/O, so the N-worker story reads in this order:
//! 1. `pipeline::worker_plan` (`WorkerPlan::new`): what worker I of N runs, with a
//!    repartition topic and its reader per keyed step, or a refusal.
//! 2. `pipeline::worker_layout`: reads checkpoint storage and asks `layout::choose`
//!    whether this start is the current layout's own recovery or a rescale.
//! 3. `connector::kafka::takeover` and `pipeline::rescale`: a rescale fences the old
//!    layout's workers and restores what `rescale_plan` says from their last committed
//!    checkpoints.
//! 4. `connector::kafka::repartition`, `repartition_watermark`, `repartition_purge`:
//!    the shuffle through Kafka, event time across it, and the purge of what no
//!    checkpoint needs.
//! 5. `checkpoint::layout_cleanup`: the old layouts' checkpoints removed once the new
//!    one cannot need them.

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
