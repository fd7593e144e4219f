//! The model test of the pipeline lifecycle (issue 50): random interleavings of a
//! tenant's calls (create, start, stop, delete; one to four at once, on two names) and
//! kills of the server between rounds, against the real handlers, catalog and
//! supervisor, with a stand-in for `weir run` (a shell script that runs until SIGTERM
//! and does nothing for `reset-kafka`). After every round, once every call answered:
//!
//! - no call answered 5xx;
//! - nothing runs for a pipeline the catalog does not hold, or holds as `deleted` or
//!   `stopped`; one the tenant left `running` has exactly one process per worker (one
//!   generation: never two of one worker);
//! - no pipeline directory outlives its row.
//!
//! A kill stops the workers as the kernel would (without a word to the catalog), may
//! leave a delete recorded but not done (as a kill right after `desired: deleted` was
//! written does), and starts a new server on the same data directory, which resumes
//! the `running` pipelines and finishes the recorded deletes.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::{create, delete, start, stop};
use crate::server::app::{App, TenantAuth};
use crate::server::catalog::TenantRow;
use crate::server::config::ServerConfig;
use crate::server::error::ApiError;
use crate::server::retire;
use crate::server::wire::{Desired, Module};

/// Sequences of rounds, each from its own seed.
const SEQUENCES: u64 = 40;
/// Rounds of concurrent calls in a sequence.
const ROUNDS: usize = 10;
const NAMES: [&str; 2] = ["p", "q"];
const MODULE: &str = "0000000000000000000000000000000000000000000000000000000000000001";

/// `weir run` runs until SIGTERM and then exits 0, as after a final checkpoint;
/// `weir reset-kafka` has nothing to reset.
const FAKE_WEIR: &str = "#!/bin/sh
[ \"$1\" = run ] || exit 0
trap 'exit 0' TERM
while :; do /bin/sleep 1 & wait $!; done
";

#[derive(Debug, Clone, Copy)]
enum Call {
    Create { name: usize, workers: u32 },
    Start(usize),
    Stop(usize),
    Delete(usize),
}

fn random_call(rng: &mut StdRng) -> Call {
    let name = rng.random_range(0..NAMES.len());
    match rng.random_range(0..4) {
        0 => Call::Create {
            name,
            workers: rng.random_range(1..=2),
        },
        1 => Call::Start(name),
        2 => Call::Stop(name),
        _ => Call::Delete(name),
    }
}

struct Server {
    dir: tempfile::TempDir,
    config: PathBuf,
    program: PathBuf,
}

impl Server {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let program = dir.path().join("fake-weir");
        std::fs::write(&program, FAKE_WEIR).expect("script");
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::write(dir.path().join("admin-token"), "model-admin-token").expect("token");
        let config = dir.path().join("server.toml");
        std::fs::write(
            &config,
            "data_dir = \"data\"\nadmin_token_file = \"admin-token\"\n\
             [workers]\nrestart_backoff = \"10ms\"\nmax_backoff = \"20ms\"\nstop_timeout = \"10s\"\n\
             [isolation]\ncgroups = \"off\"\n\
             [kafka]\nbootstrap = \"127.0.0.1:9\"\n\
             [[tenants]]\nid = \"t\"\nquotas = { workers = 2 }\n",
        )
        .expect("config");
        Server {
            dir,
            config,
            program,
        }
    }

    /// A server on the data directory, as `weir serve` opens one (the tenant and its
    /// module in the catalog), with its pipelines resumed and its deletes finished.
    async fn open(&self) -> Arc<App> {
        let config = ServerConfig::load(&self.config).expect("config");
        let app = crate::server::open(config, self.program.clone()).expect("open");
        app.catalog
            .add_module(
                "t",
                &Module {
                    id: MODULE.into(),
                    name: "m".into(),
                    world: "mapper".into(),
                    exports: vec![],
                    imports: vec![],
                    size: 1,
                    uploaded_at: crate::server::catalog::now(),
                },
            )
            .expect("module");
        std::fs::write(app.store.path(MODULE), b"\0asm").expect("module file");
        let resuming = app.clone();
        tokio::task::spawn_blocking(move || {
            resuming.resume_pipelines().expect("resume");
            retire::finish_deletes(&resuming).expect("finish deletes");
        })
        .await
        .expect("resume");
        app
    }

    fn pipeline_dir(&self, name: &str) -> PathBuf {
        self.dir.path().join("data/tenants/t/pipelines").join(name)
    }
}

fn spec(name: &str) -> serde_json::Value {
    json!({
        "name": name,
        "sources": [{"type": "kafka", "topic": "t.in"}],
        "steps": [{"type": "map", "name": "m", "module": MODULE}],
        "sinks": [{"type": "kafka", "topic": format!("t.{name}-out")}],
    })
}

/// The status code of a handler's answer.
fn code<T>(answer: Result<T, ApiError>, ok: StatusCode) -> StatusCode {
    answer.map_or_else(|e| e.status(), |_| ok)
}

