//! The supervisor: one thread per started pipeline, which runs its worker process,
//! restarts it after a failure and records what happened in the catalog.
//!
//! Invariants:
//! - At most one worker per pipeline: `start` of a supervised pipeline is a no-op (and
//!   the worker's state-dir lock would refuse a second one anyway).
//! - A worker that exits non-zero without being asked to is restarted after a backoff
//!   that starts at `restart_backoff` and doubles up to `max_backoff`; it resumes from
//!   its last committed checkpoint (plain `weir run`), so restarts never lose or
//!   duplicate output. After `restart_limit` failures in a row the pipeline is left
//!   `failed` with the worker's last error. A failure after the worker committed a
//!   checkpoint of its own starts a new row of failures.
//! - A stop asks the worker to stop after one more committed checkpoint (SIGTERM) and
//!   waits `stop_timeout` for it, then kills it (recovery replays from the last
//!   committed checkpoint, so even that loses nothing). The last complete checkpoint
//!   after a stop is the pipeline's savepoint.
//! - A failed worker affects its own pipeline only: nothing here shares a process,
//!   thread or lock with another pipeline's worker.

use std::collections::HashMap;
use std::process::Child;
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::server::catalog::{Catalog, RunRecord};
use crate::server::config::WorkersConfig;
use crate::server::metrics::ServerMetrics;
use crate::server::wire::PipelineState;
use crate::server::worker::{Launch, last_complete_checkpoint, last_error};

const POLL: Duration = Duration::from_millis(50);
/// How often a running worker's directory is measured against the disk quota.
const DISK_CHECK_EVERY: Duration = Duration::from_secs(2);

/// What the supervisor was asked to do with a running worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Request {
    None = 0,
    /// The tenant's stop: final checkpoint, state `stopped`, savepoint recorded.
    Stop = 1,
    /// The server is shutting down: final checkpoint, the catalog left as it is so the
    /// next server start resumes the pipeline.
    Shutdown = 2,
    /// The pipeline is being deleted: kill at once.
    Kill = 3,
}

#[derive(Debug, Default)]
struct Control {
    request: AtomicU8,
    pid: AtomicI32,
}

