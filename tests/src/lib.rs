//! Shared helpers for Weir's end-to-end tests (`tests/tests/*/`, one test binary per
//! folder, and `broker_pause.rs`) and benchmarks.
//!
//! Tests drive the real `weir` binary (built by `make test` before the tests run) and
//! the real guests (`make guests` puts them in `build/guests/`), so they exercise
//! exactly what a user runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Where `make guests` put the guest components.
pub fn guests_dir() -> PathBuf {
    std::env::var_os("WEIR_GUESTS_DIR")
        .map_or_else(|| repo_root().join("build/guests"), PathBuf::from)
}

/// The path of guest `name` (e.g. `word_count`); panics with what to do if missing.
pub fn guest(name: &str) -> PathBuf {
    let path = guests_dir().join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: run `make guests` first (make test does)",
        path.display()
    );
    path
}

/// The `weir` binary: `WEIR_BIN`, else the one cargo built beside this executable (a
/// test's is one directory deeper, in target/debug/deps; a bench binary's is beside it).
pub fn weir_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("WEIR_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("an executable's directory");
    let candidates = [Some(dir), dir.parent()];
    let found = candidates
        .into_iter()
        .flatten()
        .map(|d| d.join("weir"))
        .find(|bin| bin.is_file());
    found.unwrap_or_else(|| {
        panic!(
            "weir is missing next to {}: run `cargo build --bins` first (make test does)",
            exe.display()
        )
    })
}

/// A `weir` command with logs kept quiet unless the test asks for them.
pub fn weir() -> Command {
    let mut cmd = Command::new(weir_bin());
    cmd.env_remove("WEIR_FAULT");
    cmd
}

/// Runs `weir` with `args`, returning its output.
pub fn run_weir(args: &[&str]) -> Output {
    weir().args(args).output().expect("spawn weir")
}

/// Runs `weir run --quiet spec` to its end and asserts it succeeded (`what` names the
/// run in the failure, with its stderr).
pub fn run_spec_ok(spec: &Path, what: &str) {
    let out = weir()
        .args(["run", "--quiet"])
        .arg(spec)
        .output()
        .expect("spawn weir");
    assert!(
        out.status.success(),
        "{what} ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes `text` as `name` in `dir`, returning the path.
pub fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write test file");
    path
}

/// Every line of every committed file directly in `dir` (staging is ignored).
pub fn committed_lines(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return lines;
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read committed file");
        lines.extend(text.lines().map(str::to_owned));
    }
    lines
}

/// Counts of each distinct line.
pub fn multiset<I: IntoIterator<Item = String>>(lines: I) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in lines {
        *counts.entry(line).or_insert(0) += 1;
    }
    counts
}

/// Lines that differ between two multisets, for assertion messages: (line, left, right).
pub fn multiset_diff(
    a: &BTreeMap<String, usize>,
    b: &BTreeMap<String, usize>,
    limit: usize,
) -> Vec<(String, usize, usize)> {
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let (x, y) = (
                a.get(k).copied().unwrap_or(0),
                b.get(k).copied().unwrap_or(0),
            );
            (x != y).then(|| (k.clone(), x, y))
        })
        .take(limit)
        .collect()
}

/// Everything a spawned child wrote to its piped stderr (call after it exited).
pub fn take_stderr(child: &mut std::process::Child) -> String {
    use std::io::Read;
    let mut text = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = stderr.read_to_string(&mut text);
    }
    text
}

/// `weir run --quiet <spec>` reading its stdin from the caller (piped), stderr piped,
/// stdout discarded.
pub fn start_on_stdin(spec: &Path) -> std::process::Child {
    weir()
        .args(["run", "--quiet"])
        .arg(spec)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn weir")
}

/// `weir run --quiet --worker <worker> <spec>`, stderr piped, with `WEIR_FAULT=fault`
/// if given.
pub fn start_worker(spec: &Path, worker: &str, fault: Option<&str>) -> std::process::Child {
    let mut cmd = weir();
    cmd.args(["run", "--quiet", "--worker", worker])
        .arg(spec)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    if let Some(fault) = fault {
        cmd.env("WEIR_FAULT", fault);
    }
    cmd.spawn().expect("spawn weir")
}

