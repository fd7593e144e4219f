//! A keyed pipeline as 3 worker processes on one machine, its shuffle by key going
//! through the Kafka repartition topic (issue 12, item 2), against the real broker
//! (`KAFKA_BOOTSTRAP`) and the local S3-compatible server (`scripts/s3/s3.sh`):
//! split-words map + unwindowed word-count aggregate, Kafka in (6 partitions) and out
//! (exactly-once), checkpoints in the bucket. Random workers are SIGKILLed 10 times
//! and restarted, one of them with its local state directory deleted (it can only
//! restore from the bucket). The committed output, read_committed, must be what an
//! uninterrupted run commits: per word, the counts 1, 2, 3, ... up to the word's exact
//! number of occurrences, in that order, nothing missing or repeated
//! (`batch_size = 1`: an unwindowed aggregate emits once per update call, so a batch
//! holding a word twice would skip a count). The same input run uninterrupted as one
//! process (in-process shuffle) commits exactly that too. Workers run until stopped:
//! once the output is complete each stops on SIGTERM with exit 143. A worker that fails
//! on its own (a transaction commit timing out on a loaded broker fails it into
//! recovery) is restarted as an orchestrator would, at most 5 times, each printed. The
//! repartition topic Weir created has a partition per range of 4 key groups and
//! unlimited retention; the workers purge it
//! (DeleteRecords) as they go, so once the input is done every partition starts at the
//! offset its owner committed, and no partition is ever purged past that offset (the
//! kills restore from purged partitions all along); one that exists with another
//! partition count is refused with one line before anything is written.
//!
//! A pipeline with two keyed steps (the word count, then a histogram of the counts
//! keyed by the count) runs as 3 workers too, each step crossing a repartition topic
//! of its own, with 4 SIGKILLs, then SIGTERM and a rescale to 2 workers over more
//! input: its committed histogram is exact and equals a one-process run's.
//!
//! Without the S3 server's environment the test fails, saying how to start it, unless
//! `WEIR_SKIP_S3=1` asks to skip it (the convention of `local/object_store_checkpoints.rs`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weir_tests::kafka;
use weir_tests::word_count::{self, Workers, assert_exact, committed_counts, total_records};
use weir_tests::{refusal_line, run_spec_ok, s3_bucket, start_worker, toml_path, wait_until, weir};

const PARTITIONS: i32 = 6;
const WORKERS: u32 = 3;
/// Input lines per partition.
const LINES_PER_PARTITION: usize = 250;
const KILLS: usize = 10;
/// Most restarts of workers that failed on their own (not killed by the test).
const MAX_FAILURES: usize = 5;
/// Bound on the whole scenario.
const WAIT_LIMIT: Duration = Duration::from_secs(420);
/// Input lines per partition of the two-keyed-step pipeline (the first part before
/// the rescale, the rest after), and its SIGKILLs.
const TWO_KEYED_LINES: std::ops::Range<usize> = 60..100;
const TWO_KEYED_KILLS: usize = 4;

