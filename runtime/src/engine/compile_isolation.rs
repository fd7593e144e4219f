//! Compiling a guest in a child process under CPU-time and memory limits, so that a
//! compile bomb (a function shaped to make Cranelift slow or hungry: a few hundred KiB
//! of branches over hundreds of locals takes tens of seconds and most of a GiB) costs a
//! bounded share of the host and fails with one line naming the module and the limit.
//!
//! Invariants:
//! - The child is the `weir` binary itself (`weir compile-module`, hidden), given the
//!   module's bytes on stdin. It dies with the thread that started it and waits for it
//!   (`child_process::die_with_parent`), so a `weir` or a server killed with -9 leaves
//!   no compile running. Before it reads them it lowers its own RLIMIT_CPU (soft =
//!   the limit: SIGXCPU; hard = one second more: SIGKILL) and RLIMIT_DATA (heap and
//!   private writable mappings: the memory it can actually use, unlike RLIMIT_AS, which
//!   also counts reserved address space such as malloc arenas); limits only go down,
//!   and only in the child.
//! - The child compiles with the same wasmtime configuration and compiled-code cache as
//!   the parent, so its artifact lands in the cache and the parent's own compile is a
//!   cache hit (reuse goes through wasmtime's cache, never through `unsafe`
//!   deserialisation in our crates). Without a cache the parent compiles again, now
//!   known to fit the limits.
//! - A child that does not exit 0 is a refusal: the parent never falls back to an
//!   unbounded compile. CPU time past the limit (SIGXCPU/SIGKILL) and memory past it (an
//!   aborted allocation, or wasmtime failing to map memory) are named as such; anything
//!   else is the child's one-line reason.
//! - The parent waits at most [`CompileLimits::wall_backstop`] (the CPU limit is CPU
//!   time; a child starved of CPU may take longer in wall time) and kills the child
//!   past it. It reads at most [`MAX_CHILD_STDERR`] bytes of the child's stderr.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::error::EngineError;
use super::guest_text::one_line;
use crate::child_process;

/// Default CPU time one module may take to compile: a componentize-py guest (18 MB)
/// takes about a minute on two busy cores; real Rust guests take well under a second.
pub const DEFAULT_COMPILE_CPU: Duration = Duration::from_secs(300);

/// Default data memory of the compiling child. Cranelift compiles functions in parallel
/// and needs a few hundred MiB for a large guest; the example guests need under 256 MiB.
pub const DEFAULT_COMPILE_MEMORY: u64 = 4 << 30; // 4 GiB

/// The most of the child's stderr the parent reads.
pub const MAX_CHILD_STDERR: u64 = 64 << 10;

/// The hidden subcommand that compiles one module in a child process.
pub const CHILD_SUBCOMMAND: &str = "compile-module";

/// Bounds on compiling one module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileLimits {
    /// CPU time (all threads) the compiling child may use.
    pub cpu: Duration,
    /// Data memory (RLIMIT_DATA) of the compiling child, in bytes.
    pub memory_bytes: u64,
}

impl Default for CompileLimits {
    fn default() -> Self {
        CompileLimits {
            cpu: DEFAULT_COMPILE_CPU,
            memory_bytes: DEFAULT_COMPILE_MEMORY,
        }
    }
}

impl CompileLimits {
    /// How long in wall time the parent waits for the child before killing it.
    pub fn wall_backstop(&self) -> Duration {
        self.cpu * 4 + Duration::from_secs(10)
    }
}

/// Compile every module in a child process running `program` (the `weir` binary).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileIsolation {
    pub program: PathBuf,
    pub limits: CompileLimits,
}

/// Why the child did not compile the module.
enum ChildFailure {
    Cpu,
    Memory,
    Backstop,
    Reason(String),
}

impl CompileIsolation {
    /// Compiles `bytes` in a child under the limits; `Ok` if it compiled there.
    pub(crate) fn check(
        &self,
        name: &str,
        bytes: &[u8],
        cache_dir: Option<&Path>,
    ) -> Result<(), EngineError> {
        let refused = |reason: String| EngineError::Invalid {
            module: name.to_owned(),
            reason,
        };
        let failure = match self.run_child(bytes, cache_dir) {
            Ok(None) => return Ok(()),
            Ok(Some(failure)) => failure,
            Err(e) => {
                return Err(EngineError::Setup(format!(
                    "cannot run the compiler process {}: {e}",
                    self.program.display()
                )));
            }
        };
        let limits = &self.limits;
        Err(refused(match failure {
            ChildFailure::Cpu => format!(
                "took more than {}s of CPU time to compile and was stopped (compile_cpu)",
                limits.cpu.as_secs().max(1)
            ),
            ChildFailure::Memory => format!(
                "needed more than {} MiB of memory to compile and was stopped (compile_memory)",
                limits.memory_bytes >> 20
            ),
            ChildFailure::Backstop => format!(
                "did not finish compiling within {}s of wall time and was stopped",
                limits.wall_backstop().as_secs()
            ),
            ChildFailure::Reason(reason) => reason,
        }))
    }

    /// Runs the child to completion: `None` if it compiled the module.
    fn run_child(
        &self,
        bytes: &[u8],
        cache_dir: Option<&Path>,
    ) -> std::io::Result<Option<ChildFailure>> {
        let mut command = Command::new(&self.program);
        command
            .arg(CHILD_SUBCOMMAND)
            .arg("--cpu-ms")
            .arg(self.limits.cpu.as_millis().to_string())
            .arg("--memory-bytes")
            .arg(self.limits.memory_bytes.to_string())
            .arg("--parent")
            .arg(std::process::id().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(dir) = cache_dir {
            command.arg("--cache-dir").arg(dir);
        }
        let deadline = Instant::now() + self.limits.wall_backstop();
        let ended =
            child_process::run_to_end(command.spawn()?, Some(bytes), deadline, MAX_CHILD_STDERR)?;
        let Some(status) = ended.status else {
            return Ok(Some(ChildFailure::Backstop));
        };
        if status.success() {
            return Ok(None);
        }
        Ok(Some(classify(status, &ended.stderr)))
    }
}

/// What a failed child's status and stderr say.
fn classify(status: std::process::ExitStatus, stderr: &str) -> ChildFailure {
    use nix::sys::signal::Signal;
    let cpu_signals = [Signal::SIGXCPU as i32, Signal::SIGKILL as i32];
    if status.signal().is_some_and(|s| cpu_signals.contains(&s)) {
        return ChildFailure::Cpu;
    }
    // Rust's allocation failure message (then SIGABRT), or wasmtime failing to map.
    if stderr.contains("memory allocation of") || stderr.contains("os error 12") {
        return ChildFailure::Memory;
    }
    let line = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| one_line(l.trim()));
    ChildFailure::Reason(line.unwrap_or_else(|| format!("the compiler process failed ({status})")))
}

/// The child's side, first thing: lowers this process's CPU-time and data-memory
/// limits (`weir compile-module` then compiles the module from stdin).
pub fn lower_limits(limits: CompileLimits) -> nix::Result<()> {
    use nix::sys::resource::{Resource, setrlimit};
    let cpu = limits.cpu.as_secs().max(1);
    setrlimit(Resource::RLIMIT_CPU, cpu, cpu + 1)?;
    setrlimit(
        Resource::RLIMIT_DATA,
        limits.memory_bytes,
        limits.memory_bytes,
    )
}