/// Waits for `child` (bounded: it must end by `deadline`, else it is killed and the
/// test fails); its exit status and stderr.
pub fn wait_until(
    child: &mut std::process::Child,
    deadline: std::time::Instant,
    what: &str,
) -> (std::process::ExitStatus, String) {
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return (status, take_stderr(child));
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not end in time: {}", take_stderr(child));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The test bucket of the local S3-compatible server (`scripts/s3/s3.sh up`, started by
/// `make test`); `None` (the test skips) only with `WEIR_SKIP_S3=1`, else a panic that
/// says how to start the server.
pub fn s3_bucket() -> Option<String> {
    match (
        std::env::var("AWS_ENDPOINT_URL"),
        std::env::var("WEIR_S3_BUCKET"),
    ) {
        (Ok(_), Ok(bucket)) => Some(bucket),
        _ if std::env::var("WEIR_SKIP_S3").as_deref() == Ok("1") => {
            eprintln!("\n*** SKIPPED (WEIR_SKIP_S3=1): no S3-compatible server ***\n");
            None
        }
        _ => panic!(
            "no S3-compatible server: AWS_ENDPOINT_URL / WEIR_S3_BUCKET unset; run \
             `eval \"$(bash scripts/s3/s3.sh up)\"` and export its variables first (make test \
             does), or set WEIR_SKIP_S3=1 to skip the object store tests"
        ),
    }
}

/// A size field of `/proc/<pid>/status` (`"VmRSS"`, `"VmHWM"`, ...), in bytes; `None`
/// once the process is gone (or on a system without `/proc`).
pub fn proc_status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?;
    let kib: u64 = line.split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// The pids of the processes whose command line (its arguments joined by NUL bytes,
/// read lossily) satisfies `matches`; processes that end meanwhile are passed over.
pub fn pids_where(matches: impl Fn(&str) -> bool) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(Result::ok)
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            matches(&String::from_utf8_lossy(&cmdline)).then_some(pid)
        })
        .collect()
}

/// Waits (bounded by `within`) until a process whose command line satisfies `matches`
/// has lived half a second (seen, and seen again 500 ms later), passing over
/// short-lived ones.
pub fn wait_for_a_lasting_process(matches: impl Fn(&str) -> bool, within: Duration) {
    let deadline = std::time::Instant::now() + within;
    loop {
        let seen = pids_where(&matches);
        std::thread::sleep(Duration::from_millis(500));
        if pids_where(&matches).iter().any(|pid| seen.contains(pid)) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no such process lived half a second within {within:?}"
        );
    }
}

/// Asserts that every process whose command line satisfies `matches` is gone within
/// `within` (`what` names them in the failure).
pub fn assert_processes_gone_within(matches: impl Fn(&str) -> bool, within: Duration, what: &str) {
    let deadline = std::time::Instant::now() + within;
    loop {
        let left = pids_where(&matches);
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} still ran {within:?} later: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// stderr as text, for assertions.
pub fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The one line a refused `weir` command printed: asserts exit code 1 and exactly one
/// non-empty line on stderr.
pub fn refusal_line(out: &Output) -> String {
    let err = stderr_of(out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "expected exit code 1, stderr: {err}"
    );
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {err}");
    lines[0].to_owned()
}

/// Pipeline `name`: the lines of `input` (a file or directory) mapped through `module`
/// into the file sink `<dir>/out`, state under `<dir>/state`.
pub fn file_map_spec(name: &str, dir: &Path, input: &Path, module: &Path) -> String {
    format!(
        r#"
name = "{name}"
state_dir = {state}

[[sources]]
type = "file"
path = {input}

[[steps]]
type = "map"
module = {module}

[[sinks]]
type = "file"
path = {out}
"#,
        state = toml_path(&dir.join("state")),
        input = toml_path(input),
        module = toml_path(module),
        out = toml_path(&dir.join("out")),
    )
}

/// A component that passes the world check (it exports `weir:transform/map`) but
/// imports a foreign interface and `wasi:http`, which weir does not link: refused at
/// load with [`FOREIGN_IMPORT_REFUSAL`]. WAT text (parse it with the `wat` crate).
pub const FOREIGN_IMPORTER_WAT: &str = r#"(component
  (import "acme:evil/thing@1.0.0" (instance))
  (import "wasi:filesystem/preopens@0.2.3" (instance))
  (import "wasi:http/outgoing-handler@0.2.3" (instance))
  (core module $m (func (export "f")))
  (core instance $i (instantiate $m))
  (func $f (canon lift (core func $i "f")))
  (instance $api (export "map" (func $f)))
  (export "weir:transform/map@0.1.0" (instance $api)))"#;

