//! `deploy/kubernetes/`: the manifests validate strictly against Kubernetes' schemas
//! (offline, `scripts/kubernetes/validate.sh`), and they agree with the `weir` they
//! deploy: the ConfigMaps hold a pipeline spec and a server config that Weir accepts,
//! the worker's arguments are flags `weir run` has, the StatefulSet's replicas are the
//! N of `--worker $(POD_INDEX)/N`, probes hit the port the endpoint serves, and every
//! secret a config names by `*_env` is in the Secret the pod loads.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use weir::server::config::ServerConfig;
use weir::spec::PipelineSpec;
use weir_tests::{guests_dir, repo_root, run_weir, stderr_of, write_file};

fn manifest(path: &str) -> String {
    let path = repo_root().join("deploy/kubernetes").join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The text of block scalar `key: |` in a ConfigMap's `data`, dedented.
fn config_map_file(yaml: &str, key: &str) -> String {
    let header = format!("  {key}: |");
    let mut lines = yaml.lines().skip_while(|l| *l != header);
    assert!(lines.next().is_some(), "no {key} in the ConfigMap");
    let mut text = String::new();
    for line in lines {
        if !line.is_empty() && !line.starts_with("    ") {
            break;
        }
        text.push_str(line.get(4..).unwrap_or(""));
        text.push('\n');
    }
    text
}

/// The value of the first `key: value` line (any indentation).
fn field<'a>(yaml: &'a str, key: &str) -> &'a str {
    let prefix = format!("{key}: ");
    yaml.lines()
        .find_map(|l| l.trim_start().strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {key} in\n{yaml}"))
        .trim()
}

/// The items of the list under `key:` (lines `- item`), in order.
fn list<'a>(yaml: &'a str, key: &str) -> Vec<&'a str> {
    let header = format!("{key}:");
    yaml.lines()
        .skip_while(|l| l.trim() != header)
        .skip(1)
        .map_while(|l| l.trim_start().strip_prefix("- "))
        .collect()
}

/// Every `NAME` of `*_env = "NAME"` in a TOML text.
fn env_names(toml: &str) -> BTreeSet<String> {
    toml.split("_env = \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

/// The keys of a Secret's `stringData`.
fn secret_keys(yaml: &str) -> BTreeSet<String> {
    yaml.lines()
        .skip_while(|l| *l != "stringData:")
        .skip(1)
        .filter_map(|l| l.strip_prefix("  ")?.split_once(':'))
        .map(|(k, _)| k.to_owned())
        .collect()
}

#[test]
fn the_manifests_validate_strictly_against_the_kubernetes_schemas() {
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/kubernetes/validate.sh"))
        .output()
        .expect("run validate.sh");
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("10 manifests valid (strict)"), "{err}");
}

#[test]
fn the_worker_manifests_agree_with_weir_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config_map = manifest("worker/configmap.yaml");
    let spec = config_map_file(&config_map, "pipeline.toml").replace(
        "/opt/weir/modules/",
        &format!("{}/", guests_dir().display()),
    );
    let spec = PipelineSpec::parse(&spec, dir.path(), "worker/configmap.yaml")
        .unwrap_or_else(|e| panic!("the worker's pipeline.toml: {e}"));
    assert_eq!(spec.name, "uppercase-kafka");
    assert!(
        spec.checkpoint.dir.to_string().starts_with("s3://"),
        "workers keep their checkpoints off the pod: {}",
        spec.checkpoint.dir
    );

    let statefulset = manifest("worker/statefulset.yaml");
    let args = list(&statefulset, "args");
    assert_eq!(args[..2], ["run", "/etc/weir/pipeline.toml"]);
    let help = run_weir(&["run", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        assert!(
            help.contains(&format!("{flag} ")),
            "`weir run` has no {flag}:\n{help}"
        );
    }
    let after = |flag: &str| {
        let i = args.iter().position(|a| *a == flag).expect(flag);
        args[i + 1]
    };
    let workers = after("--worker")
        .strip_prefix("$(POD_INDEX)/")
        .expect("the worker index is the pod's");
    assert_eq!(field(&statefulset, "replicas"), workers, "replicas = N");
    let port = after("--http").rsplit(':').next().expect("a port");
    assert_eq!(field(&statefulset, "containerPort"), port);
    assert!(
        statefulset.contains("mountPath: /etc/weir\n"),
        "the spec is mounted"
    );

    let needed = env_names(&config_map_file(&config_map, "pipeline.toml"));
    let secret = secret_keys(&manifest("worker/secret.yaml"));
    assert!(
        needed.is_subset(&secret),
        "{needed:?} not all in {secret:?}"
    );
    for aws in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
        assert!(secret.contains(aws), "{aws} for the s3:// checkpoint dir");
    }
}

#[test]
fn the_server_manifests_agree_with_weir_serve() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config_map = manifest("server/configmap.yaml");
    let text = config_map_file(&config_map, "server.toml");
    // The admin token comes from the Secret in the pod; here from a file.
    let token = write_file(dir.path(), "admin-token", "a-test-admin-token-0123456789");
    let local = text.replace(
        "admin_token_env = \"WEIR_ADMIN_TOKEN\"",
        &format!("admin_token_file = {:?}", token.display().to_string()),
    );
    assert_ne!(
        local, text,
        "server.toml takes its admin token from WEIR_ADMIN_TOKEN"
    );
    let path: PathBuf = write_file(dir.path(), "server.toml", &local);
    let config = ServerConfig::load(Path::new(&path))
        .unwrap_or_else(|e| panic!("the server's server.toml: {e}"));
    assert_eq!(config.data_dir, Path::new("/var/lib/weir"));
    let port = config.listen.rsplit(':').next().expect("a port");
    let deployment = manifest("server/deployment.yaml");
    assert_eq!(field(&deployment, "containerPort"), port);
    assert!(
        deployment.contains("mountPath: /var/lib/weir\n"),
        "data_dir on the volume"
    );

    let needed = env_names(&text);
    assert!(needed.contains("WEIR_ADMIN_TOKEN"));
    let secret = secret_keys(&manifest("server/secret.yaml"));
    assert!(
        needed.is_subset(&secret),
        "{needed:?} not all in {secret:?}"
    );
}