async fn call(app: Arc<App>, tenant: TenantRow, c: Call) -> (Call, StatusCode) {
    let name = |n: usize| Path(NAMES[n].to_owned());
    let status = match c {
        Call::Create { name: n, workers } => {
            let body = serde_json::from_value(json!({"spec": spec(NAMES[n]), "workers": workers}))
                .expect("body");
            code(
                create(State(app), TenantAuth(tenant), Json(body)).await,
                StatusCode::CREATED,
            )
        }
        Call::Start(n) => code(
            start(State(app), TenantAuth(tenant), name(n)).await,
            StatusCode::OK,
        ),
        Call::Stop(n) => code(
            stop(State(app), TenantAuth(tenant), name(n)).await,
            StatusCode::OK,
        ),
        Call::Delete(n) => code(
            delete(State(app), TenantAuth(tenant), name(n)).await,
            StatusCode::NO_CONTENT,
        ),
    };
    (c, status)
}

/// The stand-in workers of pipeline `name` under `data`, as (pid, worker argument).
fn processes(data: &FsPath, name: &str) -> Vec<(u32, String)> {
    let spec = data
        .join("data/tenants/t/pipelines")
        .join(name)
        .join("spec.toml");
    let spec = spec.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.contains(&spec) {
            let worker = args
                .iter()
                .position(|a| a == "--worker")
                .and_then(|i| args.get(i + 1).cloned())
                .unwrap_or_else(|| "0/1".into());
            found.push((pid, worker));
        }
    }
    found
}

/// Checks the invariants of the module doc for every name, waiting (bounded) for
/// processes that are still being started or reaped to settle.
fn check(server: &Server, app: &App, context: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let failures: Vec<String> = NAMES
            .iter()
            .filter_map(|name| violation(server, app, name))
            .collect();
        if failures.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{context}: {failures:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn violation(server: &Server, app: &App, name: &str) -> Option<String> {
    let row = app.catalog.pipeline("t", name).expect("catalog");
    let procs = processes(server.dir.path(), name);
    let mut per_worker: HashMap<&str, usize> = HashMap::new();
    for (_, w) in &procs {
        *per_worker.entry(w.as_str()).or_default() += 1;
    }
    if per_worker.values().any(|&n| n > 1) {
        return Some(format!("{name}: two processes of one worker: {procs:?}"));
    }
    match row {
        None if server.pipeline_dir(name).exists() => {
            Some(format!("{name}: a directory without its row"))
        }
        None if !procs.is_empty() => Some(format!("{name}: runs without a row: {procs:?}")),
        Some(r) if r.desired != Desired::Running && !procs.is_empty() => Some(format!(
            "{name}: runs while {}: {procs:?}",
            r.desired.as_str()
        )),
        Some(r) if r.desired == Desired::Running && procs.len() != r.workers as usize => Some(
            format!("{name}: {} workers wanted, running {procs:?}", r.workers),
        ),
        _ => None,
    }
}

/// The server dies: its workers with it (as the kernel's parent-death signal ends
/// them), no word to the catalog; maybe right after a delete of `cut` was recorded.
fn kill(app: &App, cut: Option<usize>) {
    app.supervisor.shutdown();
    if let Some(n) = cut
        && let Ok(Some(mut row)) = app.catalog.pipeline("t", NAMES[n])
    {
        row.desired = Desired::Deleted;
        app.catalog
            .update_pipeline(&row)
            .expect("record the delete");
    }
}

async fn run_sequence(seed: u64) -> usize {
    let mut rng = StdRng::seed_from_u64(seed);
    let server = Server::new();
    let mut app = server.open().await;
    let tenant = app.catalog.tenant("t").expect("catalog").expect("tenant");
    let mut calls = 0;
    for round in 0..ROUNDS {
        let batch: Vec<Call> = (0..rng.random_range(1..=4))
            .map(|_| random_call(&mut rng))
            .collect();
        calls += batch.len();
        let tasks: Vec<_> = batch
            .iter()
            .map(|&c| tokio::spawn(call(app.clone(), tenant.clone(), c)))
            .collect();
        for task in tasks {
            let (c, status) = task.await.expect("a call");
            assert!(
                !status.is_server_error(),
                "seed {seed} round {round}: {c:?} answered {status} (batch {batch:?})"
            );
        }
        let context = format!("seed {seed} round {round} after {batch:?}");
        let settled = app.clone();
        let server_ref = &server;
        tokio::task::block_in_place(|| check(server_ref, &settled, &context));
        if rng.random_bool(0.2) {
            let cut = rng
                .random_bool(0.5)
                .then(|| rng.random_range(0..NAMES.len()));
            let dying = app.clone();
            tokio::task::spawn_blocking(move || kill(&dying, cut))
                .await
                .expect("kill");
            app = server.open().await;
            tokio::task::block_in_place(|| check(server_ref, &app, &format!("{context}, killed")));
        }
    }
    let last = app.clone();
    tokio::task::spawn_blocking(move || last.supervisor.shutdown())
        .await
        .expect("shutdown");
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_interleavings_of_calls_and_server_kills_keep_one_lifecycle() {
    let mut calls = 0;
    for seed in 0..SEQUENCES {
        calls += run_sequence(seed).await;
    }
    assert!(calls >= SEQUENCES as usize * ROUNDS, "{calls} calls");
    println!(
        "{SEQUENCES} sequences, {} rounds, {calls} calls",
        SEQUENCES as usize * ROUNDS
    );
}