#[test]
fn three_workers_count_words_exactly_once_through_the_repartition_topic_while_killed() {
    let Some(bucket) = s3_bucket() else {
        return;
    };
    let _one_at_a_time = kafka::exclusive();
    let (records, totals) = word_count::input(PARTITIONS, 0..LINES_PER_PARTITION);
    let expected_records: u64 = totals.values().sum();
    let input_topic = kafka::unique_name("repartition-in");
    kafka::create_topic(&input_topic, PARTITIONS);
    kafka::produce(&input_topic, &records);
    let deadline = Instant::now() + WAIT_LIMIT;

    assert_one_process_counts_exactly(&input_topic, &totals);

    // The workers, checkpointing into the bucket.
    let dir = tempfile::tempdir().expect("tempdir");
    let name = kafka::unique_name("wc-workers");
    let output = kafka::unique_name("repartition-out");
    kafka::create_topic(&output, PARTITIONS);
    let checkpoints = format!("s3://{bucket}/{}", kafka::unique_name("repartition"));
    // Each worker reads its 2 input partitions at 40 lines/s: ~12 s of input
    // uninterrupted, so the kills land while it is being read.
    let spec = word_count::spec(
        dir.path(),
        &name,
        (&input_topic, &output),
        &checkpoints,
        40,
        false,
    );
    let mut workers = Workers::start(&spec, WORKERS, MAX_FAILURES);
    kill_random_workers(&mut workers, dir.path(), deadline);

    // Every worker runs until stopped: wait (bounded) until the committed output holds
    // as many records as the input has words, then stop them all with SIGTERM.
    loop {
        let seen = total_records(&committed_counts(&output)) as u64;
        if seen >= expected_records {
            break;
        }
        workers.restart_failed();
        assert!(
            Instant::now() < deadline,
            "the workers committed {seen} of {expected_records} counts in time"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let topic = format!("weir.{name}-count-repartition");
    wait_until_purged_to_the_committed_offsets(&mut workers, &name, &topic, deadline);
    workers.stop_all(deadline);
    eprintln!(
        "{} restarts of workers that failed on their own: {:?}",
        workers.failures.len(),
        workers.failures
    );
    assert_exact(&committed_counts(&output), &totals);

    // The shuffle went through the topic: one partition per range of 4 key groups,
    // created with unlimited retention, and each worker committed the offsets of its
    // own ranges' partitions, with its marker.
    let described = kafka::kafka_tool(&[
        "topics",
        "--describe",
        "--topic",
        &topic,
        "--bootstrap-server",
        &kafka::bootstrap(),
    ]);
    for says in ["PartitionCount: 8", "retention.ms=-1", "retention.bytes=-1"] {
        assert!(described.contains(says), "{says}: {described}");
    }
    assert_owned_by_the_workers(&name, &topic, WORKERS);
}

/// The reference: the word count of `input_topic` as one process (in-process
/// shuffle), bounded and uninterrupted, commits exactly `totals`.
fn assert_one_process_counts_exactly(input_topic: &str, totals: &BTreeMap<String, u64>) {
    let reference = tempfile::tempdir().expect("tempdir");
    let single_out = kafka::unique_name("repartition-single-out");
    kafka::create_topic(&single_out, PARTITIONS);
    let single = word_count::spec(
        reference.path(),
        &kafka::unique_name("wc-single"),
        (input_topic, &single_out),
        &toml_path(&reference.path().join("checkpoints")).replace('"', ""),
        0,
        true,
    );
    run_spec_ok(&single, "the one-process run");
    assert_exact(&committed_counts(&single_out), totals);
}

/// SIGKILLs a random worker `KILLS` times, at random moments, restarting it each time
/// (halfway, with its local state directory under `dir` deleted, as on a new machine:
/// it can only restore from the bucket).
fn kill_random_workers(workers: &mut Workers, dir: &Path, deadline: Instant) {
    let mut rng = StdRng::seed_from_u64(12);
    let mut kills = 0;
    let mut restored_from_bucket = None;
    while kills < KILLS {
        assert!(Instant::now() < deadline, "{kills} kills in time");
        std::thread::sleep(Duration::from_millis(rng.random_range(700..2_500)));
        workers.restart_failed();
        let i = rng.random_range(0..WORKERS) as usize;
        workers.children[i].kill().expect("SIGKILL");
        workers.children[i].wait().expect("reap");
        kills += 1;
        if kills == KILLS / 2 {
            // As on a new machine: the restart can only restore from the bucket.
            let local = dir.join(format!("state/worker-{i}-of-{WORKERS}"));
            std::fs::remove_dir_all(&local).expect("delete the local state");
            restored_from_bucket = Some(i);
        }
        workers.restart(i, None);
    }
    eprintln!(
        "{kills} SIGKILLs; worker {restored_from_bucket:?} restarted with an empty local state dir"
    );
}

/// Each worker purges what it read of its repartition partitions once no retained
/// checkpoint needs it: with the input done, every partition's log start of `topic`
/// reaches the offset its owner committed, and never passes it. Waits (bounded) for it.
fn wait_until_purged_to_the_committed_offsets(
    workers: &mut Workers,
    name: &str,
    topic: &str,
    deadline: Instant,
) {
    let group = format!("weir.{name}");
    loop {
        let committed = kafka::committed_offsets(&group, topic);
        let starts = kafka::watermarks(topic);
        for (p, &(start, _)) in &starts {
            let next = committed.get(p).map_or(0, |(offset, _)| *offset);
            assert!(
                start <= next,
                "partition {p} purged to {start}, past its committed {next}"
            );
        }
        if committed.len() == usize::from(word_count::REPARTITION.count())
            && starts
                .iter()
                .all(|(p, (start, _))| committed[p].0 == *start)
        {
            let purged: i64 = starts.values().map(|(start, _)| start).sum();
            eprintln!("the repartition topic was purged of {purged} offsets, up to what was read");
            break;
        }
        workers.restart_failed();
        assert!(
            Instant::now() < deadline,
            "the repartition topic purged up to the committed offsets in time: starts {starts:?}, committed {committed:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Each of the `workers` workers of pipeline `name` committed the offsets of its own
/// ranges' partitions of repartition topic `topic`, with its marker, and every
/// partition has its offset.
fn assert_owned_by_the_workers(name: &str, topic: &str, workers: u32) {
    let offsets = kafka::committed_offsets(&format!("weir.{name}"), topic);
    assert_eq!(
        offsets.len(),
        usize::from(word_count::REPARTITION.count()),
        "{topic}: every range's partition: {offsets:?}"
    );
    for i in 0..workers {
        let worker = weir::cluster::Worker::new(i, workers).expect("worker");
        for p in weir::connector::kafka::repartition::partitions_of(worker, word_count::REPARTITION)
        {
            let (_, marker) = &offsets[&p];
            assert!(
                marker.starts_with(&format!("weir:{name}:{i}-of-{workers}:checkpoint=")),
                "{topic} partition {p} is worker {i}'s: {marker}"
            );
        }
    }
}

/// Catches: a second keyed step still fed in process (a count of the histogram made
/// by whichever worker counted the word, not by the owner of the count's key group:
/// every histogram key would then be committed by several workers, each with its own
/// partial count), its topic written outside the transactions (records repeated or
/// lost across the kills), read back into the wrong stage, or its state or offsets
/// not handed over whole by a rescale.
#[test]
fn two_keyed_steps_cross_a_topic_each_exactly_once_while_killed_and_rescaled() {
    let _one_at_a_time = kafka::exclusive();
    let (records, mut totals) = word_count::input(PARTITIONS, 0..TWO_KEYED_LINES.start);
    let (more, more_totals) = word_count::input(PARTITIONS, TWO_KEYED_LINES);
    let input_topic = kafka::unique_name("two-keyed-in");
    kafka::create_topic(&input_topic, PARTITIONS);
    kafka::produce(&input_topic, &records);
    let deadline = Instant::now() + WAIT_LIMIT;

    let dir = tempfile::tempdir().expect("tempdir");
    let name = kafka::unique_name("two-keyed");
    let output = kafka::unique_name("two-keyed-out");
    kafka::create_topic(&output, PARTITIONS);
    let spec = word_count::histogram_spec(
        dir.path(),
        &name,
        (&input_topic, &output),
        &toml_path(&dir.path().join("checkpoints")).replace('"', ""),
        40,
        false,
    );
    // 3 workers over the first part, SIGKILLed now and then, stopped with SIGTERM
    // once it is all counted.
    let mut three = Workers::start(&spec, WORKERS, MAX_FAILURES);
    three.sigkill_at_random(21, TWO_KEYED_KILLS, 700..2_000);
    let first: u64 = word_count::histogram(&totals).values().sum();
    word_count::wait_for_counts(&output, first as usize, deadline, || {
        three.restart_failed();
    });
    three.stop_all(deadline);

    // The rest, rescaled to 2 workers: both steps' state and both topics' offsets
    // move by key-group ranges.
    kafka::produce(&input_topic, &more);
    word_count::add_totals(&mut totals, &more_totals);
    let expected = word_count::histogram(&totals);
    let all: u64 = expected.values().sum();
    let mut two = Workers::start(&spec, 2, MAX_FAILURES);
    word_count::wait_for_counts(&output, all as usize, deadline, || two.restart_failed());
    two.stop_all(deadline);
    eprintln!(
        "{TWO_KEYED_KILLS} SIGKILLs; restarts of workers that failed on their own: {:?} {:?}",
        three.failures, two.failures
    );
    assert_exact(&committed_counts(&output), &expected);
    // Each keyed step crossed a topic of its own, read by the owners of its ranges.
    for step in ["count", "histogram"] {
        assert_owned_by_the_workers(&name, &format!("weir.{name}-{step}-repartition"), 2);
    }

    // The reference: the same input in one process, both shuffles in process,
    // uninterrupted, commits the same.
    let reference = tempfile::tempdir().expect("tempdir");
    let single_out = kafka::unique_name("two-keyed-single-out");
    kafka::create_topic(&single_out, PARTITIONS);
    let single = word_count::histogram_spec(
        reference.path(),
        &kafka::unique_name("two-keyed-single"),
        (&input_topic, &single_out),
        &toml_path(&reference.path().join("checkpoints")).replace('"', ""),
        0,
        true,
    );
    run_spec_ok(&single, "the one-process run");
    assert_exact(&committed_counts(&single_out), &expected);
}

/// Catches: a worker that writes into an existing topic whose partitions are cut
/// otherwise (key groups landing in partitions their owner does not read), or a
/// default that refuses the topic of a pipeline made before key-group ranges (one
/// partition per key group) instead of running on with its count.
#[test]
fn a_repartition_topic_with_another_partition_count_is_refused_if_set_else_adopted() {
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let name = kafka::unique_name("wc-wrong-topic");
    let input_topic = kafka::unique_name("repartition-wrong-in");
    let output = kafka::unique_name("repartition-wrong-out");
    kafka::create_topic(&input_topic, 2);
    kafka::create_topic(&output, 2);
    let topic = format!("weir.{name}-count-repartition");
    kafka::create_topic(&topic, 3);
    let checkpoints = toml_path(&dir.path().join("checkpoints")).replace('"', "");
    let spec = word_count::spec(
        dir.path(),
        &name,
        (&input_topic, &output),
        &checkpoints,
        0,
        false,
    );
    let out = weir()
        .args(["run", "--quiet", "--worker", "0/2"])
        .arg(&spec)
        .output()
        .expect("run");
    assert!(!out.status.success());
    let line = refusal_line(&out);
    assert!(
        line.contains(&format!(
            "repartition topic {topic} has 3 partitions, but this worker uses 8 (repartition_partitions; each partition a range of key groups, fixed for the life of the pipeline): set repartition_partitions = 3, or leave it out"
        )),
        "{line}"
    );
    assert_eq!(kafka::end_offsets_sum(&output), 0, "nothing written");

    // Without `repartition_partitions` the workers take the topic's 3 ranges.
    let text = std::fs::read_to_string(&spec).expect("spec");
    std::fs::write(&spec, text.replace("repartition_partitions = 8\n", "")).expect("spec");
    let (records, totals) = word_count::input(2, 0..20);
    kafka::produce(&input_topic, &records);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut workers = Workers::start(&spec, 2, MAX_FAILURES);
    let expected: u64 = totals.values().sum();
    word_count::wait_for_counts(&output, expected as usize, deadline, || {
        workers.restart_failed();
    });
    workers.stop_all(deadline);
    assert_exact(&committed_counts(&output), &totals);
    let offsets = kafka::committed_offsets(&format!("weir.{name}"), &topic);
    let ranges = weir::cluster::KeyGroupRanges::new(32, 3);
    for i in 0..2 {
        let worker = weir::cluster::Worker::new(i, 2).expect("worker");
        for p in weir::connector::kafka::repartition::partitions_of(worker, ranges) {
            let (_, marker) = &offsets[&p];
            assert!(
                marker.starts_with(&format!("weir:{name}:{i}-of-2:checkpoint=")),
                "partition {p} of 3 is worker {i}'s: {marker}"
            );
        }
    }
}

/// Catches: a worker that resumes a repartition partition whose unread records were
/// deleted from outside Weir (a retention or DeleteRecords on the topic) at the
/// partition's new start, as the Kafka source does for an input topic: those records
/// exist nowhere else, and their counts would silently go missing.
#[test]
fn a_repartition_offset_deleted_from_outside_is_refused_not_skipped() {
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let name = kafka::unique_name("wc-deleted");
    let input_topic = kafka::unique_name("repartition-deleted-in");
    let output = kafka::unique_name("repartition-deleted-out");
    kafka::create_topic(&input_topic, 2);
    kafka::create_topic(&output, 2);
    let (records, _) = word_count::input(2, 0..5);
    kafka::produce(&input_topic, &records);
    let checkpoints = toml_path(&dir.path().join("checkpoints")).replace('"', "");
    let spec = word_count::spec(
        dir.path(),
        &name,
        (&input_topic, &output),
        &checkpoints,
        0,
        false,
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    // Worker 0 alone reads its input partition, shuffles it and counts its own key
    // groups' words: run it until some counts are committed, then stop it.
    let mut first = start_worker(&spec, "0/2", None);
    while total_records(&committed_counts(&output)) == 0 {
        assert!(
            Instant::now() < deadline,
            "worker 0 committed counts in time"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    kill(Pid::from_raw(first.id() as i32), Signal::SIGTERM).expect("SIGTERM");
    let (status, err) = wait_until(&mut first, deadline, "worker 0 after SIGTERM");
    assert_eq!(status.code(), Some(143), "{err}");

    // Records for one of worker 0's key groups arrive after its checkpoint, and are
    // deleted before it read them.
    let topic = format!("weir.{name}-count-repartition");
    let mine = weir::connector::kafka::repartition::partitions_of(
        weir::cluster::Worker::new(0, 2).expect("worker"),
        word_count::REPARTITION,
    );
    let partition = mine[0];
    let committed_offset = kafka::committed_offsets(&format!("weir.{name}"), &topic)[&partition].0;
    kafka::produce(
        &topic,
        &[kafka::Input {
            partition,
            key: "w00".into(),
            value: "w00".into(),
            timestamp: 0,
        }],
    );
    let (_, high) = kafka::watermarks(&topic)[&partition];
    kafka::delete_records(&topic, partition, high);

    // Refused at start, with one line; a worker that skipped the deleted records would
    // run on until the deadline.
    let mut second = start_worker(&spec, "0/2", None);
    let (status, err) = wait_until(&mut second, deadline, "worker 0 over deleted records");
    assert_eq!(status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    let line = lines[0];
    assert!(
        line.contains(&format!(
            "repartition topic {topic}, partition {partition}: the checkpoint resumes at offset {committed_offset}, but the partition now starts at {high}: records this worker had not read yet were deleted"
        )),
        "{line}"
    );
}