/// The reason [`FOREIGN_IMPORTER_WAT`] is refused, after `<module name>: `: every
/// offender (not the WASI 0.2 filesystem import, which is linked deny-by-default), then
/// everything a guest may import, on one line.
pub const FOREIGN_IMPORT_REFUSAL: &str = "imports acme:evil/thing@1.0.0, \
    wasi:http/outgoing-handler@0.2.3 which a weir guest may not use (allowed: \
    weir:transform/{log,config,types}, wasi:io/{error,streams,poll}, \
    wasi:cli/{stdout,stderr,stdin,exit,environment,terminal-input,terminal-output,\
    terminal-stdin,terminal-stdout,terminal-stderr}, wasi:clocks/{wall-clock,monotonic-clock}, \
    wasi:random/{random,insecure,insecure-seed}, wasi:filesystem/{types,preopens}, \
    wasi:sockets/{network,instance-network,tcp,tcp-create-socket,udp,udp-create-socket,\
    ip-name-lookup}, WASI at 0.2.x; wasi:http is not linked)";

/// The probes the `sandbox_probe` guest (tests/guests/sandbox-probe) is asked to run,
/// one per input value, and the listeners that make its network probes real: the TCP
/// and UDP ports really listen and `/etc/passwd` exists, so each refusal is the
/// sandbox's, not a closed port or a missing file.
pub struct SandboxProbes {
    tcp: std::net::TcpListener,
    udp: std::net::UdpSocket,
    /// Where the write probe tries to write; it must not appear.
    written: PathBuf,
}

impl SandboxProbes {
    /// Binds the listeners; the write probe aims at `written`.
    pub fn new(written: PathBuf) -> Self {
        assert!(Path::new("/etc/passwd").is_file());
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("tcp listener");
        tcp.set_nonblocking(true).expect("nonblocking");
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp socket");
        udp.set_nonblocking(true).expect("nonblocking");
        Self { tcp, udp, written }
    }

    /// The address of the UDP socket, for the datagram probes of other guests.
    pub fn udp_addr(&self) -> std::net::SocketAddr {
        self.udp.local_addr().expect("addr")
    }

    /// Where the write probe aims; it must not appear.
    pub fn written(&self) -> &Path {
        &self.written
    }

    /// Each probe (an input value) and what the guest must answer for it.
    fn cases(&self) -> Vec<(String, &'static str)> {
        let tcp = self.tcp.local_addr().expect("addr");
        let udp = self.udp.local_addr().expect("addr");
        vec![
            ("read /etc/passwd".to_owned(), "denied: NotFound"),
            ("read hostname".to_owned(), "denied: NotFound"),
            ("readdir /".to_owned(), "denied: NotFound"),
            ("readdir .".to_owned(), "denied: NotFound"),
            (
                format!("write {}", self.written.display()),
                "denied: NotFound",
            ),
            ("env".to_owned(), "empty"),
            ("home".to_owned(), "denied: environment variable not found"),
            ("args".to_owned(), "empty"),
            ("stdin".to_owned(), "empty"),
            (format!("tcp {tcp}"), "denied: PermissionDenied"),
            (format!("udp {udp}"), "denied: PermissionDenied"),
            ("dns localhost:80".to_owned(), "denied: Uncategorized"),
        ]
    }

