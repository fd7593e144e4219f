//! The supervisor: for every started pipeline, one thread per worker process (a
//! pipeline runs as N >= 1 workers), which runs its worker, restarts it after a
//! failure and records what happened, per worker and summed up for the pipeline.
//!
//! Invariants:
//! - At most one process per worker: `start` of a pipeline whose workers all run is a
//!   no-op, and starts only the workers that ended (one that failed past its limit)
//!   when some still run (the worker's state-dir lock would refuse a second one
//!   anyway). A worker has ended once its view says so (`WorkerView::has_ended`), even
//!   if its thread has not returned yet: whoever saw it failed can start it again.
//! - Each worker is supervised on its own: one that exits non-zero without being asked
//!   to is restarted alone, after a backoff that starts at `restart_backoff` and
//!   doubles up to `max_backoff`, while the others keep running; it resumes from its
//!   own last committed checkpoint (plain `weir run`, `--worker I/N`), so restarts never
//!   lose or duplicate output. A failure after the worker completed a checkpoint of its
//!   own since it was last started starts a new row of failures (and of backoff). After
//!   `restart_limit` failures in a row of one worker,
//!   that worker is left `failed` with its last error, and so is the pipeline
//!   (`worker_states::summarize` names the worker); the others keep running until the
//!   tenant stops or restarts the pipeline.
//! - A request (stop, shutdown, delete, disk quota) is the pipeline's: it reaches every
//!   worker, through the worker's own thread, the one that waits for the process: no
//!   other thread signals a pid, which may be another process's once reaped. A stop asks each to stop after one more committed checkpoint (SIGTERM) and
//!   waits `stop_timeout` for it, then kills it (recovery replays from the last
//!   committed checkpoint, so even that loses nothing). The last complete checkpoint of
//!   every worker after a stop is the pipeline's savepoint. A pipeline whose directory
//!   (all its workers' state and checkpoints) outgrows the disk quota has every worker
//!   killed and is left `failed`, not restarted.
//! - A failed worker affects its own pipeline only: nothing here shares a process,
//!   thread or lock with another pipeline's workers.

use std::collections::HashMap;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::server::catalog::{Catalog, RunRecord};
use crate::server::config::WorkersConfig;
use crate::server::metrics::{ServerMetrics, TenantLabel};
use crate::server::namespace::PipelineDir;
use crate::server::walls::TenantWall;
use crate::server::wire::PipelineState;
use crate::server::worker::{Launch, last_complete_checkpoint, last_error, pipeline_checkpoint};
use crate::server::worker_log::rotate_if_over;
use crate::server::worker_states::{WorkerView, summarize};

const POLL: Duration = Duration::from_millis(50);
/// How often a running pipeline's directory is measured against the disk quota.
const DISK_CHECK_EVERY: Duration = Duration::from_secs(2);
/// How often a worker's thread looks at the size of its log.
const LOG_CHECK_EVERY: Duration = Duration::from_secs(1);

/// What the supervisor was asked to do with a pipeline's running workers.
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
    /// The pipeline outgrew its disk quota: kill at once, leave it `failed`.
    OverQuota = 4,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here leaves its data whole: a poisoned lock is usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

type Key = (String, String);

/// What the threads of one pipeline share.
#[derive(Debug)]
struct Shared {
    key: Key,
    request: AtomicU8,
    /// One per worker, by index; the pids signalled by `ask`.
    views: Mutex<Vec<WorkerView>>,
    /// Why the pipeline was killed for its disk use.
    over_quota: Mutex<Option<String>>,
    measured_at: Mutex<Instant>,
    catalog: Arc<Catalog>,
    metrics: Arc<ServerMetrics>,
}

impl Shared {
    fn new(
        key: Key,
        launches: &[Launch],
        catalog: Arc<Catalog>,
        metrics: Arc<ServerMetrics>,
    ) -> Self {
        Shared {
            key,
            request: AtomicU8::new(Request::None as u8),
            views: Mutex::new(launches.iter().map(|l| WorkerView::new(l.worker)).collect()),
            over_quota: Mutex::new(None),
            measured_at: Mutex::new(Instant::now()),
            catalog,
            metrics,
        }
    }

    fn request(&self) -> Request {
        match self.request.load(Ordering::SeqCst) {
            1 => Request::Stop,
            2 => Request::Shutdown,
            3 => Request::Kill,
            4 => Request::OverQuota,
            _ => Request::None,
        }
    }

