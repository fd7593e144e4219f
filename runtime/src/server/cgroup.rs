//! Linux control groups, as the kernel interface the tenant walls (`walls`) are built
//! on: find the hierarchies, make a group, set its CPU and memory limits, put a process
//! in it, read what it used.
//!
//! Invariants:
//! - Version: cgroup v2 when the server's own unified group offers both the `cpu` and
//!   the `memory` controller; otherwise v1, with `cpu` and `memory` mounted (apart or
//!   together) and `cpuacct` for the usage where it is mounted. Found once, from
//!   `/proc/self/cgroup` and `/proc/self/mountinfo`.
//! - A `Group` is one directory per hierarchy (v2: one). Every write is to a file the
//!   kernel documents; a value is written whole, and a failed write is an error naming
//!   the file, never ignored, except the optional swap files (`memory.memsw.*` without
//!   swap accounting, `memory.swap.max` without swap).
//! - CPU: a quota of `m` millicores is `m * 100` microseconds of CPU every 100 ms period
//!   (v1 `cpu.cfs_quota_us`, v2 `cpu.max`); the weight under contention is proportional
//!   to it (v1 `cpu.shares`, 1,024 a CPU; v2 `cpu.weight`, 100 a CPU). Without a quota the
//!   group has no cap and the weight of one CPU, so groups compete as equals whatever
//!   their number of threads.
//! - Memory: a limit of `b` bytes is v1 `memory.limit_in_bytes` (and
//!   `memory.memsw.limit_in_bytes`, so swap is no way round it), v2 `memory.max` (and
//!   `memory.swap.max = 0`). Past it the kernel reclaims, then kills a process of that
//!   group only (counted as `oom_kill`).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The CPU period a quota is measured against.
const PERIOD_US: u64 = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no usable cgroups: {0}")]
    Unavailable(String),
    #[error("cgroup {path}: cannot {action}: {source}")]
    Io {
        path: String,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path, action: &'static str) -> impl FnOnce(std::io::Error) -> CgroupError {
    let path = path.display().to_string();
    move |source| CgroupError::Io {
        path,
        action,
        source,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// CPU and memory limits of a group; `None`: no cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    pub cpu_millicores: Option<u32>,
    pub memory_bytes: Option<u64>,
}

/// What a group has used since it was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub cpu: Duration,
    pub memory_bytes: u64,
    /// Processes the kernel killed for the group's memory limit.
    pub oom_kills: u64,
    /// CPU periods in which the group ran out of its quota.
    pub throttled_periods: u64,
}

/// One control group: its directory in each hierarchy this server uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    version: Version,
    cpu: PathBuf,
    memory: PathBuf,
    /// v1: where `cpuacct.usage` is (`cpu`'s directory when the two are mounted
    /// together); v2: `cpu`'s directory.
    cpuacct: Option<PathBuf>,
}

impl Group {
    /// The server's own group (or `parent`, a path inside each hierarchy such as
    /// `/weir`, when given), as this process sees the hierarchies.
    pub fn detect(parent: Option<&str>) -> Result<Group, CgroupError> {
        let read = |p: &str| {
            std::fs::read_to_string(p).map_err(|e| CgroupError::Unavailable(format!("{p}: {e}")))
        };
        let found = Hierarchies::parse(&read("/proc/self/cgroup")?, &read("/proc/self/mountinfo")?);
        found.group(parent)
    }

    pub fn version(&self) -> Version {
        self.version
    }

    /// Where the group is, for the server's start line.
    pub fn describe(&self) -> String {
        match self.version {
            Version::V2 => format!("cgroup v2 {}", self.cpu.display()),
            Version::V1 => format!(
                "cgroup v1 {} and {}",
                self.cpu.display(),
                self.memory.display()
            ),
        }
    }

    /// The group `name` below this one (not made yet: `create`).
    pub fn child(&self, name: &str) -> Group {
        Group {
            version: self.version,
            cpu: self.cpu.join(name),
            memory: self.memory.join(name),
            cpuacct: self.cpuacct.as_ref().map(|d| d.join(name)),
        }
    }

    /// Each distinct directory of the group.
    fn dirs(&self) -> Vec<&Path> {
        let mut dirs = vec![self.cpu.as_path(), self.memory.as_path()];
        dirs.extend(self.cpuacct.as_deref());
        dirs.sort();
        dirs.dedup();
        dirs
    }

    /// Makes the group in every hierarchy (an existing one is kept). v2: the parent
    /// hands its `cpu` and `memory` controllers down first (`delegate`).
    pub fn create(&self) -> Result<(), CgroupError> {
        if self.version == Version::V2
            && let Some(parent) = self.cpu.parent()
        {
            delegate(parent)?;
        }
        for dir in self.dirs() {
            let made = std::fs::create_dir(dir);
            except(made, std::io::ErrorKind::AlreadyExists).map_err(io(dir, "create the group"))?;
        }
        Ok(())
    }

