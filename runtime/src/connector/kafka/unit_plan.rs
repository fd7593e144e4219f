//! `UnitPlan`: what a commit unit reads of the worker it commits for, in the
//! connector's own terms, so that the Kafka connector never sees a pipeline spec: the
//! pipeline's name, the worker and its layout, the Kafka sinks (with their operator
//! ids), the Kafka sources (with their index among the worker's sources: the readers of
//! the repartition topics among them), the keyed exchanges, and the checkpoint interval
//! and timeout. `pipeline::WorkerPlan::commit_unit_plan` builds it from a worker's plan.
//!
//! Invariant: every exchange's reader (`Repartition::source`) is among `sources`; the
//! exchange's key-group ranges are the partitions that reader reads.

use std::borrow::Cow;
use std::time::Duration;

use crate::cluster::{KeyGroupRanges, LayoutStamp, Worker};
use crate::connector::kafka::config::{KafkaSinkConfig, KafkaSourceConfig};
use crate::connector::kafka::repartition::{self, Repartition, RepartitionPartitions};

/// See the module doc.
#[derive(Debug, Clone)]
pub struct UnitPlan<'a> {
    pub pipeline: String,
    pub worker: Worker,
    pub layout: LayoutStamp,
    pub checkpoint_interval: Duration,
    pub checkpoint_timeout: Duration,
    /// The Kafka sinks with their operator ids (`sink-<i>`), in spec order.
    pub sinks: Vec<(String, &'a KafkaSinkConfig)>,
    /// The Kafka sources with their index among the worker's sources, in order.
    pub sources: Vec<(usize, &'a KafkaSourceConfig)>,
    /// The keyed exchanges through repartition topics (none for a single worker).
    pub repartitions: Vec<Repartition>,
    /// The repartition topics' partition count the spec asks for, or its default.
    pub repartition_partitions: RepartitionPartitions,
}

impl<'a> UnitPlan<'a> {
    /// This plan with the repartition topics cut into `in_use` partitions (the count
    /// they have at the broker): itself when that changes nothing.
    pub fn with_repartition_partitions(&self, in_use: Option<u16>) -> Cow<'_, UnitPlan<'a>> {
        let Some(count) = in_use else {
            return Cow::Borrowed(self);
        };
        let mut plan = self.clone();
        match repartition::adopt_partitions(&mut plan.repartitions, count) {
            Some(_) => Cow::Owned(plan),
            None => Cow::Borrowed(self),
        }
    }

    /// The key-group ranges of the repartition topic source `s` reads back, if it does.
    pub fn repartition_read_by(&self, s: usize) -> Option<KeyGroupRanges> {
        self.repartitions
            .iter()
            .find(|r| r.source == s)
            .map(|r| r.key_groups)
    }
}
