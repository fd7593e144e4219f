//! CPU time of the processes a benchmark scenario involves, over a span: this process
//! (its own threads: producers, verifiers, an in-process baseline), the `weir` children
//! it has waited for, and the Kafka broker (found by its main class, `kafka.Kafka`).
//!
//! Children count only once reaped (`getrusage(RUSAGE_CHILDREN)`), so a span must end
//! after its children were waited for; the broker is read from `/proc/<pid>/stat`.

use std::time::Duration;

use nix::sys::resource::{UsageWho, getrusage};

/// CPU times at the start of a span; [`CpuMark::elapsed`] ends it.
#[derive(Debug, Clone, Copy)]
pub struct CpuMark {
    own: Duration,
    children: Duration,
    broker: Option<(i32, Duration)>,
}

/// CPU used over a span, by whom.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuUse {
    /// This process, all its threads.
    pub own: Duration,
    /// Its children reaped during the span (the `weir` processes).
    pub children: Duration,
    /// The Kafka broker, when one was found.
    pub broker: Option<Duration>,
}

impl CpuMark {
    pub fn now() -> Self {
        let broker = kafka_broker_pid().and_then(|pid| Some((pid, process_cpu(pid)?)));
        CpuMark {
            own: rusage(UsageWho::RUSAGE_SELF),
            children: children_cpu(),
            broker,
        }
    }

    pub fn elapsed(&self) -> CpuUse {
        let broker = self
            .broker
            .and_then(|(pid, start)| Some(process_cpu(pid)?.saturating_sub(start)));
        CpuUse {
            own: rusage(UsageWho::RUSAGE_SELF).saturating_sub(self.own),
            children: children_cpu().saturating_sub(self.children),
            broker,
        }
    }
}

/// CPU time (user + system) of every child this process has waited for so far.
pub fn children_cpu() -> Duration {
    rusage(UsageWho::RUSAGE_CHILDREN)
}

fn rusage(who: UsageWho) -> Duration {
    let Ok(usage) = getrusage(who) else {
        return Duration::ZERO;
    };
    let time =
        |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
    time(usage.user_time()) + time(usage.system_time())
}

/// The one running process whose command line names `kafka.Kafka`, if exactly one.
pub fn kafka_broker_pid() -> Option<i32> {
    let mut found = std::fs::read_dir("/proc").ok()?.filter_map(|entry| {
        let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let main_class = cmdline.split(|&b| b == 0).any(|arg| arg == b"kafka.Kafka");
        main_class.then_some(pid)
    });
    let pid = found.next()?;
    found.next().is_none().then_some(pid)
}

/// Clock ticks per second of `/proc/<pid>/stat`'s times: `USER_HZ`, fixed at 100 by
/// Linux's interface to user space whatever the kernel's own tick.
const USER_HZ: u64 = 100;

/// User plus system CPU of process `pid` (all its threads), from `/proc/<pid>/stat`.
fn process_cpu(pid: i32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces, inside parentheses).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // utime and stime are fields 14 and 15 of the line: 11 and 12 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 1000 / USER_HZ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's own CPU is read from /proc as from getrusage, within a tick.
    #[test]
    fn proc_stat_agrees_with_getrusage() {
        let mut x = 0u64;
        for i in 0..50_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let pid = std::process::id() as i32;
        let (proc_cpu, own) = (
            process_cpu(pid).expect("stat"),
            rusage(UsageWho::RUSAGE_SELF),
        );
        let diff = proc_cpu.abs_diff(own);
        assert!(diff < Duration::from_millis(100), "{proc_cpu:?} vs {own:?}");
    }
}
