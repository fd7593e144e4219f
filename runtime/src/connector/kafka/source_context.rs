//! `SourceContext`: the librdkafka client context of a Kafka source's consumer. Quiet
//! like every Weir client's (`client::QuietContext`), and it keeps the high watermark
//! of every partition from librdkafka's statistics, which arrive every
//! `STATS_INTERVAL` with the consumer's polls: the source's consumer lag is the high
//! watermark minus its next offset, known without a request to the broker.
//!
//! Invariant: a watermark here is at most `STATS_INTERVAL` (plus a poll) old; the lag
//! is a report, never an input to what the pipeline reads or commits.

use std::collections::HashMap;
use std::sync::Mutex;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError as RdKafkaError;
use serde::Deserialize;

use crate::connector::kafka::client::log_quietly;

/// librdkafka's `statistics.interval.ms` for a source's consumer.
pub const STATS_INTERVAL_MS: &str = "1000";

#[derive(Debug, Default)]
pub struct SourceContext {
    high_watermarks: Mutex<HashMap<(String, i32), i64>>,
}

impl SourceContext {
    /// The last high watermark librdkafka reported for `topic`-`partition`.
    pub fn high_watermark(&self, topic: &str, partition: i32) -> Option<i64> {
        let map = self
            .high_watermarks
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        map.get(&(topic.to_owned(), partition)).copied()
    }
}

impl ClientContext for SourceContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_quietly(level, fac, message);
    }

    fn error(&self, error: RdKafkaError, reason: &str) {
        tracing::debug!(%error, reason, "librdkafka error event");
    }

    /// Reads only `topics.*.partitions.*.hi_offset` of the statistics JSON (rdkafka's
    /// full `Statistics` type refuses fields newer librdkafka versions add).
    fn stats_raw(&self, statistics: &[u8]) {
        let Ok(stats) = serde_json::from_slice::<StatsJson>(statistics) else {
            return;
        };
        let mut map = self
            .high_watermarks
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for (name, topic) in stats.topics {
            for (partition, p) in topic.partitions {
                if partition >= 0 && p.hi_offset >= 0 {
                    map.insert((name.clone(), partition), p.hi_offset);
                }
            }
        }
    }
}

impl ConsumerContext for SourceContext {}

#[derive(Deserialize)]
struct StatsJson {
    #[serde(default)]
    topics: HashMap<String, TopicStats>,
}

#[derive(Deserialize)]
struct TopicStats {
    #[serde(default)]
    partitions: HashMap<i32, PartitionStats>,
}

#[derive(Deserialize)]
struct PartitionStats {
    hi_offset: i64,
}
