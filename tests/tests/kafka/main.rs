//! Exactly-once with Kafka, one worker per pipeline, against the test run's real broker
//! (`KAFKA_BOOTSTRAP` and, for the ACL cases, `KAFKA_SASL_BOOTSTRAP`; without them the
//! tests fail saying so, never pass silently). Every test uses topics and groups of
//! its own (`kafka::unique_name`); `kafka::exclusive()` runs the pipelines whose kill
//! timing matters one at a time.

mod acl;
mod config;
mod exactly_once;
mod failover;
mod operations;
mod repartition_frames;