    /// The probes, in order: the guest's input values.
    pub fn probes(&self) -> Vec<String> {
        self.cases().into_iter().map(|(probe, _)| probe).collect()
    }

    /// The guest's output values for [`Self::probes`], in the same order:
    /// `<probe>: <outcome>`.
    pub fn answers(&self) -> Vec<String> {
        self.cases()
            .into_iter()
            .map(|(probe, outcome)| format!("{probe}: {outcome}"))
            .collect()
    }

    /// Asserts that nothing reached the host: no connection, no datagram, no file.
    pub fn assert_nothing_reached(&self) {
        assert!(
            self.tcp.accept().is_err(),
            "a connection reached the listener"
        );
        let mut buf = [0u8; 64];
        assert!(
            self.udp.recv_from(&mut buf).is_err(),
            "a datagram reached the socket"
        );
        assert!(
            !self.written.exists(),
            "the guest wrote {}",
            self.written.display()
        );
    }

    /// The address of the real TCP listener, for probes of other guests (the
    /// JavaScript probe's `fetch`, the Python probe's sockets and `urllib`):
    /// [`Self::assert_nothing_reached`] checks it too.
    pub fn tcp_addr(&self) -> std::net::SocketAddr {
        self.tcp.local_addr().expect("addr")
    }
}

/// A TOML string literal for a path.
pub fn toml_path(path: &Path) -> String {
    format!("{:?}", path.display().to_string())
}

/// Specs and runs shared by the Python and JavaScript guest tests.
pub mod guest_specs;

/// Long runs of one guest watched through the status file (guest memory, exact output).
pub mod soak;

// ---------------------------------------------------------------------------------
// Kafka: the broker the harness started (`KAFKA_BOOTSTRAP`), unique topics per test.
// ---------------------------------------------------------------------------------

/// The kill loop of the crash tests (SIGKILL at random moments and at fault points).
pub mod crash;

/// Kafka helpers for tests: topics, input, and reading output back.
pub mod server;

/// The keyed word count run as worker processes (workers tests).
pub mod word_count;

/// CPU time of a benchmark's processes over a span: its own, its `weir` children's, the
/// Kafka broker's.
pub mod process_cpu;

