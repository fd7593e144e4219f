//! `KafkaNames`: every name a pipeline uses on a Kafka cluster, derived from one
//! namespace prefix and the pipeline's name, in one place.
//!
//! Invariants:
//! - Every transactional id, consumer group and progress topic of pipeline `p` under
//!   prefix `P` starts with `P`: the transactional ids of a worker are
//!   `{P}{p}.{U}.{0|1}`, where `U` is its commit unit (`Worker::unit`: `0` for 0/1,
//!   `<I>-of-<N>` for worker I of N > 1), the default consumer group is `{P}{p}`
//!   (shared by the workers: each commits the offsets of its own partitions) and the
//!   progress topic `{P}{p}.progress`, or `{P}{p}.{U}.progress` for worker I of N > 1.
//!   A broker ACL PREFIXED on `P` (transactional ids, groups, topics) therefore covers
//!   all of them, and two namespaces that are not prefixes of each other share none.
//! - Workers: 0/1 (a pipeline in one process) has exactly the names it had before
//!   workers existed (unit `0`). Two workers of different units share no
//!   transactional id and no progress topic, so neither fences the other, and reading
//!   one worker's marker with read_committed never waits behind another worker's open
//!   transaction; two processes of the same worker share both, so the later one fences
//!   the earlier. The unit holds N as well as I: worker 1 of 2 and worker 1 of 3 are
//!   different units, so a rescale can fence every old worker (`takeover`) without
//!   fencing a new one. (A later layout with the same N, 3 -> 2 -> 3, reuses the
//!   names; its markers carry its layout generation, see `marker`.)
//! - The prefix of a `weir run` pipeline is its Kafka sinks' `transactional_prefix`
//!   (they must agree, see `preflight::shared_settings`), else
//!   `DEFAULT_TRANSACTIONAL_PREFIX`; a hosting server sets that field itself from the
//!   tenant's namespace and refuses a spec that sets it or a `group`.
//! - A source's explicit `group` overrides only the group; nothing overrides the
//!   transactional ids or the progress topic.
//! - The repartition topic of keyed step `s` (its name, else `step-<n>`) is
//!   `{P}{p}-{s}-repartition`: one per pipeline and step, shared by all its workers
//!   (each writes every key group's records there and reads its own key groups' back,
//!   see `repartition`). Step names are `[a-z0-9_-]`, so the name is a legal topic.
//! - Kafka treats two topic names that differ only in `.` against `_` as one (their
//!   metric names collide: the second is refused, `InvalidTopic`). `collision_key` is
//!   that rule; `is_derived_topic` holds a name the same under it, so `a.p_progress` is
//!   as much pipeline `p`'s as `a.p.progress` is. These names are not injective in
//!   their parts (`x` with step `y-count` and `x-y` with step `count` share
//!   `{P}x-y-count-repartition`; `x_1-of-3` and worker 1 of 3 of `x` share a progress
//!   topic under the rule), so a host that lets tenants choose them refuses a pipeline
//!   whose `topics` meet another's (`server::api::pipelines`); the names themselves are
//!   kept, since running pipelines' markers, groups and records live under them.

use crate::cluster::Worker;
use crate::connector::kafka::config::{DEFAULT_TRANSACTIONAL_PREFIX, KafkaSinkConfig};

/// The Kafka names of one pipeline (as one of its workers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaNames {
    prefix: String,
    pipeline: String,
    worker: Worker,
}

impl KafkaNames {
    /// Names of `pipeline` under namespace `prefix` (used verbatim: include the
    /// separator, e.g. `"team-a."`).
    pub fn new(prefix: impl Into<String>, pipeline: impl Into<String>) -> Self {
        KafkaNames {
            prefix: prefix.into(),
            pipeline: pipeline.into(),
            worker: Worker::SINGLE,
        }
    }

    /// The names of worker `worker` of the same pipeline (0/1 unless set).
    pub fn for_worker(mut self, worker: Worker) -> Self {
        self.worker = worker;
        self
    }

