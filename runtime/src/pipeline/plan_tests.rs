//! The plan's split: stages at the keyed steps, and with repartition topics the spec's
//! sources ending in the first while only each topic's source feeds its keyed stage.

use std::path::Path;

use super::*;
use crate::cluster::Worker;

fn spec(dir: &Path, sources: usize) -> PipelineSpec {
    spec_with(dir, sources, "")
}

/// The spec with `more` steps after its own.
fn spec_with(dir: &Path, sources: usize, more: &str) -> PipelineSpec {
    std::fs::write(dir.join("m.wasm"), b"\0asm").expect("module");
    let source = "[[sources]]\ntype = \"kafka\"\ntopic = \"in\"\nbootstrap = \"127.0.0.1:1\"\n";
    let text = format!(
        r#"
name = "p"
parallelism = 2
max_parallelism = 16
repartition_partitions = 8
{}
[[steps]]
type = "map"
module = "m.wasm"
[[steps]]
type = "aggregate"
name = "count"
module = "m.wasm"
[[steps]]
type = "map"
module = "m.wasm"
{more}
[[sinks]]
type = "kafka"
topic = "out"
bootstrap = "127.0.0.1:1"
"#,
        source.repeat(sources)
    );
    PipelineSpec::parse(&text, dir, "spec.toml").expect("spec")
}

#[test]
fn one_process_shuffles_every_source_into_the_keyed_stage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = spec(dir.path(), 2);
    let one = WorkerPlan::single(&s);
    let plan = stages(&s);
    assert_eq!(plan.len(), 2);
    assert_eq!((plan[0].steps.clone(), plan[0].shuffles), (vec![0], true));
    assert_eq!(
        (plan[1].steps.clone(), plan[1].shuffles),
        (vec![1, 2], false)
    );
    assert_eq!(stage_inputs(&one, 1), StageInputs::Sources(vec![0, 1]));
    assert_eq!(upstream_tasks(&one, 1), 4);
    assert!((0..2).all(|n| source_route(&one, n) == SourceRoute::Local));
    assert_eq!(one.repartitions, Vec::new());
}

/// Catches: the repartition source running stage 0's steps (records mapped twice), a
/// spec source still feeding the keyed stage in process (a key counted on two
/// workers), or the stages changing shape across workers (operator ids, hence
/// snapshots, would not match).
#[test]
fn a_worker_of_n_ends_its_sources_in_the_topic_and_feeds_the_keyed_stage_from_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = spec(dir.path(), 2);
    let w = WorkerPlan::new(&s, Worker::new(1, 3).expect("1/3")).expect("keyed with 3 workers");
    let [r] = &w.repartitions[..] else {
        panic!("one repartition topic: {:?}", w.repartitions);
    };
    assert_eq!((r.step, r.stage, r.step_id.as_str()), (1, 1, "count"));
    assert_eq!(r.topic, "weir.p-count-repartition");
    let ranges = crate::cluster::KeyGroupRanges::new(16, 8);
    assert_eq!((r.key_groups, r.source), (ranges, 2));
    assert_eq!(w.spec.sources.len(), 3, "one more source");
    assert_eq!(stages(&w.spec), stages(&s), "the same stages");
    assert_eq!(source_route(&w, 0), SourceRoute::ToRepartition);
    assert_eq!(source_route(&w, 1), SourceRoute::ToRepartition);
    assert_eq!(
        source_route(&w, 2),
        SourceRoute::FromRepartition { stage: 1 }
    );
    assert_eq!(stage_inputs(&w, 1), StageInputs::Sources(vec![2]));
    assert_eq!(upstream_tasks(&w, 1), 2, "the repartition source's 2 tasks");
    let crate::spec::SourceConfig::Kafka(c) = &w.spec.sources[2].config else {
        panic!("a kafka source");
    };
    assert_eq!(c.topic.as_deref(), Some("weir.p-count-repartition"));
    assert_eq!(
        w.repartition_read(2).map(|read| read.key_groups),
        Some(ranges),
        "the repartition source reads the exchange's ranges"
    );
    assert_eq!(c.group.as_deref(), Some("weir.p"), "the pipeline's group");
    assert!(!c.bounded);
    // Worker 1 of 3 reads the partitions of its key groups only: its ranges.
    let all: Vec<(String, i32)> = (0..8).map(|p| (r.topic.clone(), p)).collect();
    let repartition = w.repartition_read(2).map(|read| read.key_groups);
    let mine: Vec<i32> =
        crate::connector::kafka::repartition::worker_partitions(w.worker, repartition, &all)
            .into_iter()
            .map(|(_, p)| p)
            .collect();
    let share = crate::cluster::assignment::share::<i32>(w.worker, &[], ranges);
    let expected: Vec<i32> = share
        .key_group_ranges
        .iter()
        .map(|&r| i32::from(r))
        .collect();
    assert_eq!(mine, expected);
    let read: Vec<u16> = mine.iter().flat_map(|&p| ranges.groups(p as u16)).collect();
    let owned: Vec<u16> = share.key_groups.iter().flat_map(|g| g.clone()).collect();
    assert_eq!(read, owned, "the partitions hold exactly its key groups");
    assert!((2..=3).contains(&mine.len()), "a third of 8: {mine:?}");
}

/// Catches: a second keyed stage still fed in process by the first (a key counted on
/// the worker that happened to count its first step, not its owner), its topic read
/// back into the wrong stage, or the two exchanges' sources or ranges mixed up.
#[test]
fn a_second_keyed_step_across_workers_gets_a_topic_of_its_own_between_the_two_stages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let second = "[[steps]]\ntype = \"aggregate\"\nname = \"histogram\"\nmodule = \"m.wasm\"\nkey_field = \"count\"";
    let s = spec_with(dir.path(), 1, second);
    let one = WorkerPlan::single(&s);
    let plan = stages(&s);
    assert_eq!(plan.len(), 3);
    assert_eq!(
        stage_inputs(&one, 2),
        StageInputs::PreviousStage,
        "one process"
    );
    assert_eq!(upstream_tasks(&one, 2), 2);
    let w = WorkerPlan::new(&s, Worker::new(0, 2).expect("0/2"))
        .expect("two keyed steps with 2 workers");
    assert_eq!(stages(&w.spec), plan, "the same stages");
    let exchanges: Vec<_> = w
        .repartitions
        .iter()
        .map(|r| (r.step, r.stage, r.topic.as_str(), r.source))
        .collect();
    assert_eq!(
        exchanges,
        vec![
            (1, 1, "weir.p-count-repartition", 1),
            (3, 2, "weir.p-histogram-repartition", 2)
        ]
    );
    assert_eq!(w.spec.sources.len(), 3, "a source per topic");
    assert_eq!(source_route(&w, 0), SourceRoute::ToRepartition);
    assert_eq!(
        source_route(&w, 1),
        SourceRoute::FromRepartition { stage: 1 }
    );
    assert_eq!(
        source_route(&w, 2),
        SourceRoute::FromRepartition { stage: 2 }
    );
    assert_eq!(stage_inputs(&w, 1), StageInputs::Sources(vec![1]));
    assert_eq!(stage_inputs(&w, 2), StageInputs::Sources(vec![2]));
    assert_eq!(upstream_tasks(&w, 2), 2);
    assert_eq!(w.repartition_into(2).map(|r| r.step), Some(3));
    assert_eq!(
        w.repartition_into(3),
        None,
        "the last stage ends in the sinks"
    );
    assert!(
        w.repartitions
            .iter()
            .all(|r| r.key_groups == w.repartitions[0].key_groups),
        "a worker owns the same ranges of every topic"
    );
}