impl Control {
    fn request(&self) -> Request {
        match self.request.load(Ordering::SeqCst) {
            1 => Request::Stop,
            2 => Request::Shutdown,
            3 => Request::Kill,
            _ => Request::None,
        }
    }
    fn ask(&self, request: Request) {
        self.request.store(request as u8, Ordering::SeqCst);
        let pid = self.pid.load(Ordering::SeqCst);
        let signal = match request {
            Request::Kill => Signal::SIGKILL,
            _ => Signal::SIGTERM,
        };
        if pid > 0 {
            // Gone already: its thread sees the exit.
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }
}

#[derive(Debug)]
struct Supervised {
    control: Arc<Control>,
    thread: JoinHandle<()>,
}

type Key = (String, String);

#[derive(Debug)]
pub struct Supervisor {
    config: WorkersConfig,
    catalog: Arc<Catalog>,
    metrics: Arc<ServerMetrics>,
    running: Mutex<HashMap<Key, Supervised>>,
}

impl Supervisor {
    pub fn new(config: WorkersConfig, catalog: Arc<Catalog>, metrics: Arc<ServerMetrics>) -> Self {
        Supervisor {
            config,
            catalog,
            metrics,
            running: Mutex::new(HashMap::new()),
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Supervised>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a worker thread of this pipeline is alive.
    pub fn is_supervised(&self, tenant: &str, name: &str) -> bool {
        self.running()
            .get(&(tenant.to_owned(), name.to_owned()))
            .is_some_and(|s| !s.thread.is_finished())
    }

    /// Starts supervising a pipeline (no-op if it already is).
    pub fn start(&self, tenant: &str, name: &str, launch: Launch) -> Result<(), String> {
        let key = (tenant.to_owned(), name.to_owned());
        let mut running = self.running();
        if running.get(&key).is_some_and(|s| !s.thread.is_finished()) {
            return Ok(());
        }
        let control = Arc::new(Control::default());
        let run = Run {
            key: key.clone(),
            launch,
            control: control.clone(),
            config: self.config.clone(),
            catalog: self.catalog.clone(),
            metrics: self.metrics.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("supervise-{tenant}-{name}"))
            .spawn(move || run.supervise())
            .map_err(|e| format!("cannot start a supervisor thread: {e}"))?;
        running.insert(key, Supervised { control, thread });
        Ok(())
    }

    /// Stops a pipeline's worker and waits for it (its thread records the outcome).
    pub fn stop(&self, tenant: &str, name: &str) {
        self.end(tenant, name, Request::Stop);
    }

    /// Kills a pipeline's worker at once and waits for its thread.
    pub fn kill(&self, tenant: &str, name: &str) {
        self.end(tenant, name, Request::Kill);
    }

    fn end(&self, tenant: &str, name: &str, request: Request) {
        let supervised = self.running().remove(&(tenant.to_owned(), name.to_owned()));
        if let Some(s) = supervised {
            s.control.ask(request);
            let _ = s.thread.join();
        }
    }

    /// Stops every worker with a final checkpoint, leaving the catalog as it is.
    pub fn shutdown(&self) {
        let all: Vec<Supervised> = self.running().drain().map(|(_, s)| s).collect();
        for s in &all {
            s.control.ask(Request::Shutdown);
        }
        for s in all {
            let _ = s.thread.join();
        }
    }
}

/// One supervised pipeline, on its own thread.
struct Run {
    key: Key,
    launch: Launch,
    control: Arc<Control>,
    config: WorkersConfig,
    catalog: Arc<Catalog>,
    metrics: Arc<ServerMetrics>,
}

/// How one worker process ended.
enum Exit {
    Requested(Request),
    Finished,
    Failed(String),
    /// Killed for using more disk than its quota: not restarted.
    OverQuota(String),
}

impl Run {
    fn supervise(mut self) {
        let mut restarts = 0u32;
        let mut failures_in_a_row = 0u32;
        let mut backoff = self.config.restart_backoff;
        loop {
            self.record(PipelineState::Running, restarts, None);
            let exit = self.run_once();
            self.launch.from_checkpoint = None;
            match exit {
                Exit::Requested(request) => return self.requested(request, restarts),
                Exit::Finished => {
                    self.record(PipelineState::Finished, restarts, None);
                    return;
                }
                Exit::OverQuota(error) => {
                    self.record(PipelineState::Failed, restarts, Some(&error));
                    return;
                }
                Exit::Failed(error) => {
                    restarts += 1;
                    failures_in_a_row += 1;
                    self.metrics
                        .worker_restarts
                        .get_or_create(&self.labels())
                        .inc();
                    tracing::warn!(tenant = %self.key.0, pipeline = %self.key.1, %error, failures_in_a_row, "worker failed");
                    if failures_in_a_row > self.config.restart_limit {
                        self.record(PipelineState::Failed, restarts, Some(&format!(
                            "{error} (failed {failures_in_a_row} times in a row; restart limit {})",
                            self.config.restart_limit
                        )));
                        return;
                    }
                    self.record(PipelineState::Restarting, restarts, Some(&error));
                    if !self.wait_out(backoff) {
                        return self.requested(self.control.request(), restarts);
                    }
                    backoff = (backoff * 2).min(self.config.max_backoff);
                }
            }
        }
    }

    /// Ends supervision on a request: a tenant's stop records the state and savepoint;
    /// a shutdown or a delete leaves the catalog to the server.
    fn requested(&self, request: Request, restarts: u32) {
        if request == Request::Stop {
            let savepoint = last_complete_checkpoint(&self.launch.dir);
            self.record_stop(restarts, savepoint);
        }
    }

    fn labels(&self) -> crate::server::metrics::TenantLabel {
        crate::server::metrics::TenantLabel {
            tenant: self.key.0.clone(),
        }
    }

    /// Starts the worker and waits for it to end.
    fn run_once(&self) -> Exit {
        let _ = std::fs::remove_file(self.launch.dir.status());
        let mut child = match self.launch.spawn() {
            Ok(child) => child,
            Err(e) => return Exit::Failed(e.to_string()),
        };
        self.control.pid.store(child.id() as i32, Ordering::SeqCst);
        // A request that came before the pid was known.
        if self.control.request() != Request::None {
            self.control.ask(self.control.request());
        }
        let (status, over_quota) = self.wait(&mut child);
        self.control.pid.store(0, Ordering::SeqCst);
        if let Some(error) = over_quota {
            return Exit::OverQuota(error);
        }
        match (self.control.request(), status) {
            (Request::None, Some(s)) if s.success() => Exit::Finished,
            (Request::None, status) => Exit::Failed(
                last_error(&self.launch.dir.log()).unwrap_or_else(|| match status {
                    Some(s) => format!("the worker exited with {s}"),
                    None => "the worker could not be waited for".into(),
                }),
            ),
            (request, _) => Exit::Requested(request),
        }
    }

    /// Waits for the child; once a stop is asked, for at most `stop_timeout`. Kills it
    /// (and says why) if its directory grows past the disk quota.
    fn wait(&self, child: &mut Child) -> (Option<std::process::ExitStatus>, Option<String>) {
        let mut asked_at: Option<Instant> = None;
        let mut measured_at = Instant::now();
        let mut over_quota = None;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return (Some(status), over_quota),
                Ok(None) => {}
                Err(_) => return (None, over_quota),
            }
            if over_quota.is_none() && measured_at.elapsed() > DISK_CHECK_EVERY {
                measured_at = Instant::now();
                over_quota = self.over_disk_quota();
                if over_quota.is_some() {
                    let _ = child.kill();
                }
            }
            if self.control.request() != Request::None {
                let at = *asked_at.get_or_insert_with(Instant::now);
                if at.elapsed() > self.config.stop_timeout {
                    let _ = child.kill();
                }
            }
            std::thread::sleep(POLL);
        }
    }

    fn over_disk_quota(&self) -> Option<String> {
        let quota = self.launch.disk_quota?;
        let used = crate::server::worker::disk_usage(self.launch.dir.root());
        (used > quota).then(|| {
            format!("the pipeline's state and checkpoints take {used} bytes, over the tenant's quota of {quota}: stopped")
        })
    }

    /// Sleeps `backoff` unless a request comes; false if one did.
    fn wait_out(&self, backoff: Duration) -> bool {
        let until = Instant::now() + backoff;
        while Instant::now() < until {
            if self.control.request() != Request::None {
                return false;
            }
            std::thread::sleep(POLL);
        }
        self.control.request() == Request::None
    }

    fn record(&self, state: PipelineState, restarts: u32, error: Option<&str>) {
        self.write(RunRecord {
            state,
            restarts,
            last_error: error,
            savepoint: None,
        });
    }

    fn record_stop(&self, restarts: u32, savepoint: Option<u64>) {
        self.write(RunRecord {
            state: PipelineState::Stopped,
            restarts,
            last_error: None,
            savepoint,
        });
    }

    fn write(&self, record: RunRecord<'_>) {
        let (tenant, name) = &self.key;
        self.metrics
            .pipeline_state_changes
            .get_or_create(&self.labels())
            .inc();
        if let Err(e) = self.catalog.record_run(tenant, name, &record) {
            tracing::error!(%tenant, pipeline = %name, error = %e, "cannot record the pipeline's state");
        }
    }
}