    /// Records `request`; every worker's thread acts on it within [`POLL`] (see
    /// `Run::wait`). No thread signals a process by its pid: once its own
    /// thread has reaped it, the pid may be another process's.
    fn ask(&self, request: Request) {
        self.request.store(request as u8, Ordering::SeqCst);
    }

    fn labels(&self) -> TenantLabel {
        TenantLabel {
            tenant: self.key.0.clone(),
        }
    }

    /// Changes worker `index`'s view; with `record`, writes the pipeline's summary to
    /// the catalog (under the views' lock, so writes follow changes in order).
    fn update(&self, index: usize, record: bool, change: impl FnOnce(&mut WorkerView)) {
        let mut views = lock(&self.views);
        if let Some(view) = views.get_mut(index) {
            change(view);
        }
        if record {
            let summary = summarize(&views);
            self.write(&RunRecord {
                state: summary.state,
                restarts: summary.restarts,
                last_error: summary.last_error.as_deref(),
                savepoint: None,
            });
        }
    }

    fn write(&self, record: &RunRecord<'_>) {
        let (tenant, name) = &self.key;
        self.metrics
            .pipeline_state_changes
            .get_or_create(&self.labels())
            .inc();
        if let Err(e) = self.catalog.record_run(tenant, name, record) {
            tracing::error!(%tenant, pipeline = %name, error = %e, "cannot record the pipeline's state");
        }
    }

    fn restarts(&self) -> u32 {
        lock(&self.views).iter().map(|v| v.restarts).sum()
    }
}

#[derive(Debug)]
struct Supervised {
    shared: Arc<Shared>,
    dir: PipelineDir,
    /// One per worker, by index.
    threads: Vec<JoinHandle<()>>,
}

impl Supervised {
    /// Whether worker `index` has ended: it recorded the state it ends in (its thread
    /// returns right after, doing nothing more), or its thread returned.
    fn ended(&self, index: usize) -> bool {
        self.threads[index].is_finished()
            || lock(&self.shared.views)
                .get(index)
                .is_some_and(WorkerView::has_ended)
    }

    fn alive(&self) -> usize {
        (0..self.threads.len()).filter(|&i| !self.ended(i)).count()
    }
}

/// A pipeline whose workers `Supervisor::end` ended.
struct Ended {
    shared: Arc<Shared>,
    dir: PipelineDir,
    count: u32,
    /// Whether any of its workers still ran when asked.
    was_running: bool,
}

#[derive(Debug)]
pub struct Supervisor {
    config: WorkersConfig,
    catalog: Arc<Catalog>,
    metrics: Arc<ServerMetrics>,
    running: Mutex<HashMap<Key, Supervised>>,
    /// Pipelines being deleted: none of their workers starts again (`retire`).
    retiring: Mutex<std::collections::HashSet<Key>>,
    /// Pipelines whose workers are being ended (a stop waiting for their final
    /// checkpoints; a start meanwhile may have begun new ones): a kill escalates and
    /// waits for every one of them (`end`).
    ending: Mutex<Vec<(Key, Arc<Shared>)>>,
}

impl Supervisor {
    pub fn new(config: WorkersConfig, catalog: Arc<Catalog>, metrics: Arc<ServerMetrics>) -> Self {
        Supervisor {
            config,
            catalog,
            metrics,
            running: Mutex::new(HashMap::new()),
            retiring: Mutex::new(std::collections::HashSet::new()),
            ending: Mutex::new(Vec::new()),
        }
    }

    /// Starts deleting the pipeline: from now on no worker of it starts (a `start`
    /// that comes while the delete runs is refused), and every running one is killed.
    /// False, doing nothing, if a delete of it is already under way.
    pub fn retire(&self, tenant: &str, name: &str) -> bool {
        {
            // Under `running`'s lock, as `start` checks it: a start either ran before
            // (and its workers are killed below) or sees the delete.
            let _running = self.running();
            if !lock(&self.retiring).insert(Self::key(tenant, name)) {
                return false;
            }
        }
        self.kill(tenant, name);
        true
    }

    /// The delete `retire` began is over (done or failed): the pipeline may start again.
    pub fn retired(&self, tenant: &str, name: &str) {
        lock(&self.retiring).remove(&Self::key(tenant, name));
    }

