//! A child process run to its end within a deadline: what it is given on stdin, what
//! it says on stderr (bounded), and how it ended. Shared by the module compile
//! (`engine::compile_isolation`) and a server's Kafka reset (`server::retire`). And the
//! child's side of the bond: `die_with_parent`.
//!
//! Invariants: the child's stderr is read on a thread of its own while the child runs
//! (a full pipe never blocks it), at most `max_stderr` bytes of it; a child still running
//! at the deadline is killed and reaped, and its status is `None`. A child that called
//! `die_with_parent` does not outlive the thread that started it (and waits for it),
//! however that thread's process ends: SIGKILL included.

use std::io::{Read, Write};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// How often the child is looked at.
const POLL: Duration = Duration::from_millis(20);

/// The child's side, first thing: asks the kernel for SIGKILL when the thread that
/// started this process ends, then checks that its parent is still `parent` (had the
/// parent ended before the request, the signal would never come). Linux only.
pub fn die_with_parent(parent: i32) -> Result<(), String> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(|e| format!("cannot ask to die with the parent process: {e}"))?;
    if nix::unistd::getppid().as_raw() != parent {
        return Err(format!(
            "the parent process (pid {parent}) is gone; not starting"
        ));
    }
    Ok(())
}

/// How a bounded child ended.
#[derive(Debug)]
pub struct Ended {
    /// `None`: killed at the deadline.
    pub status: Option<ExitStatus>,
    pub stderr: String,
}

/// Writes `stdin` to `child` (spawned with stdin and stderr piped as given), closes
/// it, and waits until the child ends or `deadline` passes.
pub fn run_to_end(
    mut child: Child,
    stdin: Option<&[u8]>,
    deadline: Instant,
    max_stderr: u64,
) -> std::io::Result<Ended> {
    let stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        // A read error only shortens the diagnostic.
        if let Some(s) = stderr {
            let _ = s.take(max_stderr).read_to_string(&mut text);
        }
        text
    });
    if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // A child that dies early closes its stdin: the write fails, the status tells why.
        let _ = pipe.write_all(bytes);
    }
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() >= deadline {
            child.kill()?;
            child.wait()?;
            break None;
        }
        std::thread::sleep(POLL);
    };
    Ok(Ended {
        status,
        stderr: reader.join().unwrap_or_default(),
    })
}
