//! In-process tests of `security`: every refusal names its field, a password is read
//! from the environment or a file when resolved, and no Debug output or error carries
//! it.

use std::time::Duration;

use super::*;

use crate::connector::kafka::client::{Endpoint, client_config};
use crate::connector::kafka::config::{KafkaSinkConfig, KafkaSourceConfig};

const SECRET: &str = "hunter2-never-printed";

fn parse(text: &str) -> Result<SecurityConfig, String> {
    let c: SecurityConfig = toml::from_str(text).map_err(|e| e.to_string())?;
    c.validate().map_err(|e| e.message)?;
    Ok(c)
}

fn refusal(text: &str) -> String {
    parse(text).expect_err(text)
}

const SCRAM: &str = r#"
protocol = "sasl_plaintext"
mechanism = "SCRAM-SHA-256"
username = "a"
password_env = "WEIR_TEST_SECURITY_PASSWORD_A"
"#;

#[test]
fn valid_tables_parse() {
    let c = parse(SCRAM).expect("scram");
    assert_eq!(c.protocol, SecurityProtocol::SaslPlaintext);
    assert_eq!(c.mechanism, Some(SaslMechanism::ScramSha256));
    parse("protocol = \"plaintext\"").expect("plaintext");
    parse("protocol = \"ssl\"\nca = \"ca.pem\"").expect("ssl with a ca");
    parse(
        "protocol = \"sasl_ssl\"\nmechanism = \"SCRAM-SHA-512\"\nusername = \"u\"\npassword_file = \"pw\"\nca = \"ca.pem\"",
    )
    .expect("sasl_ssl");
    parse("protocol = \"sasl_ssl\"\nmechanism = \"PLAIN\"\nusername = \"u\"\npassword_env = \"P\"")
        .expect("plain");
}