    fn running(&self) -> MutexGuard<'_, HashMap<Key, Supervised>> {
        lock(&self.running)
    }

    fn key(tenant: &str, name: &str) -> Key {
        (tenant.to_owned(), name.to_owned())
    }

    /// Whether a worker thread of this pipeline is alive.
    pub fn is_supervised(&self, tenant: &str, name: &str) -> bool {
        self.running()
            .get(&Self::key(tenant, name))
            .is_some_and(|s| s.alive() > 0)
    }

    /// Whether every worker thread of this pipeline is alive.
    pub fn is_fully_supervised(&self, tenant: &str, name: &str) -> bool {
        self.running()
            .get(&Self::key(tenant, name))
            .is_some_and(|s| s.alive() == s.threads.len())
    }

    /// The workers of this pipeline as they were last seen (since this server started
    /// supervising it), by index.
    pub fn workers(&self, tenant: &str, name: &str) -> Option<Vec<WorkerView>> {
        let running = self.running();
        let s = running.get(&Self::key(tenant, name))?;
        Some(lock(&s.shared.views).clone())
    }

    /// Starts supervising a pipeline's workers, one `Launch` each, by index. Of a
    /// pipeline some of whose workers still run, starts only those whose thread ended
    /// (with as many workers as before).
    pub fn start(&self, tenant: &str, name: &str, launches: Vec<Launch>) -> Result<(), String> {
        let key = Self::key(tenant, name);
        let mut running = self.running();
        if lock(&self.retiring).contains(&key) {
            return Err("the pipeline is being deleted".into());
        }
        if let Some(s) = running.get_mut(&key).filter(|s| s.alive() > 0) {
            if s.threads.len() != launches.len() {
                return Err(format!(
                    "{} of its {} workers still run: stop the pipeline before changing its number of workers",
                    s.alive(),
                    s.threads.len()
                ));
            }
            for (index, launch) in launches.into_iter().enumerate() {
                if s.ended(index) {
                    s.shared
                        .update(index, false, |v| *v = WorkerView::new(launch.worker));
                    let new = self.spawn(&s.shared, index, launch)?;
                    // The old thread is returning, if it has not yet.
                    let _ = std::mem::replace(&mut s.threads[index], new).join();
                }
            }
            return Ok(());
        }
        let Some(dir) = launches.first().map(|l| l.dir.clone()) else {
            return Err("a pipeline runs as one worker at least".into());
        };
        let shared = Arc::new(Shared::new(
            key.clone(),
            &launches,
            self.catalog.clone(),
            self.metrics.clone(),
        ));
        let mut threads = Vec::with_capacity(launches.len());
        for (index, launch) in launches.into_iter().enumerate() {
            match self.spawn(&shared, index, launch) {
                Ok(thread) => threads.push(thread),
                Err(e) => {
                    // The ones started stop again: a pipeline runs whole or not at all.
                    shared.ask(Request::Kill);
                    threads.into_iter().for_each(|t: JoinHandle<()>| {
                        let _ = t.join();
                    });
                    return Err(e);
                }
            }
        }
        running.insert(
            key,
            Supervised {
                shared,
                dir,
                threads,
            },
        );
        Ok(())
    }

    fn spawn(
        &self,
        shared: &Arc<Shared>,
        index: usize,
        launch: Launch,
    ) -> Result<JoinHandle<()>, String> {
        let run = Run {
            index,
            launch,
            shared: shared.clone(),
            config: self.config.clone(),
        };
        let (tenant, name) = &shared.key;
        std::thread::Builder::new()
            .name(format!("supervise-{tenant}-{name}-{index}"))
            .spawn(move || run.supervise())
            .map_err(|e| format!("cannot start a supervisor thread: {e}"))
    }

    /// Stops a pipeline's workers, each after a final checkpoint, waits for them and
    /// records the pipeline `stopped` with its savepoint (if any worker still ran).
    pub fn stop(&self, tenant: &str, name: &str) {
        let Some(ended) = self.end(tenant, name, Request::Stop) else {
            return;
        };
        if ended.was_running {
            let savepoint = pipeline_checkpoint(&ended.dir, ended.count);
            ended.shared.write(&RunRecord {
                state: PipelineState::Stopped,
                restarts: ended.shared.restarts(),
                last_error: None,
                savepoint,
            });
        }
    }

    /// Kills a pipeline's workers at once and waits for their threads.
    pub fn kill(&self, tenant: &str, name: &str) {
        self.end(tenant, name, Request::Kill);
    }

    /// Asks every worker of the pipeline to end and waits for their threads.
    /// A kill while another end (a stop) of the pipeline is under way turns that one
    /// into a kill and waits for it: when a kill returns, no worker of the pipeline
    /// lives.
    fn end(&self, tenant: &str, name: &str, request: Request) -> Option<Ended> {
        let key = Self::key(tenant, name);
        // Moved from `running` to `ending` under the one lock, so a kill meanwhile
        // finds the pipeline in one or the other.
        let taken = {
            let mut running = self.running();
            let taken = running.remove(&key);
            if let Some(s) = &taken {
                lock(&self.ending).push((key.clone(), s.shared.clone()));
            }
            taken
        };
        if request == Request::Kill {
            self.escalate_and_wait(&key, taken.as_ref().map(|s| &s.shared));
        }
        let s = taken?;
        let was_running = s.alive() > 0;
        s.shared.ask(request);
        let count = s.threads.len() as u32;
        for t in s.threads {
            let _ = t.join();
        }
        lock(&self.ending).retain(|(_, shared)| !Arc::ptr_eq(shared, &s.shared));
        Some(Ended {
            shared: s.shared,
            dir: s.dir,
            count,
            was_running,
        })
    }

    /// Kills the workers every other `end` of `key` is ending (all but `own`), and waits
    /// until those ends are done.
    fn escalate_and_wait(&self, key: &Key, own: Option<&Arc<Shared>>) {
        loop {
            let others: Vec<Arc<Shared>> = lock(&self.ending)
                .iter()
                .filter(|(k, shared)| k == key && !own.is_some_and(|o| Arc::ptr_eq(o, shared)))
                .map(|(_, shared)| shared.clone())
                .collect();
            if others.is_empty() {
                return;
            }
            for shared in others {
                shared.ask(Request::Kill);
            }
            std::thread::sleep(POLL);
        }
    }

    /// Stops every worker with a final checkpoint, leaving the catalog as it is.
    pub fn shutdown(&self) {
        let all: Vec<Supervised> = self.running().drain().map(|(_, s)| s).collect();
        for s in &all {
            s.shared.ask(Request::Shutdown);
        }
        for s in all {
            for t in s.threads {
                let _ = t.join();
            }
        }
    }
}

