//! A pipeline as N worker processes (`weir run --worker I/N`), against the test run's
//! real broker: stateless maps over a shared consumer group, keyed aggregates whose
//! shuffle crosses the Kafka repartition topic (with event-time windows), per-worker
//! checkpoints, and rescales between numbers of workers, each counted exactly.

mod basics;
mod checkpoints;
mod repartition;
mod rescale;
mod windows;
