//! Fault injection for crash tests: the process kills itself with SIGKILL at a named
//! point of the checkpoint protocol.
//!
//! `WEIR_FAULT=<point>[:<n>]` kills the process the n-th time (default: first) it
//! reaches `<point>`. SIGKILL, not a panic or `exit`: no destructor, flush or fsync runs,
//! exactly like a machine losing power, which is what the recovery protocol must survive.
//! One point fails instead of killing: `abort-transaction` makes the n-th commit of a
//! Kafka commit unit fail as a broker failing over makes it fail (the transaction must
//! be aborted), for the tests of the in-process restart (see [`fails`]).
//! Unset, every check is one relaxed atomic load. Compiled in only with the
//! `fault-injection` feature, which the test crate turns on (so `cargo build
//! --workspace` has it) and a release build of the runtime alone (`cargo install
//! --path runtime`, the container image) leaves out: there `WEIR_FAULT` does nothing.

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
    /// A Kafka commit unit's commit: fails (see [`fails`]), kills nothing.
    AbortTransaction,
}

impl FaultPoint {
    pub const ALL: [FaultPoint; 8] = [
        FaultPoint::CheckpointTriggered,
        FaultPoint::StateUpload,
        FaultPoint::BeforePreCommit,
        FaultPoint::AfterPreCommit,
        FaultPoint::BeforeCommit,
        FaultPoint::AfterCommitRequest,
        FaultPoint::AfterCommit,
        FaultPoint::AbortTransaction,
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
            FaultPoint::AbortTransaction => "abort-transaction",
        }
    }
}

/// Kills the process if `WEIR_FAULT` names this point and its count is reached (only
/// in a build with the `fault-injection` feature: otherwise nothing, and `WEIR_FAULT`
/// is not even read).
pub fn hit(point: FaultPoint) {
    #[cfg(feature = "fault-injection")]
    armed::hit(point);
    #[cfg(not(feature = "fault-injection"))]
    let _ = point;
}

/// Whether `WEIR_FAULT` names this point and its count is reached now: the caller
/// fails there instead of going on (only with the `fault-injection` feature).
pub fn fails(point: FaultPoint) -> bool {
    #[cfg(feature = "fault-injection")]
    return armed::reached(point);
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = point;
        false
    }
}

/// The armed fault, from `WEIR_FAULT`: in test builds only.
#[cfg(feature = "fault-injection")]
mod armed {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::FaultPoint;

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

    /// Counts a pass at `point`; true at the armed one's n-th.
    pub(super) fn reached(point: FaultPoint) -> bool {
        let Some(armed) = armed() else { return false };
        armed.point == point && armed.hits.fetch_add(1, Ordering::SeqCst) + 1 == armed.nth
    }

    pub(super) fn hit(point: FaultPoint) {
        if reached(point) {
            eprintln!("weir: fault injection: SIGKILL at {}", point.name());
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGKILL);
            // SIGKILL cannot be caught; this is never reached.
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    /// A build of the runtime alone has no fault injection: the feature is no default.
    #[test]
    fn fault_injection_is_never_a_default_feature() {
        let manifest: toml::Table =
            toml::from_str(include_str!("../Cargo.toml")).expect("runtime/Cargo.toml");
        let features = manifest["features"].as_table().expect("[features]");
        assert!(features.contains_key("fault-injection"));
        let default = features.get("default").and_then(toml::Value::as_array);
        assert!(
            !default.is_some_and(|d| d.iter().any(|f| f.as_str() == Some("fault-injection"))),
            "{default:?}"
        );
    }
}
