//! A child process run to its end within a deadline: what it is given on stdin, what
//! it says on stderr (bounded), and how it ended. Shared by the module compile
//! (`engine::compile_isolation`) and a server's Kafka reset (`server::retire`).
//!
//! Invariants: the child's stderr is read on a thread of its own while the child runs
//! (a full pipe never blocks it), at most `max_stderr` bytes of it; a child still running
//! at the deadline is killed and reaped, and its status is `None`.

use std::io::{Read, Write};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// How often the child is looked at.
const POLL: Duration = Duration::from_millis(20);

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
