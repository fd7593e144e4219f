//! `Worker`: worker I of N of a pipeline, as `weir run --worker I/N` names it.
//!
//! Invariants:
//! - `index < count` and `count >= 1`, for every value of the type: the only ways to
//!   make one are `Worker::new` and `FromStr`, which refuse anything else with a
//!   one-line message.
//! - `Worker::SINGLE` (0/1) is a pipeline run as one process, and changes nothing: its
//!   commit unit is `"0"`, its checkpoints and state live directly in the spec's
//!   directories, exactly as before workers existed. Every other worker has its own
//!   subdirectory `worker-<I>-of-<N>` of each (`dir_name`), so the workers of one N
//!   never share a file, and a rescale can list every old worker's checkpoints.
//! - The commit unit of worker I of N > 1 is `<I>-of-<N>` (`unit`): it names the
//!   worker's transactional ids and progress topic and is written in its markers, so
//!   worker 1 of 3 and worker 1 of 2 share no transactional id and never read each
//!   other's marker as their own. A rescale fences the old layout's ids without
//!   touching any new worker's (see `connector::kafka::takeover`).

use std::fmt;
use std::str::FromStr;

/// Worker `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Worker {
    index: u32,
    count: u32,
}

/// Most workers of one pipeline: far beyond what a machine runs, and keeps the
/// assignment (quadratic in N) and the names short.
pub const MAX_WORKERS: u32 = 1024;

/// Why a `--worker` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerParseError {
    #[error("{0:?} is not I/N (worker I of N, e.g. 0/3)")]
    Syntax(String),
    #[error("{0:?}: N must be at least 1")]
    NoWorkers(String),
    #[error("{0:?}: N must be at most {MAX_WORKERS}")]
    TooMany(String),
    #[error(
        "{value:?}: worker {index} does not exist among {count} workers (I counts from 0, so I < N)"
    )]
    OutOfRange {
        value: String,
        index: u32,
        count: u32,
    },
}

impl Worker {
    /// The whole pipeline in one process: worker 0 of 1.
    pub const SINGLE: Worker = Worker { index: 0, count: 1 };

    /// Worker `index` of `count`, checked (see the module invariants).
    pub fn new(index: u32, count: u32) -> Result<Worker, WorkerParseError> {
        let value = format!("{index}/{count}");
        if count == 0 {
            return Err(WorkerParseError::NoWorkers(value));
        }
        if count > MAX_WORKERS {
            return Err(WorkerParseError::TooMany(value));
        }
        if index >= count {
            return Err(WorkerParseError::OutOfRange {
                value,
                index,
                count,
            });
        }
        Ok(Worker { index, count })
    }

    pub fn index(self) -> u32 {
        self.index
    }

    pub fn count(self) -> u32 {
        self.count
    }

    /// Whether this is the whole pipeline in one process (0/1).
    pub fn is_single(self) -> bool {
        self.count == 1
    }

    /// The commit unit this worker is: `"0"` for 0/1 (as before workers), else
    /// `<I>-of-<N>` (see the module invariants).
    pub fn unit(self) -> String {
        if self.is_single() {
            self.index.to_string()
        } else {
            format!("{}-of-{}", self.index, self.count)
        }
    }

    /// `worker-<I>-of-<N>`: this worker's subdirectory of the spec's checkpoint and
    /// state directories; `None` for 0/1, which uses them directly.
    pub fn dir_name(self) -> Option<String> {
        (!self.is_single()).then(|| format!("worker-{}-of-{}", self.index, self.count))
    }

    /// A commit unit (`unit`) -> its worker: `0` -> 0/1, `<I>-of-<N>` -> I of N > 1;
    /// anything else -> None.
    pub fn parse_unit(unit: &str) -> Option<Worker> {
        if unit == "0" {
            return Some(Worker::SINGLE);
        }
        Worker::parse_dir_name(&format!("worker-{unit}"))
    }

    /// `worker-<I>-of-<N>` -> that worker; anything else -> None.
    pub fn parse_dir_name(name: &str) -> Option<Worker> {
        let rest = name.strip_prefix("worker-")?;
        let (index, count) = rest.split_once("-of-")?;
        let canonical = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !canonical(index) || !canonical(count) {
            return None;
        }
        let worker = Worker::new(index.parse().ok()?, count.parse().ok()?).ok()?;
        (worker.dir_name().as_deref() == Some(name)).then_some(worker)
    }
}