    /// Writes `limits` (see the module invariants), replacing the group's last ones.
    pub fn set_limits(&self, limits: &Limits) -> Result<(), CgroupError> {
        for (file, value) in cpu_settings(self.version, limits.cpu_millicores) {
            write(&self.cpu.join(file), &value)?;
        }
        for (file, value, required) in memory_settings(self.version, limits.memory_bytes) {
            let path = self.memory.join(file);
            if required || path.exists() {
                write(&path, &value)?;
            }
        }
        Ok(())
    }

    /// Moves process `pid` (all its threads) into the group.
    pub fn add(&self, pid: u32) -> Result<(), CgroupError> {
        for dir in self.dirs() {
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// What the group has used; a counter that cannot be read is 0.
    pub fn usage(&self) -> Usage {
        let number = |dir: &Path, file: &str| read_number(&dir.join(file)).unwrap_or(0);
        let field =
            |dir: &Path, file: &str, key: &str| keyed_field(&dir.join(file), key).unwrap_or(0);
        let cpu = match (self.version, &self.cpuacct) {
            (Version::V2, _) => Duration::from_micros(field(&self.cpu, "cpu.stat", "usage_usec")),
            (Version::V1, Some(acct)) => Duration::from_nanos(number(acct, "cpuacct.usage")),
            (Version::V1, None) => Duration::ZERO,
        };
        let memory_file = match self.version {
            Version::V2 => "memory.current",
            Version::V1 => "memory.usage_in_bytes",
        };
        Usage {
            cpu,
            memory_bytes: number(&self.memory, memory_file),
            oom_kills: self.oom_kills(),
            throttled_periods: field(&self.cpu, "cpu.stat", "nr_throttled"),
        }
    }

    /// Processes the kernel has killed for the group's memory limit (0 if unreadable).
    pub fn oom_kills(&self) -> u64 {
        let file = match self.version {
            Version::V2 => "memory.events",
            Version::V1 => "memory.oom_control",
        };
        keyed_field(&self.memory.join(file), "oom_kill").unwrap_or(0)
    }

    /// Removes the group (it must hold no process); a group already gone is fine.
    pub fn remove(&self) -> Result<(), CgroupError> {
        for dir in self.dirs() {
            let removed = std::fs::remove_dir(dir);
            except(removed, std::io::ErrorKind::NotFound).map_err(io(dir, "remove the group"))?;
        }
        Ok(())
    }
}

/// v2: lets the groups below `dir` use the `cpu` and `memory` controllers. A group that
/// holds processes cannot hand controllers down (the "no internal processes" rule), so
/// when this server's own process is what blocks it, it moves itself into a leaf
/// `weir-server` first.
fn delegate(dir: &Path) -> Result<(), CgroupError> {
    let control = dir.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&control).unwrap_or_default();
    if ["cpu", "memory"]
        .iter()
        .all(|c| enabled.split_whitespace().any(|e| e == *c))
    {
        return Ok(());
    }
    if write(&control, "+cpu +memory").is_ok() {
        return Ok(());
    }
    let leaf = dir.join("weir-server");
    except(
        std::fs::create_dir(&leaf),
        std::io::ErrorKind::AlreadyExists,
    )
    .map_err(io(&leaf, "create the server's leaf group"))?;
    write(&leaf.join("cgroup.procs"), &std::process::id().to_string())?;
    write(&control, "+cpu +memory")
}

/// The writes that set a CPU quota of `millicores` (`None`: no cap, one CPU's weight).
pub fn cpu_settings(version: Version, millicores: Option<u32>) -> Vec<(&'static str, String)> {
    let quota_us = millicores.map(|m| u64::from(m) * PERIOD_US / 1000);
    let cpus = f64::from(millicores.unwrap_or(1000)) / 1000.0;
    match version {
        Version::V1 => vec![
            ("cpu.cfs_period_us", PERIOD_US.to_string()),
            (
                "cpu.cfs_quota_us",
                quota_us.map_or("-1".into(), |q| q.to_string()),
            ),
            (
                "cpu.shares",
                ((cpus * 1024.0).round() as u64)
                    .clamp(2, 262_144)
                    .to_string(),
            ),
        ],
        Version::V2 => vec![
            (
                "cpu.max",
                format!(
                    "{} {PERIOD_US}",
                    quota_us.map_or("max".into(), |q| q.to_string())
                ),
            ),
            (
                "cpu.weight",
                ((cpus * 100.0).round() as u64).clamp(1, 10_000).to_string(),
            ),
        ],
    }
}

/// The writes that set a memory limit of `bytes`, in order, each with whether it is
/// required (the swap files exist only with swap accounting). v1's swap limit must stay
/// at or above the memory limit at every step, so it is lifted first.
pub fn memory_settings(version: Version, bytes: Option<u64>) -> Vec<(&'static str, String, bool)> {
    let limit = |unlimited: &str| bytes.map_or(unlimited.to_owned(), |b| b.to_string());
    match version {
        Version::V1 => vec![
            ("memory.memsw.limit_in_bytes", "-1".into(), false),
            ("memory.limit_in_bytes", limit("-1"), true),
            ("memory.memsw.limit_in_bytes", limit("-1"), false),
        ],
        Version::V2 => vec![
            ("memory.max", limit("max"), true),
            (
                "memory.swap.max",
                if bytes.is_some() { "0" } else { "max" }.into(),
                false,
            ),
        ],
    }
}

/// `result`, with an error of kind `fine` taken as done (a group already made, or
/// already gone).
fn except(result: std::io::Result<()>, fine: std::io::ErrorKind) -> std::io::Result<()> {
    match result {
        Err(e) if e.kind() == fine => Ok(()),
        other => other,
    }
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    std::fs::write(path, value).map_err(io(path, "write"))
}

fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `key`'s value in a file of `key value` lines (`cpu.stat`, `memory.events`).
fn keyed_field(path: &Path, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    keyed(&text, key)
}

fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The hierarchies this process is in: where each is mounted and its group there.
#[derive(Debug, Default, PartialEq, Eq)]
struct Hierarchies {
    /// v2: the unified hierarchy.
    unified: Option<Mount>,
    /// v1: the hierarchy of each controller.
    cpu: Option<Mount>,
    memory: Option<Mount>,
    cpuacct: Option<Mount>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    point: PathBuf,
    /// The part of the hierarchy mounted there (`/` unless in a namespace).
    root: String,
    /// This process's group in the hierarchy.
    group: String,
}

impl Mount {
    /// The directory of `group` (default: this process's own), under the mount point.
    fn dir(&self, group: Option<&str>) -> PathBuf {
        let group = group.unwrap_or(&self.group);
        let inside = group.strip_prefix(self.root.as_str()).unwrap_or(group);
        self.point.join(inside.trim_start_matches('/'))
    }
}

impl Hierarchies {
    /// From `/proc/self/cgroup` (`id:controllers:path` lines) and
    /// `/proc/self/mountinfo` (`... root mount-point ... - type source options`).
    fn parse(proc_cgroup: &str, mountinfo: &str) -> Hierarchies {
        let mut found = Hierarchies::default();
        let groups: Vec<(Vec<&str>, &str)> = proc_cgroup
            .lines()
            .filter_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                Some((controllers.split(',').collect(), path))
            })
            .collect();
        for line in mountinfo.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let left: Vec<&str> = left.split(' ').collect();
            let right: Vec<&str> = right.split(' ').collect();
            let (Some(root), Some(point), Some(kind)) = (left.get(3), left.get(4), right.first())
            else {
                continue;
            };
            let options: Vec<&str> = right.get(2).map_or(vec![], |o| o.split(',').collect());
            found.add_mount(&groups, root, Path::new(point), kind, &options);
        }
        found
    }

    fn add_mount(
        &mut self,
        groups: &[(Vec<&str>, &str)],
        root: &str,
        point: &Path,
        kind: &str,
        options: &[&str],
    ) {
        let group_of = |controller: &str| {
            groups
                .iter()
                .find(|(cs, _)| cs.contains(&controller))
                .map(|(_, path)| path.to_string())
        };
        if kind == "cgroup2" {
            if let Some(group) = group_of("") {
                self.unified = Some(Mount {
                    point: point.to_owned(),
                    root: root.to_owned(),
                    group,
                });
            }
            return;
        }
        if kind != "cgroup" {
            return;
        }
        for (controller, slot) in [
            ("cpu", &mut self.cpu),
            ("memory", &mut self.memory),
            ("cpuacct", &mut self.cpuacct),
        ] {
            if options.contains(&controller)
                && slot.is_none()
                && let Some(group) = group_of(controller)
            {
                *slot = Some(Mount {
                    point: point.to_owned(),
                    root: root.to_owned(),
                    group,
                });
            }
        }
    }

    /// The group to build under: v2 when its controllers are there, else v1.
    fn group(&self, parent: Option<&str>) -> Result<Group, CgroupError> {
        if let Some(unified) = &self.unified {
            let dir = unified.dir(parent);
            let controllers =
                std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
            let offered = |c: &str| controllers.split_whitespace().any(|x| x == c);
            if offered("cpu") && offered("memory") {
                return Ok(Group {
                    version: Version::V2,
                    cpu: dir.clone(),
                    memory: dir.clone(),
                    cpuacct: Some(dir),
                });
            }
        }
        match (&self.cpu, &self.memory) {
            (Some(cpu), Some(memory)) => Ok(Group {
                version: Version::V1,
                cpu: cpu.dir(parent),
                memory: memory.dir(parent),
                cpuacct: self.cpuacct.as_ref().map(|m| m.dir(parent)),
            }),
            _ => Err(CgroupError::Unavailable(
                "neither cgroup v2 with the cpu and memory controllers nor v1 cpu and memory hierarchies are mounted"
                    .into(),
            )),
        }
    }
}

#[cfg(test)]
#[path = "cgroup_tests.rs"]
mod tests;