#[test]
fn each_refusal_names_its_field() {
    let cases: &[(&str, &str)] = &[
        (
            "protocol = \"sasl_plaintext\"\nusername = \"a\"\npassword_env = \"P\"",
            "security.mechanism is required",
        ),
        (
            "protocol = \"sasl_plaintext\"\nmechanism = \"PLAIN\"\npassword_env = \"P\"",
            "security.username is required",
        ),
        (
            "protocol = \"sasl_plaintext\"\nmechanism = \"PLAIN\"\nusername = \"\"\npassword_env = \"P\"",
            "security.username is required",
        ),
        (
            "protocol = \"sasl_plaintext\"\nmechanism = \"PLAIN\"\nusername = \"a\"",
            "security.password_env: give exactly one of password_env and password_file",
        ),
        (
            "protocol = \"sasl_plaintext\"\nmechanism = \"PLAIN\"\nusername = \"a\"\npassword_env = \"P\"\npassword_file = \"f\"",
            "security.password_env: give exactly one of password_env and password_file",
        ),
        (
            "protocol = \"sasl_plaintext\"\nmechanism = \"PLAIN\"\nusername = \"a\"\npassword_env = \"\"",
            "security.password_env must name an environment variable",
        ),
        (
            "protocol = \"plaintext\"\nusername = \"a\"",
            "security.username is only for protocol sasl_plaintext or sasl_ssl, not plaintext",
        ),
        (
            "protocol = \"ssl\"\nmechanism = \"PLAIN\"",
            "security.mechanism is only for protocol sasl_plaintext or sasl_ssl, not ssl",
        ),
        (
            "protocol = \"plaintext\"\npassword_file = \"f\"",
            "security.password_file is only for protocol",
        ),
        (
            "protocol = \"sasl_plaintext\"\nmechanism = \"PLAIN\"\nusername = \"a\"\npassword_env = \"P\"\nca = \"ca.pem\"",
            "security.ca is only for protocol ssl or sasl_ssl, not sasl_plaintext",
        ),
    ];
    for (text, expected) in cases {
        let e = refusal(text);
        assert!(e.starts_with(expected), "{text:?}: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
    // Serde's own refusals: unknown keys, bad values, a missing protocol.
    assert!(
        refusal("protocol = \"sasl_plaintext\"\npassword = \"x\"")
            .contains("unknown field `password`")
    );
    assert!(refusal("protocol = \"tls\"").contains("unknown variant `tls`"));
    assert!(
        refusal("protocol = \"sasl_ssl\"\nmechanism = \"GSSAPI\"")
            .contains("unknown variant `GSSAPI`")
    );
    assert!(refusal("username = \"a\"").contains("missing field `protocol`"));
}

#[test]
fn a_spec_refuses_a_bad_security_table_at_its_line() {
    let spec = r#"name = "p"

[[sources]]
type = "kafka"
topic = "in"

[[sinks]]
type = "kafka"
topic = "out"
security = { protocol = "sasl_plaintext", mechanism = "SCRAM-SHA-256", username = "a" }
"#;
    let e = crate::spec::PipelineSpec::parse(spec, std::path::Path::new("."), "spec.toml")
        .expect_err("no password source");
    assert_eq!(
        e.to_string(),
        "spec.toml line 10: security.password_env: give exactly one of password_env and password_file with protocol sasl_plaintext"
    );
    let e = crate::spec::PipelineSpec::parse(
        &spec.replace("username = \"a\"", "username = \"a\", token = \"x\""),
        std::path::Path::new("."),
        "spec.toml",
    )
    .expect_err("unknown key");
    assert!(e.to_string().contains("unknown field `token`"), "{e}");
}

#[test]
fn the_password_is_read_from_the_environment_at_resolve_and_never_shown() {
    let c = parse(SCRAM).expect("scram");
    let e = c.resolve("kafka sink").expect_err("variable not set");
    assert_eq!(
        e.to_string(),
        "kafka sink: cannot read the Kafka password: security.password_env: WEIR_TEST_SECURITY_PASSWORD_A is not set"
    );
    // The environment as the resolver sees it (the workspace forbids `unsafe`, and so
    // edition 2024's `set_var`).
    let env = |var: &str| match var {
        "WEIR_TEST_SECURITY_PASSWORD_A" => Ok(SECRET.to_owned()),
        "EMPTY" => Ok(String::new()),
        _ => Err(std::env::VarError::NotPresent),
    };
    let e = parse(&SCRAM.replace("WEIR_TEST_SECURITY_PASSWORD_A", "EMPTY"))
        .expect("scram")
        .resolve_with("kafka sink", env)
        .expect_err("empty");
    assert_eq!(
        e.to_string(),
        "kafka sink: cannot read the Kafka password: security.password_env: EMPTY is empty"
    );
    let security = c.resolve_with("kafka sink", env).expect("resolves");
    assert!(security.uses_sasl());
    assert_eq!(security.principal(), "user a with SCRAM-SHA-256");
    let endpoint = Endpoint {
        bootstrap: "127.0.0.1:9".into(),
        security: security.clone(),
    };
    let config = client_config(&endpoint, Duration::from_secs(1));
    assert_eq!(config.get("sasl.password"), Some(SECRET));
    assert_eq!(config.get("sasl.username"), Some("a"));
    assert_eq!(config.get("sasl.mechanisms"), Some("SCRAM-SHA-256"));
    assert_eq!(config.get("security.protocol"), Some("sasl_plaintext"));
    for shown in [
        format!("{security:?}"),
        format!("{endpoint:?}"),
        format!("{config:?}"),
        format!("{c:?}"),
    ] {
        assert!(!shown.contains(SECRET), "{shown}");
    }
    assert!(format!("{security:?}").contains("<redacted>"));
}

#[test]
fn the_password_file_is_read_at_resolve_and_never_quoted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("pw");
    std::fs::write(&file, format!("{SECRET}\n")).expect("write");
    let text = "protocol = \"sasl_ssl\"\nmechanism = \"SCRAM-SHA-512\"\nusername = \"u\"\npassword_file = \"pw\"\nca = \"ca.pem\"";
    let mut c = parse(text).expect("parses");
    c.resolve_paths(dir.path());
    assert_eq!(c.ca.as_deref(), Some(dir.path().join("ca.pem").as_path()));
    let security = c.resolve("kafka source").expect("resolves");
    let mut config = rdkafka::ClientConfig::new();
    security.apply(&mut config);
    assert_eq!(
        config.get("sasl.password"),
        Some(SECRET),
        "one line break dropped"
    );
    assert_eq!(
        config.get("ssl.ca.location"),
        Some(dir.path().join("ca.pem").to_str().expect("utf-8 path"))
    );
    assert!(!format!("{security:?}").contains(SECRET));

    let refused = |content: Option<&[u8]>| {
        let _ = std::fs::remove_file(&file);
        if let Some(bytes) = content {
            std::fs::write(&file, bytes).expect("write");
        }
        let e = c.resolve("kafka source").expect_err("refused").to_string();
        assert!(!e.contains(SECRET), "{e}");
        assert!(!e.contains('\n'), "{e}");
        e
    };
    let e = refused(None);
    assert!(
        e.starts_with("kafka source: cannot read the Kafka password: security.password_file "),
        "{e}"
    );
    assert!(refused(Some(b"\n")).ends_with(": empty"));
    let mut not_utf8 = SECRET.as_bytes().to_vec();
    not_utf8.push(0xff);
    assert!(refused(Some(&not_utf8)).ends_with(": not valid UTF-8"));
    let mut huge = SECRET.repeat(4000).into_bytes();
    huge.push(b'\n');
    assert!(refused(Some(&huge)).contains("not a password file"));
    let _ = std::fs::remove_file(&file);
    std::fs::create_dir(&file).expect("mkdir");
    assert!(
        c.resolve("kafka source")
            .expect_err("a dir")
            .to_string()
            .ends_with(": not a regular file")
    );
}

#[test]
fn connectors_without_security_stay_plaintext_and_sinks_must_agree() {
    let source = KafkaSourceConfig::new("in");
    assert!(source.security.is_none());
    let endpoint = Endpoint::plaintext("127.0.0.1:9");
    let config = client_config(&endpoint, Duration::from_secs(1));
    assert_eq!(config.get("security.protocol"), Some("plaintext"));
    assert_eq!(config.get("sasl.username"), None);

    let a = KafkaSinkConfig::new("x");
    let mut b = KafkaSinkConfig::new("y");
    b.security = Some(parse(SCRAM).expect("scram"));
    let sinks = vec![("sink-0".to_owned(), &a), ("sink-1".to_owned(), &b)];
    let e = crate::connector::kafka::preflight::shared_settings(&sinks).expect_err("differ");
    assert!(e.to_string().contains("set `security` differently"), "{e}");
}
