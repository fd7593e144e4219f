//! Kafka: a `read_committed` source and an exactly-once (two-phase commit) sink whose
//! transactions are the commit points of the pipeline's checkpoints. The protocol is
//! stated at the top of `sink.rs`.
pub mod assignment;
pub mod call_thread;
pub mod client;
pub mod commit_unit;
pub mod committer;
pub mod config;
pub mod delivery_context;
pub mod error;
pub mod error_class;
pub mod in_flight;
pub mod marker;
pub mod names;
pub mod position;
pub mod preflight;
pub mod repartition;
pub mod repartition_frame;
pub mod repartition_purge;
pub mod repartition_watermark;
pub mod reset;
pub mod security;
pub mod sink;
pub mod source;
pub mod source_context;
pub mod takeover;
pub mod transactional_producer;
pub mod unit_plan;

pub use commit_unit::{KafkaCommitUnit, LOCAL_UNIT};
pub use committer::KafkaCommitter;
pub use config::{DeliveryGuarantee, KafkaSinkConfig, KafkaSourceConfig, StartOffset};
pub use error::KafkaError;
pub use names::KafkaNames;
pub use position::{KafkaPosition, PartitionPosition};
pub use repartition::Repartition;
pub use sink::KafkaSink;
pub use source::KafkaSource;
