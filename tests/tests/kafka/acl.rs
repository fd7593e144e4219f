//! Broker-side walls between tenants, on the test broker's SASL/SCRAM listener
//! (`KAFKA_SASL_BOOTSTRAP`, Kafka's StandardAuthorizer, no ACL = no access). Each tenant
//! is a SCRAM user whose PREFIXED ACLs cover only its own names (`kafka.sh tenant`):
//! - tenant `a` runs Kafka -> uppercase -> Kafka over SASL inside its prefix `a.`, and
//!   its committed output is exact;
//! - with Weir's own checks out of the way (a spec simply naming another tenant's
//!   topics, group or transactional prefix), tenant `b`'s credentials are refused by
//!   the broker (topic and group authorization failures): `weir run` fails with one line naming the authorization failure and
//!   nothing new is committed (were the ACLs off, these runs would succeed and write);
//! - a principal that may use a prefix's topics and groups but not its transactional
//!   ids is refused at `init_transactions` (transactional id authorization failure);
//! - a wrong password fails at once with one line about authentication, never
//!   printing the password.
//!
//! Setup and output checks use the PLAINTEXT listener, whose principal is a super user.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use weir_tests::kafka::{self, Input};
use weir_tests::{guest, multiset, multiset_diff, refusal_line, toml_path, weir, write_file};

const PASSWORD_A: &str = "a-secret-7f3c";
const PASSWORD_B: &str = "b-secret-91d2";
const PASSWORD_C: &str = "c-secret-04be";
/// The variable the specs name in `password_env`.
const PASSWORD_ENV: &str = "WEIR_ACL_TEST_PASSWORD";
const RECORDS: usize = 400;

/// Tenants `a` and `b`, each owning the names under `a.` / `b.` (set once per run of
/// this binary: `kafka.sh tenant` makes their ACLs exactly these).
fn tenants() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        kafka::tenant("a", PASSWORD_A, "a.");
        kafka::tenant("b", PASSWORD_B, "b.");
    });
}

/// A pipeline's Kafka names.
struct Names {
    pipeline: String,
    input: String,
    output: String,
    group: String,
    prefix: String,
}

/// Names under `prefix` (`a.`), with a fresh input (`RECORDS` records over 2
/// partitions) and an empty output topic; returns them and the input values.
fn topics_of(prefix: &str, tag: &str) -> (Names, Vec<String>) {
    let pipeline = kafka::unique_name(tag);
    let names = Names {
        input: format!("{prefix}{pipeline}.in"),
        output: format!("{prefix}{pipeline}.out"),
        group: format!("{prefix}{pipeline}"),
        prefix: prefix.to_owned(),
        pipeline,
    };
    kafka::create_topic(&names.input, 2);
    kafka::create_topic(&names.output, 2);
    let values: Vec<String> = (0..RECORDS)
        .map(|i| format!("record {i} of {tag}"))
        .collect();
    let input: Vec<Input> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Input {
            partition: (i % 2) as i32,
            key: format!("k{i}"),
            value: v.clone(),
            timestamp: 1_700_000_000_000 + i as i64,
        })
        .collect();
    kafka::produce(&names.input, &input);
    (names, values)
}

/// The spec of `names`' pipeline over the SASL listener as `user` (password from
/// `PASSWORD_ENV`), bounded, with `transactional_prefix = names.prefix`.
fn spec(dir: &Path, names: &Names, user: &str) -> PathBuf {
    let security = format!(
        r#"security = {{ protocol = "sasl_plaintext", mechanism = "SCRAM-SHA-256", username = "{user}", password_env = "{PASSWORD_ENV}" }}"#
    );
    let text = format!(
        r#"
name = "{pipeline}"
parallelism = 2
state_dir = {state}

[checkpoint]
interval = "200ms"

[[sources]]
type = "kafka"
bootstrap = "{bootstrap}"
topic = "{input}"
group = "{group}"
start = "earliest"
bounded = true
connect_timeout = "20s"
{security}

[[steps]]
type = "map"
module = {upper}

[[sinks]]
type = "kafka"
bootstrap = "{bootstrap}"
topic = "{output}"
transactional_prefix = "{prefix}"
connect_timeout = "20s"
{security}
"#,
        pipeline = names.pipeline,
        state = toml_path(&dir.join(&names.pipeline)),
        bootstrap = kafka::sasl_bootstrap(),
        input = names.input,
        group = names.group,
        output = names.output,
        prefix = names.prefix,
        upper = toml_path(&guest("uppercase")),
    );
    write_file(dir, &format!("{}.toml", names.pipeline), &text)
}

