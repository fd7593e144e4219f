//! Issue 50, item 2: the names a pipeline makes for itself on Kafka never meet another
//! pipeline's or a tenant's own topic. Before, pipeline `x` with keyed step `y-count`
//! and pipeline `x-y` with keyed step `count` both wrote and read
//! `<tenant>.x-y-count-repartition` (each output held both inputs' words, and deleting
//! one deleted the other's topic); a pipeline `x_0-of-2` and worker 0 of 2 of `x` had
//! progress topics Kafka takes for one (`.` and `_` are one character to it); the
//! topic API made `a.p_progress`, after which pipeline `p` looped on `InvalidTopic`;
//! and a spec could name another pipeline's progress topic as its sink. No broker is
//! needed: each is refused before anything reaches Kafka.

use serde_json::{Value, json};
use weir_tests::server::{TestServer, write_config};

/// A keyed count of tenant `b`'s: `b.in` -> aggregate step `step` -> `b.out`.
fn keyed(name: &str, step: &str, module: &str) -> Value {
    json!({
        "name": name,
        "sources": [{"type": "kafka", "topic": "b.in"}],
        "steps": [{"type": "aggregate", "name": step, "module": module}],
        "sinks": [{"type": "kafka", "topic": "b.out"}],
    })
}

fn server() -> (tempfile::TempDir, TestServer, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    write_config(dir.path(), "");
    let s = TestServer::start(dir.path());
    let b = s.tenant("b", json!({"workers": 3}));
    let counter = s.push(&b, "word_count");
    (dir, s, b, counter)
}

#[test]
fn two_pipelines_whose_own_topics_would_meet_are_refused_naming_both() {
    let (_dir, s, b, counter) = server();
    let create = |name: &str, step: &str, workers: u32| {
        s.post(
            "/v1/pipelines",
            Some(&b),
            &json!({"spec": keyed(name, step, &counter), "workers": workers, "start": false}),
        )
    };
    assert_eq!(create("x", "y-count", 2).status, 201);
    let second = create("x-y", "count", 2);
    assert_eq!(
        (second.status, second.error()),
        (
            409,
            "pipeline \"x-y\" would make topic \"b.x-y-count-repartition\", the same name to Kafka as pipeline \"x\"'s \"b.x-y-count-repartition\": rename the pipeline or its step"
        )
    );
    let third = create("x_0-of-2", "count", 1);
    assert_eq!(
        (third.status, third.error()),
        (
            409,
            "pipeline \"x_0-of-2\" would make topic \"b.x_0-of-2.progress\", the same name to Kafka as pipeline \"x\"'s \"b.x.0-of-2.progress\": rename the pipeline or its step"
        )
    );
    // The same names at one worker make no repartition topic, and meet nothing.
    assert_eq!(create("x-y", "count", 1).status, 201);
    let listed: Vec<String> = s
        .get("/v1/pipelines", Some(&b))
        .body
        .as_array()
        .expect("a list")
        .iter()
        .map(|p| p["name"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(listed, ["x", "x-y"]);
}

#[test]
fn a_topic_named_as_a_pipelines_own_is_refused_in_a_spec_and_by_the_topic_api() {
    let (_dir, s, b, counter) = server();
    for sink in ["b.p.progress", "b.p_progress", "b.x-count-repartition"] {
        let mut spec = keyed("q", "count", &counter);
        spec["sinks"][0]["topic"] = json!(sink);
        let answer = s.post(
            "/v1/pipelines",
            Some(&b),
            &json!({"spec": spec, "start": false}),
        );
        assert_eq!(
            (answer.status, answer.error()),
            (
                400,
                format!(
                    "spec field sinks[0].topic: topic {sink:?} is named as pipelines name their own progress and repartition topics (.progress, _progress, -repartition): choose another name"
                )
                .as_str()
            )
        );
        let topic = s.post(
            "/v1/topics",
            Some(&b),
            &json!({"name": sink, "partitions": 1}),
        );
        assert_eq!(topic.status, 400, "{sink}: {topic:?}");
        assert!(topic.error().contains("are pipelines' own"), "{topic:?}");
    }
    assert_eq!(s.get("/v1/pipelines", Some(&b)).body, json!([]));
}