/// One supervised worker, on its own thread.
struct Run {
    index: usize,
    launch: Launch,
    shared: Arc<Shared>,
    config: WorkersConfig,
}

/// How one worker process ended.
enum Exit {
    Requested(Request),
    Finished,
    Failed(String),
}

impl Run {
    fn supervise(mut self) {
        let mut restarts = 0u32;
        let mut failures_in_a_row = 0u32;
        let mut backoff = self.config.restart_backoff;
        let mut checkpoint = last_complete_checkpoint(&self.launch.dir, self.launch.worker);
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
                Exit::Failed(error) => {
                    // A worker that completed a checkpoint since its last start made
                    // progress: its failure starts a new row, from the first backoff.
                    let now = last_complete_checkpoint(&self.launch.dir, self.launch.worker);
                    if now > checkpoint {
                        failures_in_a_row = 0;
                        backoff = self.config.restart_backoff;
                    }
                    checkpoint = now;
                    restarts += 1;
                    failures_in_a_row += 1;
                    self.shared
                        .metrics
                        .worker_restarts
                        .get_or_create(&self.shared.labels())
                        .inc();
                    tracing::warn!(tenant = %self.shared.key.0, pipeline = %self.shared.key.1, worker = %self.launch.worker, %error, failures_in_a_row, "worker failed");
                    if failures_in_a_row > self.config.restart_limit {
                        self.record(PipelineState::Failed, restarts, Some(format!(
                            "{error} (failed {failures_in_a_row} times in a row; restart limit {})",
                            self.config.restart_limit
                        )));
                        return;
                    }
                    self.record(PipelineState::Restarting, restarts, Some(error));
                    if !self.wait_out(backoff) {
                        return self.requested(self.shared.request(), restarts);
                    }
                    backoff = (backoff * 2).min(self.config.max_backoff);
                }
            }
        }
    }

    /// Ends this worker's supervision on a request: a stop marks it stopped (the
    /// supervisor records the pipeline's state and savepoint once all are); a disk
    /// quota leaves it failed; a shutdown or a delete leaves the catalog to the server.
    fn requested(&self, request: Request, restarts: u32) {
        match request {
            Request::Stop => self.shared.update(self.index, false, |v| {
                v.state = PipelineState::Stopped;
                v.restarts = restarts;
            }),
            Request::OverQuota => {
                let error = lock(&self.shared.over_quota).clone();
                self.record(PipelineState::Failed, restarts, error);
            }
            Request::None | Request::Shutdown | Request::Kill => {}
        }
    }

    fn record(&self, state: PipelineState, restarts: u32, error: Option<String>) {
        self.shared.update(self.index, true, |v| {
            v.state = state;
            v.restarts = restarts;
            if error.is_some() {
                v.last_error = error;
            }
        });
    }

    /// Starts the worker and waits for it to end.
    fn run_once(&self) -> Exit {
        let worker = self.launch.worker;
        let _ = std::fs::remove_file(self.launch.dir.status(worker));
        let oom_kills = self.launch.wall.as_ref().map(TenantWall::oom_kills);
        let mut child = match self.launch.spawn() {
            Ok(child) => child,
            Err(e) => return Exit::Failed(e.to_string()),
        };
        self.shared
            .update(self.index, false, |v| v.pid = Some(child.id()));
        let status = self.wait(&mut child);
        self.shared.update(self.index, false, |v| v.pid = None);
        match (self.shared.request(), status) {
            (Request::None, Some(s)) if s.success() => Exit::Finished,
            (Request::None, status) => Exit::Failed(self.failure(status, oom_kills)),
            (request, _) => Exit::Requested(request),
        }
    }

    /// Why the worker failed: killed by the kernel for the tenant's memory quota (its
    /// group counted a kill while it ran, and it died of SIGKILL), else its log's last
    /// error, else its exit status.
    fn failure(&self, status: Option<ExitStatus>, oom_kills_before: Option<u64>) -> String {
        use std::os::unix::process::ExitStatusExt;
        let killed = status.and_then(|s| s.signal()) == Some(Signal::SIGKILL as i32);
        if let (true, Some(wall), Some(before)) = (killed, &self.launch.wall, oom_kills_before)
            && wall.oom_kills() > before
        {
            return wall.out_of_memory();
        }
        last_error(&self.launch.dir.log(self.launch.worker)).unwrap_or_else(|| match status {
            Some(s) => format!("the worker exited with {s}"),
            None => "the worker could not be waited for".into(),
        })
    }

    /// Waits for the child, acting on the pipeline's request: a stop (or shutdown)
    /// sends it SIGTERM once and waits at most `stop_timeout` before killing it, a
    /// kill kills it. Asks for every worker's kill (and says why) if the pipeline's
    /// directory grows past the disk quota. The child is signalled only here, by the
    /// thread that reaps it, before it has reaped it.
    fn wait(&self, child: &mut Child) -> Option<ExitStatus> {
        let mut asked_at: Option<Instant> = None;
        let mut log_checked = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) => {}
                Err(_) => return None,
            }
            if log_checked.elapsed() > LOG_CHECK_EVERY {
                log_checked = Instant::now();
                self.rotate_log();
            }
            if self.shared.request() == Request::None
                && let Some(error) = self.over_disk_quota()
            {
                *lock(&self.shared.over_quota) = Some(error);
                self.shared.ask(Request::OverQuota);
            }
            match self.shared.request() {
                Request::None => {}
                Request::Kill | Request::OverQuota => {
                    let _ = child.kill();
                }
                Request::Stop | Request::Shutdown => {
                    if asked_at.is_none() {
                        // Not reaped yet (by this thread, the only one that waits).
                        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
                    }
                    let at = *asked_at.get_or_insert_with(Instant::now);
                    if at.elapsed() > self.config.stop_timeout {
                        let _ = child.kill();
                    }
                }
            }
            std::thread::sleep(POLL);
        }
    }

    /// Rotates this worker's log past `log_max_bytes` (`worker_log`).
    fn rotate_log(&self) {
        let log = self.launch.dir.log(self.launch.worker);
        if let Err(e) = rotate_if_over(&log, self.config.log_max_bytes) {
            tracing::warn!(log = %log.display(), error = %e, "cannot rotate a worker log");
        }
    }

    /// The pipeline's directory (every worker's state and checkpoints) measured against
    /// the quota, by whichever worker's thread comes first every `DISK_CHECK_EVERY`.
    fn over_disk_quota(&self) -> Option<String> {
        let quota = self.launch.disk_quota?;
        {
            let mut measured_at = lock(&self.shared.measured_at);
            if measured_at.elapsed() <= DISK_CHECK_EVERY {
                return None;
            }
            *measured_at = Instant::now();
        }
        let used = crate::server::worker::disk_usage(self.launch.dir.root());
        (used > quota).then(|| {
            format!("the pipeline's state and checkpoints take {used} bytes, over the tenant's quota of {quota}: stopped")
        })
    }

    /// Sleeps `backoff` unless a request comes; false if one did.
    fn wait_out(&self, backoff: Duration) -> bool {
        let until = Instant::now() + backoff;
        while Instant::now() < until {
            if self.shared.request() != Request::None {
                return false;
            }
            std::thread::sleep(POLL);
        }
        self.shared.request() == Request::None
    }
}

#[cfg(test)]
#[path = "supervisor_tests.rs"]
mod tests;