impl Default for Worker {
    fn default() -> Self {
        Worker::SINGLE
    }
}

impl fmt::Display for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Worker {
    type Err = WorkerParseError;

    /// `I/N`, both decimal (surrounding spaces allowed), `I < N`.
    fn from_str(s: &str) -> Result<Worker, WorkerParseError> {
        let syntax = || WorkerParseError::Syntax(s.to_owned());
        let (index, count) = s.split_once('/').ok_or_else(syntax)?;
        let number = |part: &str| -> Result<u32, WorkerParseError> {
            let part = part.trim();
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(syntax());
            }
            // Only digits: a parse failure is an overflow.
            part.parse()
                .map_err(|_| WorkerParseError::TooMany(s.to_owned()))
        };
        let (index, count) = (number(index)?, number(count)?);
        Worker::new(index, count).map_err(|e| match e {
            WorkerParseError::OutOfRange { index, count, .. } => WorkerParseError::OutOfRange {
                value: s.to_owned(),
                index,
                count,
            },
            WorkerParseError::NoWorkers(_) => WorkerParseError::NoWorkers(s.to_owned()),
            WorkerParseError::TooMany(_) => WorkerParseError::TooMany(s.to_owned()),
            other => other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_values_parse() {
        assert_eq!("0/1".parse(), Ok(Worker::SINGLE));
        let w: Worker = "2/3".parse().expect("2/3");
        assert_eq!((w.index(), w.count()), (2, 3));
        assert_eq!(w.to_string(), "2/3");
        assert_eq!(
            " 1 / 4 ".parse::<Worker>().map(|w| w.to_string()),
            Ok("1/4".into())
        );
        assert_eq!(Worker::default(), Worker::SINGLE);
    }

    #[test]
    fn bad_values_are_refused_with_one_clear_line() {
        let cases = [
            (
                "3/3",
                "\"3/3\": worker 3 does not exist among 3 workers (I counts from 0, so I < N)",
            ),
            ("0/0", "\"0/0\": N must be at least 1"),
            (
                "5/2",
                "\"5/2\": worker 5 does not exist among 2 workers (I counts from 0, so I < N)",
            ),
            ("1", "\"1\" is not I/N (worker I of N, e.g. 0/3)"),
            ("a/3", "\"a/3\" is not I/N (worker I of N, e.g. 0/3)"),
            ("-1/3", "\"-1/3\" is not I/N (worker I of N, e.g. 0/3)"),
            ("1/2/3", "\"1/2/3\" is not I/N (worker I of N, e.g. 0/3)"),
            ("/3", "\"/3\" is not I/N (worker I of N, e.g. 0/3)"),
            ("0/2000", "\"0/2000\": N must be at most 1024"),
            ("0/99999999999", "\"0/99999999999\": N must be at most 1024"),
        ];
        for (value, message) in cases {
            let error = value.parse::<Worker>().expect_err(value);
            assert_eq!(error.to_string(), message, "{value}");
        }
    }

    #[test]
    fn only_the_single_worker_has_no_directory_of_its_own() {
        assert_eq!(Worker::SINGLE.dir_name(), None);
        assert_eq!(Worker::SINGLE.unit(), "0");
        let w = Worker::new(1, 3).expect("1/3");
        assert_eq!(w.dir_name().as_deref(), Some("worker-1-of-3"));
        assert_eq!(w.unit(), "1-of-3");
        assert_ne!(w.unit(), Worker::new(1, 2).expect("1/2").unit());
        assert_eq!(Worker::parse_dir_name("worker-1-of-3"), Some(w));
        assert_eq!(Worker::parse_unit("1-of-3"), Some(w));
        assert_eq!(Worker::parse_unit("0"), Some(Worker::SINGLE));
        for bad in ["1", "0-of-1", "3-of-3", "x"] {
            assert_eq!(Worker::parse_unit(bad), None, "{bad}");
        }
        for bad in [
            "worker-3-of-3",
            "worker-01-of-3",
            "worker-1-of-",
            "chk-0000000001",
            "worker-0-of-1",
        ] {
            assert_eq!(Worker::parse_dir_name(bad), None, "{bad}");
        }
    }
}
