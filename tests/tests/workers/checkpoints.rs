//! `weir checkpoints SPEC --worker I/N` lists the checkpoints worker I of N keeps in its
//! own `worker-I-of-N/` location; without `--worker`, a checkpoint dir that holds
//! workers' locations names them.

use weir_tests::kafka::{self, Input};
use weir_tests::{run_weir, stderr_of};

#[test]
fn each_worker_lists_its_own_checkpoints() {
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let name = kafka::unique_name("wcp");
    let input = kafka::unique_name("wcp-in");
    let output = kafka::unique_name("wcp-out");
    kafka::create_topic(&input, 2);
    kafka::create_topic(&output, 2);
    let records: Vec<Input> = (0..200)
        .map(|i| Input {
            partition: i % 2,
            key: format!("k{i}"),
            value: format!("v{i}"),
            timestamp: 1_000 + i64::from(i),
        })
        .collect();
    kafka::produce(&input, &records);
    let source = format!(
        "[[sources]]\ntype = \"kafka\"\ntopic = \"{input}\"\nstart = \"earliest\"\nbounded = true\nbootstrap = \"{}\"",
        kafka::bootstrap()
    );
    let spec = kafka::uppercase_spec(
        dir.path(),
        &name,
        &dir.path().join("state"),
        r#"interval = "200ms""#,
        &source,
        &output,
        &format!(
            "delivery = \"exactly-once\"\nbootstrap = \"{}\"",
            kafka::bootstrap()
        ),
    );
    let spec = spec.to_str().expect("utf-8 path");
    for worker in ["0/2", "1/2"] {
        let run = run_weir(&["run", "--quiet", "--worker", worker, spec]);
        assert!(run.status.success(), "worker {worker}: {}", stderr_of(&run));
    }
    assert_eq!(kafka::committed_values(&output).len(), 200);

    for (worker, dir_name) in [("0/2", "worker-0-of-2"), ("1/2", "worker-1-of-2")] {
        let listed = run_weir(&["checkpoints", spec, "--worker", worker]);
        assert!(listed.status.success(), "{}", stderr_of(&listed));
        let text = String::from_utf8_lossy(&listed.stdout).into_owned();
        let rows: Vec<&str> = text.lines().skip(1).collect();
        assert!(
            text.starts_with("      id  completed (UTC)") && !rows.is_empty(),
            "worker {worker}: {text}"
        );
        assert!(
            rows.last().is_some_and(|r| r.ends_with("(final)")),
            "a bounded run ends with a final checkpoint: {text}"
        );
        assert!(
            dir.path().join("state/checkpoints").join(dir_name).is_dir(),
            "{dir_name}"
        );
    }
    let whole = run_weir(&["checkpoints", spec]);
    assert!(whole.status.success(), "{}", stderr_of(&whole));
    let text = String::from_utf8_lossy(&whole.stdout).into_owned();
    assert!(
        text.starts_with(&format!(
            "pipeline {name} runs as workers, each with its own checkpoints: worker-0-of-2, worker-1-of-2 in "
        )),
        "{text}"
    );
    let refused = run_weir(&["checkpoints", spec, "--worker", "2/2"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr_of(&refused));
}
