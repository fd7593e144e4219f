//! `CallThread`: the thread that makes one producer's checkpoint-time transactional
//! calls (adding the offsets, committing), so that the commit unit can stop waiting
//! for a call that librdkafka does not return from.
//!
//! Why: librdkafka (2.12) can leave `send_offsets_to_transaction` waiting past its
//! timeout, without end, for a group coordinator that died (librdkafka issues 5456 and
//! 5511: the request is looked at again only when some broker changes state, and its
//! timeout is never checked). Seen on a 3-node cluster with a node killed mid-commit.
//! A thread blocked inside C cannot be cancelled, so the call is made here and the
//! caller waits for its result, bounded: a call not returned [`GRACE`] past its own
//! bound is *left behind*. The commit unit then fails its run with a transient error,
//! and the run's restart (in this process, `pipeline::run`) makes new producers under
//! the same transactional ids, whose `init_transactions` fences the one left behind
//! and aborts its transaction: exactly-once holds as across any restart.
//!
//! While it waits, the caller has the producer's metadata asked for every [`NUDGE`]:
//! meeting the brokers that came back or took over is such a broker state change, and
//! most stuck calls resume with it. The request is made on a thread of its own (the
//! nudger), which the caller never waits for: it is a librdkafka call too (waiting
//! for a usable broker first), and the caller's wait must not depend on any. Time the
//! process did not run (SIGSTOP, a frozen VM: the caller woke more than
//! `watchdog::PAUSE_AFTER` later than it planned) is not counted against the call: the
//! wait is extended by it (`watchdog::RunningDeadline`).
//!
//! Invariants:
//! - One call at a time, made in order. A call left behind is never answered: its
//!   result is dropped, nothing more runs on its thread, and its `CallThread` refuses
//!   every later call at once (`LeftBehind`).
//! - At most [`MAX_LEFT_BEHIND`] calls are left behind in a process at once (each
//!   holds a thread and a producer until librdkafka returns). Past that, the caller
//!   waits for the call whatever it takes, and the watchdog ends a process stuck past
//!   its bound (`watchdog`), as before calls were left behind.
//! - Dropping a `CallThread` ends its thread once its call returns (at once when it is
//!   idle), and its nudger after the refresh it is making. Nothing waits for either:
//!   the last reference to the producer may be theirs, and closing a producer can wait
//!   for a stalled broker, which a failed run must not (`KafkaCommitUnit`'s `Drop`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, mpsc};
use std::time::{Duration, Instant};

use rdkafka::error::KafkaResult;

use crate::connector::kafka::transactional_producer::TransactionalProducer;
use crate::watchdog::RunningDeadline;

/// How long past its bound a call may take before it is left behind. librdkafka keeps
/// a call's bound to within milliseconds when it keeps it at all; the slack is for a
/// loaded machine.
#[cfg(not(test))]
pub const GRACE: Duration = Duration::from_secs(5);
#[cfg(test)]
pub const GRACE: Duration = Duration::from_millis(300);
/// How often a waiting caller refreshes the producer's metadata.
const NUDGE: Duration = Duration::from_secs(2);
/// Bound on one metadata refresh.
const NUDGE_BOUND: Duration = Duration::from_secs(1);
/// The most calls left behind in one process at once.
pub const MAX_LEFT_BEHIND: usize = 4;

/// Calls left behind whose librdkafka call has not returned yet, in this process.
static LEFT_BEHIND: AtomicUsize = AtomicUsize::new(0);

/// A transactional call on the thread's producer.
pub type Call = Box<dyn FnOnce(&dyn TransactionalProducer) -> KafkaResult<()> + Send>;

/// The call was left behind, or an earlier one was: the producer cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeftBehind {
    /// How long the caller waited for the call (zero: refused for an earlier one).
    pub waited: Duration,
}

/// A call that returned.
#[derive(Debug)]
pub struct Returned {
    pub result: KafkaResult<()>,
    /// How long the process was not run (stopped, frozen) while the caller waited: the
    /// caller's own deadline gets that time too (the call's bound started anew).
    pub paused: Duration,
}