/// `weir run --quiet SPEC` with `password` in `PASSWORD_ENV`; also how long it took.
fn run(spec: &Path, password: &str) -> (Output, Duration) {
    let started = Instant::now();
    let out = weir()
        .args(["run", "--quiet"])
        .arg(spec)
        .env(PASSWORD_ENV, password)
        .env_remove("KAFKA_BOOTSTRAP")
        .output()
        .expect("run weir");
    (out, started.elapsed())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn assert_no_password(out: &Output) {
    for text in [
        stderr(out),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ] {
        for password in [PASSWORD_A, PASSWORD_B, PASSWORD_C, "wrong-password"] {
            assert!(!text.contains(password), "the password was printed: {text}");
        }
    }
}

/// The refusal of a run: exit 1, one line, no password; the line.
fn refused(out: &Output) -> String {
    assert_no_password(out);
    let line = refusal_line(out);
    eprintln!("refused: {line}");
    line
}

/// What `topic` holds: its committed values and the sum of its end offsets.
fn contents(topic: &str) -> (BTreeMap<String, usize>, i64) {
    (
        multiset(kafka::committed_values(topic)),
        kafka::end_offsets_sum(topic),
    )
}

#[test]
fn a_tenant_runs_exactly_once_inside_its_prefix_over_sasl() {
    let _one_at_a_time = kafka::exclusive();
    tenants();
    let dir = tempfile::tempdir().expect("tempdir");
    let (names, values) = topics_of("a.", "acl-own");
    let (out, took) = run(&spec(dir.path(), &names, "a"), PASSWORD_A);
    assert_no_password(&out);
    assert!(
        out.status.success(),
        "tenant a's run failed after {took:?}: {}",
        stderr(&out)
    );

    let expected = multiset(values.iter().map(|v| v.to_uppercase()));
    let got = multiset(kafka::committed_values(&names.output));
    assert_eq!(
        got,
        expected,
        "committed output differs (line, got, expected): {:?}",
        multiset_diff(&got, &expected, 10)
    );
    let offsets = kafka::committed_offsets(&names.group, &names.input);
    let total: i64 = offsets.values().map(|(o, _)| o).sum();
    assert_eq!(
        total, RECORDS as i64,
        "group {} committed the input's end: {offsets:?}",
        names.group
    );
}

#[test]
fn another_tenants_credentials_are_refused_by_the_broker() {
    let _one_at_a_time = kafka::exclusive();
    tenants();
    let dir = tempfile::tempdir().expect("tempdir");

    // b names a's topics, group and transactional prefix: Weir itself does not stop
    // this spec; the broker must.
    let (a_names, _) = topics_of("a.", "acl-theft");
    kafka::produce(
        &a_names.output,
        &[Input {
            partition: 0,
            key: "k".into(),
            value: "a's own record".into(),
            timestamp: 1,
        }],
    );
    let before = contents(&a_names.output);
    let (out, took) = run(&spec(dir.path(), &a_names, "b"), PASSWORD_B);
    let line = refused(&out);
    assert!(
        line.contains(&format!(
            "cannot read the metadata of topic {} on {}: refused by the broker (TopicAuthorizationFailed (Broker: Topic authorization failed))",
            a_names.output,
            kafka::sasl_bootstrap()
        )),
        "{line}"
    );
    assert!(
        took < Duration::from_secs(20),
        "refused only after {took:?}"
    );
    assert_eq!(contents(&a_names.output), before, "a's output changed");

    // b inside its own topics and group but with a's transactional prefix (whose
    // progress topic and transactional ids are a's): refused too, nothing written.
    let (mut b_names, _) = topics_of("b.", "acl-prefix");
    b_names.prefix = "a.".into();
    let before = contents(&b_names.output);
    let (out, _) = run(&spec(dir.path(), &b_names, "b"), PASSWORD_B);
    let line = refused(&out);
    assert!(line.contains("refused by the broker"), "{line}");
    assert!(line.contains("AuthorizationFailed"), "{line}");
    assert_eq!(contents(&b_names.output), before, "b's output changed");
    assert_eq!(before.1, 0);

    // b inside its own topics and prefix but committing to a's consumer group.
    let (mut b_names, _) = topics_of("b.", "acl-group");
    b_names.group = format!("a.{}", b_names.pipeline);
    let (out, took) = run(&spec(dir.path(), &b_names, "b"), PASSWORD_B);
    let line = refused(&out);
    assert!(
        line.contains("refused by the broker (GroupAuthorizationFailed"),
        "{line}"
    );
    // librdkafka keeps looking for the group's coordinator; Weir must not wait with it.
    assert!(
        took < Duration::from_secs(20),
        "refused only after {took:?}"
    );
    assert_eq!(contents(&b_names.output).1, 0, "b's output changed");
}

#[test]
fn a_wrong_password_fails_at_once_with_one_line() {
    let _one_at_a_time = kafka::exclusive();
    tenants();
    let dir = tempfile::tempdir().expect("tempdir");
    let (names, _) = topics_of("a.", "acl-password");
    let (out, took) = run(&spec(dir.path(), &names, "a"), "wrong-password");
    let line = refused(&out);
    assert!(
        line.contains(&format!(
            "Kafka at {} refused to authenticate user a with SCRAM-SHA-256",
            kafka::sasl_bootstrap()
        )),
        "{line}"
    );
    assert!(
        line.contains("check `security`'s username, mechanism and password"),
        "{line}"
    );
    // connect_timeout is 20 s: the refusal must not wait for it.
    assert!(
        took < Duration::from_secs(15),
        "refused only after {took:?}"
    );
    assert_eq!(contents(&names.output).1, 0, "nothing written");

    // No password at all: refused before connecting, naming the variable.
    let out = weir()
        .args(["run", "--quiet"])
        .arg(spec(dir.path(), &names, "a"))
        .env_remove(PASSWORD_ENV)
        .output()
        .expect("run weir");
    let line = refused(&out);
    assert!(
        line.contains(&format!("security.password_env: {PASSWORD_ENV} is not set")),
        "{line}"
    );
}

/// Adds ALLOW ACLs for `User:c` on the names under `prefix` of `resource` (`--topic`,
/// `--group`) with Kafka's own AclCommand, then waits until the broker answers with them.
fn grant_c(resource: &str, prefix: &str, operations: &[&str]) {
    let bootstrap = kafka::bootstrap();
    let mut args = vec![
        "run",
        "org.apache.kafka.tools.AclCommand",
        "--bootstrap-server",
        &bootstrap,
        "--add",
        "--allow-principal",
        "User:c",
        "--resource-pattern-type",
        "prefixed",
        resource,
        prefix,
    ];
    for op in operations {
        args.extend(["--operation", op]);
    }
    kafka::kafka_tool(&args);
    let deadline = Instant::now() + Duration::from_secs(30);
    let kind = if resource == "--topic" {
        "TOPIC"
    } else {
        "GROUP"
    };
    loop {
        let listed = kafka::kafka_tool(&[
            "run",
            "org.apache.kafka.tools.AclCommand",
            "--bootstrap-server",
            &bootstrap,
            "--list",
            "--principal",
            "User:c",
        ]);
        if listed.contains(&format!(
            "resourceType={kind}, name={prefix}, patternType=PREFIXED"
        )) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "ACLs of User:c not applied: {listed}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_transactional_prefix_outside_the_principals_acls_is_refused_at_init() {
    let _one_at_a_time = kafka::exclusive();
    tenants();
    // Tenant c owns c., and may also use the topics and groups under x. (a hand-made
    // ACL set, not kafka.sh's), but not the transactional ids under x.
    kafka::tenant("c", PASSWORD_C, "c.");
    grant_c("--topic", "x.", &["Read", "Write", "Describe", "Create"]);
    grant_c("--group", "x.", &["Read", "Describe"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let (names, _) = topics_of("x.", "acl-txn");
    let (out, took) = run(&spec(dir.path(), &names, "c"), PASSWORD_C);
    let line = refused(&out);
    assert!(
        line.contains(&format!(
            "producer x.{}.0.0: initialising transactions: refused by the broker",
            names.pipeline
        )),
        "{line}"
    );
    assert!(
        line.contains("Transactional Id authorization failed"),
        "{line}"
    );
    assert!(
        took < Duration::from_secs(20),
        "refused only after {took:?}"
    );
    assert_eq!(contents(&names.output).1, 0, "nothing written");
    // Back to kafka.sh's exact set: the x. ACLs go.
    kafka::tenant("c", PASSWORD_C, "c.");
}
