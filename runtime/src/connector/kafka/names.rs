//! `KafkaNames`: every name a pipeline uses on a Kafka cluster, derived from one
//! namespace prefix and the pipeline's name, in one place.
//!
//! Invariants:
//! - Every transactional id, consumer group and progress topic of pipeline `p` under
//!   prefix `P` starts with `P`: the transactional ids are `{P}{p}.{unit}.{0|1}`, the
//!   default consumer group is `{P}{p}` and the progress topic `{P}{p}.progress`. A
//!   broker ACL PREFIXED on `P` (transactional ids, groups, topics) therefore covers all
//!   of them, and two namespaces that are not prefixes of each other share none.
//! - The prefix of a `weir run` pipeline is its Kafka sinks' `transactional_prefix`
//!   (they must agree, see `preflight::shared_settings`), else
//!   `DEFAULT_TRANSACTIONAL_PREFIX`; a hosting server sets that field itself from the
//!   tenant's namespace and refuses a spec that sets it or a `group`.
//! - A source's explicit `group` overrides only the group; nothing overrides the
//!   transactional ids or the progress topic.

use crate::connector::kafka::config::{DEFAULT_TRANSACTIONAL_PREFIX, KafkaSinkConfig};

/// The Kafka names of one pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaNames {
    prefix: String,
    pipeline: String,
}

impl KafkaNames {
    /// Names of `pipeline` under namespace `prefix` (used verbatim: include the
    /// separator, e.g. `"team-a."`).
    pub fn new(prefix: impl Into<String>, pipeline: impl Into<String>) -> Self {
        KafkaNames {
            prefix: prefix.into(),
            pipeline: pipeline.into(),
        }
    }

    /// Names of `pipeline` whose Kafka sinks are `sinks`: the namespace is their shared
    /// `transactional_prefix` (the first's; preflight refuses sinks that disagree), or
    /// the default without Kafka sinks.
    pub fn for_sinks<'a>(
        pipeline: &str,
        mut sinks: impl Iterator<Item = &'a KafkaSinkConfig>,
    ) -> Self {
        let prefix = sinks.next().map_or(DEFAULT_TRANSACTIONAL_PREFIX, |s| {
            s.transactional_prefix.as_str()
        });
        KafkaNames::new(prefix, pipeline)
    }

    /// The namespace prefix every name starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The consumer group a Kafka source uses unless its spec names one, and where the
    /// commit unit's marker goes when no source's group takes it.
    pub fn group(&self) -> String {
        format!("{}{}", self.prefix, self.pipeline)
    }

    /// The compacted topic holding the pipeline's progress markers.
    pub fn progress_topic(&self) -> String {
        format!("{}{}.progress", self.prefix, self.pipeline)
    }

    /// The transactional id of producer `slot` (0 or 1) of commit unit `unit`.
    pub fn transactional_id(&self, unit: &str, slot: usize) -> String {
        format!("{}{}.{unit}.{slot}", self.prefix, self.pipeline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_starts_with_the_prefix() {
        let names = KafkaNames::new("team-a.", "wc");
        assert_eq!(names.group(), "team-a.wc");
        assert_eq!(names.progress_topic(), "team-a.wc.progress");
        assert_eq!(names.transactional_id("0", 1), "team-a.wc.0.1");
        for name in [
            names.group(),
            names.progress_topic(),
            names.transactional_id("0", 0),
        ] {
            assert!(name.starts_with(names.prefix()), "{name}");
        }
    }

    #[test]
    fn the_sinks_prefix_is_the_namespace_and_the_default_without_sinks() {
        let mut sink = KafkaSinkConfig::new("out");
        sink.transactional_prefix = "b.".into();
        assert_eq!(
            KafkaNames::for_sinks("p", [&sink].into_iter()).group(),
            "b.p"
        );
        assert_eq!(
            KafkaNames::for_sinks("p", std::iter::empty()).group(),
            format!("{DEFAULT_TRANSACTIONAL_PREFIX}p")
        );
    }
}
