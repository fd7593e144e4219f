//! Load on one `weir serve`: 20 concurrent pipelines of 4 tenants for about a minute
//! (Kafka -> WASM uppercase -> Kafka, each paced to run that long), every one
//! exactly-once at the end. Prints the server's peak RSS and the workers' RSS per
//! pipeline (docs/src/operations/hosting.md's figures come from this test's output) and
//! holds both to twice those figures.

use std::time::{Duration, Instant};

use serde_json::json;
use weir_tests::kafka::{self, Input};
use weir_tests::multiset;
use weir_tests::server::{TestServer, write_config};

const TENANTS: [&str; 4] = ["t1", "t2", "t3", "t4"];
const PER_TENANT: usize = 5;
const RECORDS: u64 = 3_000;
/// Records per second per pipeline: RECORDS / RATE is about a minute.
const RATE: u64 = 50;
/// The server's peak RSS docs/src/operations/hosting.md states, in MiB; the test allows
/// twice as much.
const SERVER_RSS_MIB: u64 = 35;
/// A pipeline's worker's RSS docs/src/operations/hosting.md states, in MiB; the test
/// allows twice as much.
const WORKER_RSS_MIB: u64 = 34;

/// Resident set size of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    weir_tests::proc_status_bytes(pid, "VmRSS").map_or(0, |bytes| bytes / 1024)
}

/// Pids of the worker processes of the server whose data dir is `data`.
fn workers(data: &str) -> Vec<u32> {
    weir_tests::pids_where(|cmdline| cmdline.contains(data) && cmdline.contains("--supervised-by"))
}

#[test]
fn twenty_pipelines_of_four_tenants_on_one_server() {
    let _one = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    write_config(dir.path(), "");
    let s = TestServer::start(dir.path());
    let data = dir.path().join("data").display().to_string();
    let pipelines = create_pipelines(&s);
    let started = Instant::now();
    let peaks = watch_until_finished(&s, &pipelines, &data);
    for p in &pipelines {
        let expected = multiset(p.records.iter().map(|r| r.value.to_uppercase()));
        assert_eq!(
            multiset(kafka::committed_values(&p.output)),
            expected,
            "pipeline {}",
            p.name
        );
    }
    let n = pipelines.len() as u64;
    eprintln!(
        "hosting load: {n} pipelines of {} tenants ran concurrently ({} workers at most) in {:.0} s; \
         server peak RSS {} MiB; workers' peak RSS {} MiB in all, {} MiB per pipeline",
        TENANTS.len(),
        peaks.workers_seen,
        started.elapsed().as_secs_f64(),
        peaks.server / 1024,
        peaks.workers / 1024,
        peaks.workers / 1024 / n
    );
    assert_eq!(
        peaks.workers_seen,
        pipelines.len(),
        "not all pipelines ran at once"
    );
    // The hosting figures of docs/src/operations/hosting.md (server about 35 MiB, a
    // worker about 34 MiB), with room for allocator and page-cache noise: twice as much
    // fails.
    assert!(
        peaks.server <= 2 * SERVER_RSS_MIB * 1024,
        "server peak RSS {} MiB",
        peaks.server / 1024
    );
    assert!(
        peaks.workers / n <= 2 * WORKER_RSS_MIB * 1024,
        "{} MiB of workers' RSS per pipeline",
        peaks.workers / 1024 / n
    );
}

/// One tenant's pipeline of the load: its owner's token, name, output topic and input.
struct Pipeline {
    token: String,
    name: String,
    output: String,
    records: Vec<Input>,
}

/// `PER_TENANT` pipelines for each of `TENANTS` on `s`, their input produced, each paced
/// to `RATE` records/s.
fn create_pipelines(s: &TestServer) -> Vec<Pipeline> {
    let mut pipelines = Vec::new();
    for t in TENANTS {
        let token = s.tenant(t, json!({"pipelines": PER_TENANT}));
        let module = s.push(&token, "uppercase");
        for i in 0..PER_TENANT {
            let name = format!("p{i}-{}", kafka::unique_name("load"));
            let (input, output) = (format!("{t}.{name}-in"), format!("{t}.{name}-out"));
            kafka::create_topic(&input, 1);
            kafka::create_topic(&output, 1);
            let records: Vec<Input> = (0..RECORDS)
                .map(|r| Input {
                    partition: 0,
                    key: format!("k{r}"),
                    value: format!("{name}-{r}"),
                    timestamp: 1_700_000_000_000,
                })
                .collect();
            kafka::produce(&input, &records);
            let spec = json!({
                "name": name,
                "checkpoint": {"interval": "1s"},
                "sources": [{"type": "kafka", "topic": input, "start": "earliest", "bounded": true, "rate": RATE}],
                "steps": [{"type": "map", "module": module}],
                "sinks": [{"type": "kafka", "topic": output}],
            });
            let created = s.post("/v1/pipelines", Some(&token), &json!({"spec": spec}));
            assert_eq!(created.status, 201, "{created:?}");
            pipelines.push(Pipeline {
                token: token.clone(),
                name,
                output,
                records,
            });
        }
    }
    pipelines
}

/// Peak RSS (KiB) of the server and of its workers together, and the most workers seen
/// at once, sampled every second while the pipelines run.
struct Peaks {
    server: u64,
    workers: u64,
    workers_seen: usize,
}

/// Samples `Peaks` until every pipeline is finished (bounded: 600 s).
fn watch_until_finished(s: &TestServer, pipelines: &[Pipeline], data: &str) -> Peaks {
    let started = Instant::now();
    let mut peaks = Peaks {
        server: 0,
        workers: 0,
        workers_seen: 0,
    };
    loop {
        peaks.server = peaks.server.max(rss_kib(s.pid()));
        let pids = workers(data);
        peaks.workers_seen = peaks.workers_seen.max(pids.len());
        peaks.workers = peaks
            .workers
            .max(pids.iter().map(|p| rss_kib(*p)).sum::<u64>());
        let unfinished: Vec<String> = pipelines
            .iter()
            .filter_map(|p| {
                let status = s.get(&format!("/v1/pipelines/{}", p.name), Some(&p.token));
                (status.body["state"] != "finished").then(|| format!("{}: {}", p.name, status.body))
            })
            .collect();
        if unfinished.is_empty() {
            return peaks;
        }
        // What an operator would look at: each unfinished pipeline's status (its state,
        // restarts and last error).
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "{} of {} finished; the others' status:\n{}",
            pipelines.len() - unfinished.len(),
            pipelines.len(),
            unfinished.join("\n")
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}
