//! `weir reset-kafka SPEC.toml`: deletes what a stopped pipeline keeps on Kafka between
//! runs (its consumer groups, progress and repartition topics), so that a pipeline of
//! the same name can start from nothing; prints one line per thing removed. A hosting
//! server runs it when a pipeline is deleted. Its output topics are never touched, nor
//! local files (`weir run --from-scratch` removes the checkpoints).

use std::path::PathBuf;

use crate::pipeline::reset::reset_kafka;
use crate::spec::PipelineSpec;

#[derive(Debug, clap::Args)]
pub struct ResetKafkaArgs {
    /// The pipeline spec (TOML): its name and Kafka connectors say what is the pipeline's.
    pub spec: PathBuf,
}

pub fn execute(args: ResetKafkaArgs) -> anyhow::Result<()> {
    let spec = PipelineSpec::load(&args.spec)?;
    let Some(removed) = reset_kafka(&spec)? else {
        println!("pipeline {}: uses no Kafka; nothing to reset", spec.name);
        return Ok(());
    };
    for unit in &removed.fenced {
        println!("fenced commit unit {unit}");
    }
    for topic in &removed.topics {
        println!("deleted topic {topic}");
    }
    for group in &removed.groups {
        println!("deleted consumer group {group}");
    }
    println!(
        "pipeline {}: reset on Kafka; `weir run --from-scratch` starts it from nothing",
        spec.name
    );
    Ok(())
}