pub mod kafka {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Mutex, MutexGuard};
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::error::KafkaError;
    use rdkafka::message::Message;
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};

    const TIMEOUT: Duration = Duration::from_secs(30);

    /// The broker's bootstrap servers; panics with what to do if unset.
    /// Writes `<name>.toml` in `dir`: `source` (a `[[sources]]` table) -> WASM
    /// `uppercase` -> the Kafka topic `output`, parallelism 2, state in `state`,
    /// `checkpoint` the lines of the `[checkpoint]` table (`interval = "200ms"`);
    /// `sink_extra` adds keys to the Kafka sink.
    pub fn uppercase_spec(
        dir: &std::path::Path,
        name: &str,
        state: &std::path::Path,
        checkpoint: &str,
        source: &str,
        output: &str,
        sink_extra: &str,
    ) -> std::path::PathBuf {
        let text = format!(
            r#"
name = "{name}"
parallelism = 2
state_dir = {state}

[checkpoint]
{checkpoint}

{source}

[[steps]]
type = "map"
module = {upper}

[[sinks]]
type = "kafka"
topic = "{output}"
{sink_extra}
"#,
            state = crate::toml_path(state),
            upper = crate::toml_path(&crate::guest("uppercase")),
        );
        crate::write_file(dir, &format!("{name}.toml"), &text)
    }

    /// Serialises the Kafka tests of one test binary: one pipeline at a time against
    /// the shared broker, so their kill timings and throughput do not depend on each
    /// other on a 2-core machine.
    pub fn exclusive() -> MutexGuard<'static, ()> {
        static LOCK: Mutex<()> = Mutex::new(());
        LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    thread_local! {
        /// The cluster this thread's helpers talk to instead of `KAFKA_BOOTSTRAP`.
        static TARGET: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
    }

    /// Runs `f` with this thread's helpers (`create_topic`, `produce`, `read_all`, ...)
    /// talking to `bootstrap` (the replicated cluster) instead of the single broker.
    pub fn on<T>(bootstrap: &str, f: impl FnOnce() -> T) -> T {
        let before = TARGET.with(|t| t.replace(Some(bootstrap.to_owned())));
        let result = f();
        TARGET.with(|t| *t.borrow_mut() = before);
        result
    }

    /// The replicated cluster's bootstrap servers (`cluster.sh up`, which `make test`
    /// runs); panics with what to do if unset.
    pub fn cluster_bootstrap() -> String {
        std::env::var("KAFKA_CLUSTER_BOOTSTRAP").expect(
            "KAFKA_CLUSTER_BOOTSTRAP is not set: run the cluster tests with `make test`, or start \
             one with `eval \"$(bash scripts/kafka/cluster.sh up)\"` and export KAFKA_CLUSTER_BOOTSTRAP",
        )
    }

    /// `cluster.sh ARGS` (`kill 2`, `start 2`, `wait-isr`, ...); panics if it fails.
    pub fn cluster_tool(args: &[&str]) {
        let out = std::process::Command::new("bash")
            .arg(crate::repo_root().join("scripts/kafka/cluster.sh"))
            .args(args)
            .output()
            .expect("run cluster.sh");
        assert!(
            out.status.success(),
            "cluster.sh {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn bootstrap() -> String {
        if let Some(target) = TARGET.with(|t| t.borrow().clone()) {
            return target;
        }
        std::env::var("KAFKA_BOOTSTRAP").expect(
            "KAFKA_BOOTSTRAP is not set: run the Kafka tests with `make test`, or start a broker \
             with `eval \"$(bash scripts/kafka/kafka.sh up)\"` and export KAFKA_BOOTSTRAP",
        )
    }

    /// The broker's SASL/SCRAM listener (`kafka.sh up` prints it), where ACLs apply;
    /// panics with what to do if unset.
    pub fn sasl_bootstrap() -> String {
        std::env::var("KAFKA_SASL_BOOTSTRAP").expect(
            "KAFKA_SASL_BOOTSTRAP is not set: run the Kafka tests with `make test`, or start a broker \
             with `eval \"$(bash scripts/kafka/kafka.sh up)\"` and export KAFKA_SASL_BOOTSTRAP",
        )
    }

    /// `kafka.sh tenant ID PASSWORD PREFIX`: SCRAM user `id` whose ACLs are exactly
    /// those of a tenant owning the names under `prefix` (see kafka.sh).
    pub fn tenant(id: &str, password: &str, prefix: &str) {
        kafka_tool(&["tenant", id, password, prefix]);
    }

    /// A name no other test (or earlier run) uses: `<prefix>-<pid>-<time>-<n>`.
    pub fn unique_name(prefix: &str) -> String {
        static N: AtomicU64 = AtomicU64::new(0);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        format!(
            "{prefix}-{}-{now}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn config() -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", bootstrap())
            .set("log_level", "3");
        c
    }

    /// Creates `topic` with `partitions` partitions (the broker's default replication:
    /// 1 on the single broker, 3 on the cluster).
    pub fn create_topic(topic: &str, partitions: i32) {
        create_topic_with(topic, partitions, &[]);
    }

    /// `create_topic` with topic configs, e.g. `("message.timestamp.type",
    /// "LogAppendTime")`.
    pub fn create_topic_with(topic: &str, partitions: i32, configs: &[(&str, &str)]) {
        let admin: AdminClient<DefaultClientContext> = config().create().expect("admin client");
        let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(-1));
        for (key, value) in configs {
            new = new.set(key, value);
        }
        let opts = AdminOptions::new().operation_timeout(Some(TIMEOUT));
        let results =
            weir::connector::kafka::client::block_on(admin.create_topics([&new], &opts), TIMEOUT)
                .expect("CreateTopics answered")
                .expect("CreateTopics");
        for r in results {
            r.unwrap_or_else(|(t, e)| panic!("cannot create topic {t}: {e}"));
        }
        // The controller answers before the broker's metadata lists the partitions: a
        // client using the topic at once could be told it does not exist. Wait until
        // the broker lists every partition (bounded).
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let listed = admin
                .inner()
                .fetch_metadata(Some(topic), TIMEOUT)
                .ok()
                .and_then(|m| {
                    m.topics()
                        .iter()
                        .find(|t| t.name() == topic && t.error().is_none())
                        .map(|t| t.partitions().len())
                });
            if listed == Some(partitions as usize) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "topic {topic}: the broker lists {listed:?} of {partitions} partitions"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// One input record: partition, key, value, timestamp (ms).
    #[derive(Debug, Clone)]
    pub struct Input {
        pub partition: i32,
        pub key: String,
        pub value: String,
        pub timestamp: i64,
    }

    /// Produces `records` to `topic` (idempotent producer, acks=all) and waits for all.
    pub fn produce(topic: &str, records: &[Input]) {
        let producer: ThreadedProducer<DefaultProducerContext> = config()
            .set("enable.idempotence", "true")
            .set("linger.ms", "20")
            .create()
            .expect("producer");
        for r in records {
            let mut record = BaseRecord::to(topic)
                .partition(r.partition)
                .key(r.key.as_str())
                .payload(r.value.as_str())
                .timestamp(r.timestamp);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((
                        KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                        back,
                    )) => {
                        record = back;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err((e, _)) => panic!("produce to {topic}: {e}"),
                }
            }
        }
        producer.flush(TIMEOUT).expect("flush input");
    }

    /// Every record of `topic` as (key, value) text, read from the beginning of every
    /// partition to its end with `isolation` ("read_committed" or "read_uncommitted").
    pub fn read_all(topic: &str, isolation: &str) -> Vec<(String, String)> {
        read_all_timed(topic, isolation)
            .into_iter()
            .map(|(key, value, _)| (key, value))
            .collect()
    }

    /// `read_all` with each record's timestamp (ms; the broker's append time on a topic
    /// with `message.timestamp.type = LogAppendTime`).
    pub fn read_all_timed(topic: &str, isolation: &str) -> Vec<(String, String, i64)> {
        let ends = log_ends(topic);
        let consumer: BaseConsumer = config()
            .set("group.id", unique_name("reader"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", isolation)
            .set("enable.partition.eof", "true")
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        for p in ends.keys() {
            tpl.add_partition_offset(topic, *p, Offset::Beginning)
                .expect("tpl");
        }
        consumer.assign(&tpl).expect("assign");
        read_to_ends(&consumer, topic, isolation, &ends)
    }

    /// The log end of every partition of `topic`, records and transaction markers
    /// included, taken before reading: a read is complete only once the consumer's
    /// position reaches it. (With read_committed, a partition EOF only means "at the
    /// last stable offset", which lags while transaction markers are being written.)
    fn log_ends(topic: &str) -> BTreeMap<i32, i64> {
        let probe: BaseConsumer = config().create().expect("consumer");
        let ends: BTreeMap<i32, i64> = partitions_of(&probe, topic)
            .into_iter()
            .map(|p| {
                let high = probe
                    .fetch_watermarks(topic, p, TIMEOUT)
                    .expect("watermarks")
                    .1;
                (p, high)
            })
            .collect();
        assert!(
            !ends.is_empty(),
            "topic {topic} has no partitions: the broker does not list it"
        );
        ends
    }

    /// The partitions of `topic` as `client`'s metadata lists them (none if the broker
    /// has no such topic).
    fn partitions_of(client: &BaseConsumer, topic: &str) -> Vec<i32> {
        let metadata = client
            .fetch_metadata(Some(topic), TIMEOUT)
            .expect("metadata");
        metadata
            .topics()
            .iter()
            .filter(|t| t.name() == topic && t.error().is_none())
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect()
    }

    /// Polls `consumer` (assigned every partition of `topic` from the beginning) until
    /// each partition is read to its end in `ends`; every record as (key, value,
    /// timestamp).
    fn read_to_ends(
        consumer: &BaseConsumer,
        topic: &str,
        isolation: &str,
        ends: &BTreeMap<i32, i64>,
    ) -> Vec<(String, String, i64)> {
        let position = |p: i32| -> i64 {
            consumer
                .position()
                .expect("position")
                .find_partition(topic, p)
                .and_then(|e| match e.offset() {
                    Offset::Offset(o) => Some(o),
                    _ => None,
                })
                .unwrap_or(0)
        };
        // A partition is read once the position reached the log end, or, since the
        // position does not always move past trailing transaction markers, once it has
        // been at EOF with nothing new for `QUIET` (markers are written within
        // milliseconds on a local broker).
        const QUIET: Duration = Duration::from_secs(3);
        let mut eof_since: BTreeMap<i32, Instant> = BTreeMap::new();
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut checked: Option<Instant> = None;
        loop {
            // Asking for positions is a call into librdkafka per partition: do it when
            // the consumer is idle or at an EOF, and at most every 100 ms otherwise.
            if checked.is_none_or(|t| t.elapsed() >= Duration::from_millis(100)) {
                checked = Some(Instant::now());
                let unfinished: Vec<i32> = ends
                    .iter()
                    .filter(|(p, end)| {
                        position(**p) < **end
                            && eof_since.get(*p).is_none_or(|t| t.elapsed() < QUIET)
                    })
                    .map(|(p, _)| *p)
                    .collect();
                if unfinished.is_empty() {
                    return out;
                }
                assert!(
                    Instant::now() < deadline,
                    "reading {topic} ({isolation}) did not reach the log end of partitions {unfinished:?}"
                );
            }
            match consumer.poll(Duration::from_millis(100)) {
                None => checked = None,
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    eof_since.entry(p).or_insert_with(Instant::now);
                    checked = None;
                }
                Some(Ok(m)) => {
                    eof_since.remove(&m.partition());
                    out.push((
                        String::from_utf8_lossy(m.key().unwrap_or(&[])).into_owned(),
                        String::from_utf8_lossy(m.payload().unwrap_or(&[])).into_owned(),
                        m.timestamp().to_millis().unwrap_or(-1),
                    ));
                }
                Some(Err(e)) => panic!("reading {topic}: {e}"),
            }
        }
    }

    /// The values of `topic` read with read_committed.
    pub fn committed_values(topic: &str) -> Vec<String> {
        read_all(topic, "read_committed")
            .into_iter()
            .map(|(_, v)| v)
            .collect()
    }

    /// Every topic on the broker whose name starts with `prefix`, sorted.
    pub fn topics_with_prefix(prefix: &str) -> Vec<String> {
        let consumer: BaseConsumer = config().create().expect("consumer");
        let metadata = consumer.fetch_metadata(None, TIMEOUT).expect("metadata");
        let mut topics: Vec<String> = metadata
            .topics()
            .iter()
            .map(|t| t.name().to_owned())
            .filter(|t| t.starts_with(prefix))
            .collect();
        topics.sort();
        topics
    }

    /// The high watermark of every partition of `topic`, summed (records and markers).
    pub fn end_offsets_sum(topic: &str) -> i64 {
        watermarks(topic).values().map(|&(_, high)| high).sum()
    }

    /// The last stable offset of every partition of `topic`, summed: where a
    /// read_committed reader ends (the records and markers of decided transactions;
    /// librdkafka's watermarks follow its isolation level, read_committed by default).
    /// `None` if the brokers do not answer within `within` (a failover under way).
    pub fn stable_end_offsets_sum(topic: &str, within: Duration) -> Option<i64> {
        let consumer: BaseConsumer = config().create().ok()?;
        let metadata = consumer.fetch_metadata(Some(topic), within).ok()?;
        let partitions = metadata.topics().first()?.partitions();
        partitions
            .iter()
            .map(|p| Some(consumer.fetch_watermarks(topic, p.id(), within).ok()?.1))
            .sum()
    }

    /// Deletes the records of `topic`-`partition` below `offset` (DeleteRecords), as an
    /// operator's retention or tool would.
    pub fn delete_records(topic: &str, partition: i32, offset: i64) {
        let admin: AdminClient<DefaultClientContext> = config().create().expect("admin");
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(topic, partition, Offset::Offset(offset))
            .expect("offset");
        let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
        let done = weir::connector::kafka::client::block_on(
            admin.delete_records(&list, &options),
            TIMEOUT,
        )
        .expect("delete records in time")
        .expect("delete records");
        for element in done.elements() {
            element.error().expect("deleted");
        }
    }

    /// Each partition of `topic`: its (log start, high watermark) offsets.
    pub fn watermarks(topic: &str) -> BTreeMap<i32, (i64, i64)> {
        let consumer: BaseConsumer = config().create().expect("consumer");
        let metadata = consumer
            .fetch_metadata(Some(topic), TIMEOUT)
            .expect("metadata");
        metadata.topics()[0]
            .partitions()
            .iter()
            .map(|p| {
                let offsets = consumer
                    .fetch_watermarks(topic, p.id(), TIMEOUT)
                    .expect("watermarks");
                (p.id(), offsets)
            })
            .collect()
    }

    /// The offsets (and their metadata) group `group` has committed for `topic`, as they
    /// stand: read_uncommitted, since a read_committed OffsetFetch waits while a killed
    /// run's transaction holds offsets of the group pending.
    pub fn committed_offsets(group: &str, topic: &str) -> BTreeMap<i32, (i64, String)> {
        let consumer: BaseConsumer = config()
            .set("group.id", group)
            .set("isolation.level", "read_uncommitted")
            .create()
            .expect("consumer");
        let metadata = consumer
            .fetch_metadata(Some(topic), TIMEOUT)
            .expect("metadata");
        let mut tpl = TopicPartitionList::new();
        for p in metadata.topics()[0].partitions() {
            tpl.add_partition(topic, p.id());
        }
        // A fresh broker answers NOT_COORDINATOR while its group coordinator loads.
        let deadline = std::time::Instant::now() + TIMEOUT;
        let committed = loop {
            match consumer.committed_offsets(tpl.clone(), TIMEOUT) {
                Ok(committed) => break committed,
                Err(e) if std::time::Instant::now() < deadline => {
                    eprintln!("committed offsets of {group}: {e}; retrying");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("committed offsets of {group}: {e}"),
            }
        };
        committed
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) => Some((e.partition(), (o, e.metadata().to_owned()))),
                _ => None,
            })
            .collect()
    }

    /// Runs `kafka.sh ARGS...` (Kafka's own tools) against the test broker; its stdout.
    pub fn kafka_tool(args: &[&str]) -> String {
        let (ok, stdout, stderr) = run_kafka_tool(args);
        assert!(ok, "kafka.sh {args:?} failed: {stderr}");
        stdout
    }

    /// `kafka_tool` for callers that retry: whether it succeeded, and stdout + stderr.
    pub fn try_kafka_tool(args: &[&str]) -> (bool, String) {
        let (ok, stdout, stderr) = run_kafka_tool(args);
        (ok, format!("{stdout}{stderr}"))
    }

    fn run_kafka_tool(args: &[&str]) -> (bool, String, String) {
        let script = crate::repo_root().join("scripts/kafka/kafka.sh");
        let out = std::process::Command::new("bash")
            .arg(script)
            .args(args)
            .output()
            .expect("run kafka.sh");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}