    /// The commit unit these names belong to (`Worker::unit`).
    pub fn unit(&self) -> String {
        self.worker.unit()
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

    /// The compacted topic holding the worker's progress markers: the pipeline's for
    /// 0/1, the worker's own for I of N > 1.
    pub fn progress_topic(&self) -> String {
        if self.worker.is_single() {
            format!("{}{}.progress", self.prefix, self.pipeline)
        } else {
            format!("{}{}.{}.progress", self.prefix, self.pipeline, self.unit())
        }
    }

    /// The internal topic through which keyed step `step` (its stable id: the step's
    /// name, else `step-<n>`) receives its records from every worker: the same for all
    /// workers of the pipeline.
    pub fn repartition_topic(&self, step: &str) -> String {
        format!("{}{}-{step}-repartition", self.prefix, self.pipeline)
    }

    /// The transactional id of producer `slot` (0 or 1) of the worker's commit unit.
    pub fn transactional_id(&self, slot: usize) -> String {
        format!("{}{}.{}.{slot}", self.prefix, self.pipeline, self.unit())
    }

    /// Every topic the pipeline makes for itself when it runs as `workers` processes
    /// with keyed steps `keyed_steps` (their stable ids): a progress topic per worker
    /// and, with more than one worker, a repartition topic per keyed step. A count of 0
    /// is taken as 1.
    pub fn topics(&self, keyed_steps: &[String], workers: u32) -> Vec<String> {
        let progress = (0..workers.max(1)).map(|i| {
            let worker = Worker::new(i, workers.max(1)).unwrap_or(Worker::SINGLE);
            self.clone().for_worker(worker).progress_topic()
        });
        let repartition = keyed_steps
            .iter()
            .filter(|_| workers > 1)
            .map(|step| self.repartition_topic(step));
        progress.chain(repartition).collect()
    }
}

/// What Kafka compares topic names by: `.` and `_` are one character to it.
pub fn collision_key(topic: &str) -> String {
    topic.replace('.', "_")
}

/// Whether `topic` is, under Kafka's `.`/`_` rule, a name of the form pipelines make for
/// themselves (a progress or a repartition topic), which no user topic may take.
pub fn is_derived_topic(topic: &str) -> bool {
    let key = collision_key(topic);
    key.ends_with("_progress") || key.ends_with("-repartition")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_name_starts_with_the_prefix() {
        let names = KafkaNames::new("team-a.", "wc");
        assert_eq!(names.group(), "team-a.wc");
        assert_eq!(names.progress_topic(), "team-a.wc.progress");
        assert_eq!(names.transactional_id(1), "team-a.wc.0.1");
        assert_eq!(names.unit(), "0");
        for name in [
            names.group(),
            names.progress_topic(),
            names.transactional_id(0),
        ] {
            assert!(name.starts_with(names.prefix()), "{name}");
        }
    }

    #[test]
    fn each_worker_has_its_own_transactional_ids_and_progress_topic() {
        let base = KafkaNames::new("team-a.", "wc");
        let single = base.clone().for_worker(Worker::SINGLE);
        assert_eq!(single, base, "0/1 is the pipeline's names, unchanged");
        let w = |i, n| base.clone().for_worker(Worker::new(i, n).expect("worker"));
        assert_eq!(w(1, 3).transactional_id(0), "team-a.wc.1-of-3.0");
        assert_eq!(w(1, 3).transactional_id(1), "team-a.wc.1-of-3.1");
        assert_eq!(w(1, 3).unit(), "1-of-3");
        assert_eq!(w(1, 3).progress_topic(), "team-a.wc.1-of-3.progress");
        assert_eq!(w(1, 3).group(), "team-a.wc", "the workers share the group");
        // The same worker fences itself; any other worker, of the same N or not (a
        // rescale's old and new layouts), shares nothing with it.
        for (a, b) in [
            ((0, 3), (1, 3)),
            ((1, 3), (2, 3)),
            ((0, 2), (1, 2)),
            ((0, 3), (0, 2)),
            ((2, 3), (2, 5)),
        ] {
            let (a, b) = (w(a.0, a.1), w(b.0, b.1));
            for slot in [0, 1] {
                assert_ne!(a.transactional_id(slot), b.transactional_id(slot));
                assert_ne!(a.transactional_id(slot), b.transactional_id(1 - slot));
            }
            assert_ne!(a.progress_topic(), b.progress_topic());
        }
        assert_eq!(
            w(0, 3).repartition_topic("count"),
            w(2, 3).repartition_topic("count"),
            "one repartition topic per step, shared by the workers"
        );
        assert_eq!(
            w(1, 3).repartition_topic("count"),
            "team-a.wc-count-repartition"
        );
        assert_eq!(
            base.repartition_topic("step-1"),
            "team-a.wc-step-1-repartition"
        );
        for name in [w(2, 3).transactional_id(0), w(2, 3).progress_topic()] {
            assert!(name.starts_with("team-a."), "{name}");
        }
        assert_ne!(w(0, 2).transactional_id(0), single.transactional_id(0));
    }

    #[test]
    fn a_pipelines_topics_are_its_workers_progress_and_with_workers_its_repartition() {
        let names = KafkaNames::new("a.", "wc");
        let steps = ["count".to_owned()];
        assert_eq!(names.topics(&steps, 1), ["a.wc.progress"]);
        assert_eq!(
            names.topics(&steps, 2),
            [
                "a.wc.0-of-2.progress",
                "a.wc.1-of-2.progress",
                "a.wc-count-repartition"
            ]
        );
        for topic in names.topics(&steps, 3) {
            assert!(is_derived_topic(&topic), "{topic}");
        }
    }

    #[test]
    fn a_derived_name_is_recognised_under_kafkas_dot_underscore_rule() {
        for name in [
            "a.p.progress",
            "a.p_progress",
            "a_p_progress",
            "a.x-y-count-repartition",
        ] {
            assert!(is_derived_topic(name), "{name}");
        }
        for name in [
            "a.progress-report",
            "a.p.in",
            "a.repartition-x",
            "a.p.progres",
        ] {
            assert!(!is_derived_topic(name), "{name}");
        }
        assert_eq!(collision_key("a.p_x.y"), collision_key("a_p.x_y"));
    }

    /// A pipeline name or a step name as the spec allows them.
    fn part() -> impl Strategy<Value = String> {
        "[a-z0-9_-]{1,12}"
    }

    fn worker() -> impl Strategy<Value = Worker> {
        (1u32..5).prop_flat_map(|n| (0..n).prop_map(move |i| Worker::new(i, n).expect("I < N")))
    }

    proptest! {
        /// Transactional ids and groups are compared by the broker as they are: two
        /// commit units (tenant, pipeline, worker) that differ never share one, nor do
        /// two pipelines a group (pipeline names hold no `.`, tenant ids no `.` or `_`).
        #[test]
        fn distinct_commit_units_never_share_a_transactional_id_or_a_group(
            a in ("[a-z0-9-]{1,8}", part(), worker()),
            b in ("[a-z0-9-]{1,8}", part(), worker()),
            slots in (0usize..2, 0usize..2),
        ) {
            let names = |(t, p, w): &(String, String, Worker)| {
                KafkaNames::new(format!("{t}."), p.clone()).for_worker(*w)
            };
            let (x, y) = (names(&a), names(&b));
            if a != b || slots.0 != slots.1 {
                prop_assert_ne!(x.transactional_id(slots.0), y.transactional_id(slots.1));
            }
            if (&a.0, &a.1) != (&b.0, &b.1) {
                prop_assert_ne!(x.group(), y.group());
            }
        }

        /// Every topic a pipeline makes is one `is_derived_topic` holds (so no tenant
        /// topic may take it), and fits Kafka's 249 characters at the longest tenant
        /// id, pipeline and step names (32, 64 and 64).
        #[test]
        fn a_pipelines_topics_are_derived_and_fit_kafka(
            (t, p) in ("[a-z0-9-]{1,32}", "[a-z0-9_-]{1,64}"),
            steps in proptest::collection::vec("[a-z0-9_-]{1,64}", 0..3),
            workers in 1u32..5,
        ) {
            for topic in KafkaNames::new(format!("{t}."), p).topics(&steps, workers) {
                prop_assert!(is_derived_topic(&topic), "{}", topic);
                prop_assert!(topic.len() <= 249, "{}", topic);
            }
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