/// Where one call stands, shared by its thread and its caller.
#[derive(Default)]
struct Exchange {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
enum State {
    #[default]
    Running,
    Returned(KafkaResult<()>),
    LeftBehind,
}

impl Exchange {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

type Job = (Call, Arc<Exchange>);

pub struct CallThread {
    producer: Arc<dyn TransactionalProducer>,
    /// Dropped with the `CallThread`, which ends the thread.
    jobs: mpsc::Sender<Job>,
    /// Wakes the nudger, started at the first call that lasts [`NUDGE`]; `None` inside
    /// if it could not be started (the call is then only waited for).
    nudger: OnceLock<Option<mpsc::SyncSender<()>>>,
    /// Set once a call was left behind.
    left_behind: Mutex<bool>,
}

impl CallThread {
    /// Starts the thread `name` that makes calls on `producer`.
    pub fn spawn(name: &str, producer: Arc<dyn TransactionalProducer>) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let on_thread = producer.clone();
        // Not joined: the thread may hold the producer's last reference, and closing a
        // producer can wait for a stalled broker (see the module's invariants).
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || serve(&*on_thread, queue))?;
        Ok(CallThread {
            producer,
            jobs,
            nudger: OnceLock::new(),
            left_behind: Mutex::new(false),
        })
    }

    /// Makes `call`, whose own bound is `bound`, and waits for its result until
    /// `bound` + [`GRACE`] has passed; then leaves it behind (see the module's
    /// invariants for when it waits longer).
    pub fn make(&self, bound: Duration, call: Call) -> Result<Returned, LeftBehind> {
        let mut left_behind = self.left_behind.lock().unwrap_or_else(|e| e.into_inner());
        if *left_behind {
            return Err(LeftBehind {
                waited: Duration::ZERO,
            });
        }
        let exchange = Arc::new(Exchange::default());
        if self.jobs.send((call, exchange.clone())).is_err() {
            // The thread is gone (it panicked): nothing can run on this producer.
            *left_behind = true;
            return Err(LeftBehind {
                waited: Duration::ZERO,
            });
        }
        let result = self.await_result(&exchange, bound);
        if result.is_err() {
            *left_behind = true;
        }
        result
    }

    /// Waits for the call of `exchange`, refreshing the producer's metadata every
    /// [`NUDGE`], until `bound` + [`GRACE`]; leaves it behind then.
    fn await_result(&self, exchange: &Exchange, bound: Duration) -> Result<Returned, LeftBehind> {
        let started = Instant::now();
        let first_give_up = started + bound + GRACE;
        let mut give_up = RunningDeadline::new(first_give_up);
        let mut next_nudge = started + NUDGE;
        let mut state = exchange.state();
        loop {
            if let State::Returned(_) = &*state {
                let State::Returned(result) = std::mem::take(&mut *state) else {
                    unreachable!("matched just above");
                };
                let paused = give_up.at().saturating_duration_since(first_give_up);
                return Ok(Returned { result, paused });
            }
            let now = Instant::now();
            if give_up.passed(now) && leave_behind_one() {
                *state = State::LeftBehind;
                return Err(LeftBehind {
                    waited: started.elapsed(),
                });
            }
            if now >= next_nudge {
                self.nudge();
                next_nudge = now + NUDGE;
            }
            let until_nudge = next_nudge.saturating_duration_since(now);
            let wait = if give_up.passed(now) {
                // Past the bound with MAX_LEFT_BEHIND calls left behind: only waits.
                until_nudge
            } else {
                give_up.wait_for(now, until_nudge)
            };
            state = exchange
                .changed
                .wait_timeout(state, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            give_up.woke(Instant::now());
        }
    }
}

impl CallThread {
    /// Has the nudger refresh the producer's metadata, unless a refresh is already
    /// asked for; never waits.
    fn nudge(&self) {
        let nudger = self.nudger.get_or_init(|| {
            let (nudges, asked) = mpsc::sync_channel::<()>(1);
            let producer = self.producer.clone();
            std::thread::Builder::new()
                .name("weir-kafka-nudge".into())
                .spawn(move || {
                    for () in asked {
                        producer.refresh_metadata(NUDGE_BOUND);
                    }
                })
                .ok()
                .map(|_| nudges)
        });
        if let Some(nudges) = nudger {
            let _ = nudges.try_send(());
        }
    }
}

/// Counts one more call left behind, unless [`MAX_LEFT_BEHIND`] already are.
fn leave_behind_one() -> bool {
    LEFT_BEHIND
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < MAX_LEFT_BEHIND).then_some(n + 1)
        })
        .is_ok()
}

/// The thread: makes each call in turn and hands its result over, until the
/// `CallThread` is dropped or a call was left behind.
fn serve(producer: &dyn TransactionalProducer, queue: mpsc::Receiver<Job>) {
    for (call, exchange) in queue {
        let result = call(producer);
        let mut state = exchange.state();
        if let State::LeftBehind = *state {
            LEFT_BEHIND.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        *state = State::Returned(result);
        exchange.changed.notify_all();
    }
}

impl std::fmt::Debug for CallThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallThread")
            .field(
                "left_behind",
                &*self.left_behind.lock().unwrap_or_else(|e| e.into_inner()),
            )
            .finish_non_exhaustive()
    }
}
