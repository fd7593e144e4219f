//! The kill loop of the crash tests: run a pipeline to completion through SIGKILLs at
//! random moments from outside and self-inflicted ones at named points of the
//! checkpoint protocol (`WEIR_FAULT`, see `weir::fault`), restarting it after each.
//!
//! Invariants: every attempt is the same `weir run` of the same spec (it recovers from
//! its last committed checkpoint); a random kill counts only if it landed while the
//! attempt still ran, and a fault attempt must die by SIGKILL (else the fault point was
//! never reached and the test would prove less than it claims); the loop ends with an
//! attempt that exits 0 after every planned kill has landed, and fails after
//! `MAX_ATTEMPTS` rather than spinning. Timing only decides where kills land, never
//! whether the test passes: the tests compare committed output, exactly.

use std::ops::Range;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{take_stderr, weir};

/// A bound on attempts: a pipeline that cannot finish fails the test instead of looping.
const MAX_ATTEMPTS: usize = 40;

/// Which kills a run goes through.
#[derive(Debug, Clone)]
pub struct KillPlan {
    /// External SIGKILLs, one per attempt without a fault, until this many landed.
    pub random_kills: usize,
    /// A random kill lands this many milliseconds after its attempt started (uniform).
    pub kill_after_ms: Range<u64>,
    /// Self-inflicted SIGKILLs by attempt number: `(attempt, "<point>:<n>")`.
    pub faults: Vec<(usize, &'static str)>,
    /// Seeds the kill moments, so a failing run can be replayed.
    pub seed: u64,
}

/// What a run through kills left behind.
#[derive(Debug)]
pub struct KillRun {
    /// The stdout of every attempt, concatenated (an at-least-once stdout sink's output).
    pub stdout: String,
    /// Kills that landed: random ones plus faults.
    pub kills: usize,
}

/// Starts `weir run --quiet <spec>`, with `WEIR_FAULT=fault` if given.
pub fn start(spec: &Path, fault: Option<&str>, stdout: Stdio) -> Child {
    let mut cmd = weir();
    cmd.args(["run", "--quiet"])
        .arg(spec)
        .stdout(stdout)
        .stderr(Stdio::piped());
    if let Some(fault) = fault {
        cmd.env("WEIR_FAULT", fault);
    }
    cmd.spawn().expect("spawn weir")
}

/// Runs `spec` to completion through `plan`'s kills (see the module invariants).
pub fn run_with_kills(spec: &Path, plan: &KillPlan) -> KillRun {
    let mut rng = StdRng::seed_from_u64(plan.seed);
    let mut stdout = String::new();
    let (mut random_kills, mut fault_kills) = (0, 0);
    for attempt in 0..MAX_ATTEMPTS {
        let fault = plan
            .faults
            .iter()
            .find(|(at, _)| *at == attempt)
            .map(|(_, fault)| *fault);
        let mut child = start(spec, fault, Stdio::piped());
        let out = child.stdout.take().expect("stdout");
        let reader = std::thread::spawn(move || std::io::read_to_string(out).unwrap_or_default());
        let mut killed = false;
        if fault.is_none() && random_kills < plan.random_kills {
            std::thread::sleep(Duration::from_millis(
                rng.random_range(plan.kill_after_ms.clone()),
            ));
            if child.try_wait().expect("try_wait").is_none() {
                child.kill().expect("SIGKILL");
                random_kills += 1;
                killed = true;
            }
        }
        let status = child.wait().expect("wait");
        let err = take_stderr(&mut child);
        stdout.push_str(&reader.join().expect("stdout reader"));
        if killed {
            continue;
        }
        if fault.is_some() {
            assert_eq!(
                status.signal(),
                Some(9),
                "fault injection {fault:?} must SIGKILL attempt {attempt}: {err}"
            );
            fault_kills += 1;
            continue;
        }
        assert!(status.success(), "attempt {attempt} failed: {err}");
        if random_kills == plan.random_kills && fault_kills == plan.faults.len() {
            return KillRun {
                stdout,
                kills: random_kills + fault_kills,
            };
        }
    }
    panic!(
        "pipeline did not finish after {MAX_ATTEMPTS} attempts ({random_kills} random kills, \
         {fault_kills} faults landed)"
    );
}
