//! Fault injection for crash tests: the process kills itself with SIGKILL at a named
//! point of the checkpoint protocol.
//!
//! `WEIR_FAULT=<point>[:<n>]` kills the process the n-th time (default: first) it
//! reaches `<point>`. SIGKILL, not a panic or `exit`: no destructor, flush or fsync runs,
//! exactly like a machine losing power, which is what the recovery protocol must survive.
//! Unset, every check is one relaxed atomic load.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The points of the protocol a test can crash at, in protocol order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// Barriers injected, acknowledgements pending: a crash in the middle of a checkpoint.
    CheckpointTriggered,
    /// A state file was uploaded to checkpoint storage, others of the same snapshot
    /// maybe not yet: a crash in the middle of a state upload (off the task thread).
    StateUpload,
    /// Every task acknowledged; sinks not yet pre-committed (flushed).
    BeforePreCommit,
    /// Sinks pre-committed; metadata not yet written.
    AfterPreCommit,
    /// Metadata written (checkpoint complete); sinks not yet committed.
    BeforeCommit,
    /// The commit was issued to the first sink.
    AfterCommitRequest,
    /// Every sink committed; the next checkpoint not yet triggered.
    AfterCommit,
}

impl FaultPoint {
    pub const ALL: [FaultPoint; 7] = [
        FaultPoint::CheckpointTriggered,
        FaultPoint::StateUpload,
        FaultPoint::BeforePreCommit,
        FaultPoint::AfterPreCommit,
        FaultPoint::BeforeCommit,
        FaultPoint::AfterCommitRequest,
        FaultPoint::AfterCommit,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultPoint::CheckpointTriggered => "checkpoint-triggered",
            FaultPoint::StateUpload => "state-upload",
            FaultPoint::BeforePreCommit => "before-pre-commit",
            FaultPoint::AfterPreCommit => "after-pre-commit",
            FaultPoint::BeforeCommit => "before-commit",
            FaultPoint::AfterCommitRequest => "after-commit-request",
            FaultPoint::AfterCommit => "after-commit",
        }
    }
}

struct Armed {
    point: FaultPoint,
    nth: u64,
    hits: AtomicU64,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let spec = std::env::var("WEIR_FAULT").ok()?;
            let (name, nth) = match spec.split_once(':') {
                Some((name, n)) => (name.to_owned(), n.parse().unwrap_or(1)),
                None => (spec, 1),
            };
            let point = FaultPoint::ALL.into_iter().find(|p| p.name() == name);
            if point.is_none() {
                tracing::warn!("WEIR_FAULT={name}: unknown fault point, ignored");
            }
            Some(Armed {
                point: point?,
                nth,
                hits: AtomicU64::new(0),
            })
        })
        .as_ref()
}

/// Kills the process if `WEIR_FAULT` names this point and its count is reached.
pub fn hit(point: FaultPoint) {
    let Some(armed) = armed() else { return };
    if armed.point != point {
        return;
    }
    if armed.hits.fetch_add(1, Ordering::SeqCst) + 1 == armed.nth {
        eprintln!("weir: fault injection: SIGKILL at {}", point.name());
        let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGKILL);
        // SIGKILL cannot be caught; this is never reached.
        std::process::abort();
    }
}
