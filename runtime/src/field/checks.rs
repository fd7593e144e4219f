//! Field validators used inside `Deserialize` (`deserialize_with`), so a refused value
//! is reported by toml at its own line, with a message that names the field.

use std::path::PathBuf;

use serde::de::{Deserialize, Deserializer, Error as _};
use toml::Spanned;

use crate::storage::CheckpointLocation;

/// Largest `parallelism`.
pub const MAX_PARALLELISM_LIMIT: usize = 256;
/// Largest `max_parallelism`: key groups are stored as a big-endian u16 prefix.
pub const MAX_KEY_GROUPS: usize = 32_768;
/// Largest `repartition_partitions` (`connector::kafka::repartition`): each partition
/// costs the broker a few files and every transaction that writes it a few bytes and a
/// marker; 1,024 is far beyond what a handful of workers needs.
pub const MAX_REPARTITION_PARTITIONS: usize = 1024;
/// Largest `batch_size`, in records.
pub const MAX_BATCH_SIZE: usize = 65_536;
/// Smallest guest memory limit: 1 MiB (a Rust guest's stack and heap start need more).
pub const MIN_GUEST_MEMORY: usize = 1 << 20;
/// Largest guest memory limit: 4 GiB, all a wasm32 guest can address (65,536 pages of
/// 64 KiB); a larger limit would promise memory no guest can use.
pub const MAX_GUEST_MEMORY: usize = 4 << 30;
/// Longest CPU deadline per guest call: 60 s. A call holds its task, and so every
/// checkpoint and a stop of the pipeline, for as long as it runs; 60 s is already the
/// default checkpoint timeout, and a batch that needs more is a guest bug.
pub const MAX_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// `[checkpoint] interval`: at least 10 ms (Flink's floor too: below it a pipeline does
/// little but checkpoint), at most a day.
pub const CHECKPOINT_INTERVAL: (std::time::Duration, std::time::Duration) = (
    std::time::Duration::from_millis(10),
    std::time::Duration::from_secs(24 * 3600),
);
/// `[checkpoint] timeout`: at least a second, at most an hour (a round that long holds
/// a Kafka transaction open that long).
pub const CHECKPOINT_TIMEOUT: (std::time::Duration, std::time::Duration) = (
    std::time::Duration::from_secs(1),
    std::time::Duration::from_secs(3600),
);
/// At most this many complete checkpoints are retained.
pub const MAX_RETAIN: u64 = 1000;
/// Compile CPU time per module: 1 s ..= 1 h (RLIMIT_CPU counts whole seconds).
pub const MIN_COMPILE_CPU: std::time::Duration = std::time::Duration::from_secs(1);
pub const MAX_COMPILE_CPU: std::time::Duration = std::time::Duration::from_secs(3600);
/// Data memory of the compiling process: 256 MiB ..= 64 GiB (the example guests
/// compile in well under 256 MiB).
pub const MIN_COMPILE_MEMORY: usize = 256 << 20;
pub const MAX_COMPILE_MEMORY: usize = 64 << 30;
/// Longest pipeline / step name: it ends up in file names and Kafka transactional ids.
pub const MAX_NAME_LEN: usize = 64;
/// Latest event time a spec may produce, in ms since the Unix epoch (and its negation
/// the earliest): 8.64e15 ms, about ±273,790 years, the range of an ECMAScript `Date`.
/// Such times survive a JSON reader that uses doubles (they are below 2^53), and leave
/// event time + window + lateness far from `i64`'s ends, which watermarks use as
/// "before everything" and "end of input".
pub const MAX_EVENT_TIME_MS: i64 = 8_640_000_000_000_000;

/// `field` must lie in `min..=max`.
pub fn check_range(field: &str, v: u64, min: u64, max: u64) -> Result<(), String> {
    if v < min {
        Err(format!("{field} must be at least {min}"))
    } else if v > max {
        Err(format!("{field} must be at most {max}"))
    } else {
        Ok(())
    }
}

/// `[a-z0-9_-]{1,64}`.
pub fn check_name(field: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(format!(
            "{field} must be 1 to {MAX_NAME_LEN} characters long"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '_' | '-'))
    {
        return Err(format!(
            "{field} {name:?} contains {c:?}: use only lowercase letters, digits, '_' and '-'"
        ));
    }
    Ok(())
}

fn ranged<'de, D: Deserializer<'de>>(
    d: D,
    field: &str,
    min: u64,
    max: u64,
) -> Result<Spanned<u64>, D::Error> {
    let v = Spanned::<u64>::deserialize(d)?;
    check_range(field, *v.get_ref(), min, max).map_err(D::Error::custom)?;
    Ok(v)
}

fn to_usize(v: Spanned<u64>) -> Spanned<usize> {
    let span = v.span();
    // Every range below is far under usize::MAX on the 64-bit targets Weir supports.
    Spanned::new(span, usize::try_from(v.into_inner()).unwrap_or(usize::MAX))
}

pub fn pipeline_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let name = String::deserialize(d)?;
    check_name("name", &name).map_err(D::Error::custom)?;
    Ok(name)
}

pub fn step_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Spanned<String>>, D::Error> {
    let name = Spanned::<String>::deserialize(d)?;
    check_name("name", name.get_ref()).map_err(D::Error::custom)?;
    Ok(Some(name))
}

pub fn parallelism<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Spanned<usize>>, D::Error> {
    ranged(d, "parallelism", 1, MAX_PARALLELISM_LIMIT as u64).map(|v| Some(to_usize(v)))
}

pub fn max_parallelism<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Spanned<usize>>, D::Error> {
    ranged(d, "max_parallelism", 1, MAX_KEY_GROUPS as u64).map(|v| Some(to_usize(v)))
}

pub fn repartition_partitions<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Spanned<usize>>, D::Error> {
    ranged(
        d,
        "repartition_partitions",
        1,
        MAX_REPARTITION_PARTITIONS as u64,
    )
    .map(|v| Some(to_usize(v)))
}

pub fn batch_size<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    ranged(d, "batch_size", 1, MAX_BATCH_SIZE as u64).map(|v| *to_usize(v).get_ref())
}

pub fn retain<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    ranged(d, "retain", 2, MAX_RETAIN).map(|v| *to_usize(v).get_ref())
}

pub fn cache_entries<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    ranged(d, "cache_entries", 1, u32::MAX as u64).map(|v| *to_usize(v).get_ref())
}

/// Smallest value of every byte budget below (`batch_bytes`, `max_line_bytes`,
/// `cache_bytes`, `max_accumulator_bytes`): 1 KiB, so a typo ("1B") is refused rather
/// than making every record or accumulator an error.
pub const MIN_BYTE_BUDGET: usize = 1 << 10;

fn byte_budget<'de, D: Deserializer<'de>>(d: D, field: &str) -> Result<usize, D::Error> {
    let bytes = crate::field::units::size(d)?;
    if bytes < MIN_BYTE_BUDGET {
        return Err(D::Error::custom(format!("{field} must be at least 1KiB")));
    }
    Ok(bytes)
}

pub fn batch_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    byte_budget(d, "batch_bytes")
}

pub fn max_line_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    byte_budget(d, "max_line_bytes")
}

pub fn cache_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    byte_budget(d, "cache_bytes")
}

pub fn max_accumulator_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    byte_budget(d, "max_accumulator_bytes")
}

pub fn guest_memory<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let bytes = crate::field::units::size(d)?;
    if bytes < MIN_GUEST_MEMORY {
        return Err(D::Error::custom("memory must be at least 1MiB"));
    }
    if bytes > MAX_GUEST_MEMORY {
        return Err(D::Error::custom(
            "memory must be at most 4GiB: a wasm32 guest cannot address more",
        ));
    }
    Ok(bytes)
}

/// A duration within `(min, max)`, for `field`.
fn duration_within<'de, D: Deserializer<'de>>(
    d: D,
    field: &str,
    (min, max): (std::time::Duration, std::time::Duration),
) -> Result<std::time::Duration, D::Error> {
    let v = crate::field::units::duration(d)?;
    let show = crate::field::units::format_duration;
    if v < min || v > max {
        return Err(D::Error::custom(format!(
            "{field} must be between {} and {}, not {}",
            show(min),
            show(max),
            show(v)
        )));
    }
    Ok(v)
}

/// `[checkpoint] interval`, within [`CHECKPOINT_INTERVAL`].
pub fn checkpoint_interval<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<std::time::Duration, D::Error> {
    duration_within(d, "checkpoint.interval", CHECKPOINT_INTERVAL)
}

/// `[checkpoint] timeout`, within [`CHECKPOINT_TIMEOUT`].
pub fn checkpoint_timeout<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<std::time::Duration, D::Error> {
    duration_within(d, "checkpoint.timeout", CHECKPOINT_TIMEOUT)
}

/// `call_timeout` must be shorter than the checkpoint timeout: a guest call that runs
/// to its deadline must fail as the guest's fault (naming the module), not time out
/// the checkpoint round it holds up.
pub fn check_call_timeout_fits(
    call_timeout: std::time::Duration,
    checkpoint_timeout: std::time::Duration,
) -> Result<(), String> {
    if call_timeout < checkpoint_timeout {
        return Ok(());
    }
    let show = crate::field::units::format_duration;
    Err(format!(
        "limits.call_timeout {} must be shorter than checkpoint.timeout {}: a guest call that ran to its deadline would time out the checkpoint instead of failing as the guest's fault; lower call_timeout or raise the checkpoint timeout",
        show(call_timeout),
        show(checkpoint_timeout)
    ))
}

/// A positive duration of at most [`MAX_CALL_TIMEOUT`].
pub fn call_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<std::time::Duration, D::Error> {
    let timeout = crate::field::units::positive_duration(d)?;
    if timeout > MAX_CALL_TIMEOUT {
        return Err(D::Error::custom(
            "call_timeout must be at most 60s: a guest call holds up its task's checkpoints for as long as it runs",
        ));
    }
    Ok(timeout)
}

/// A compile CPU limit within [`MIN_COMPILE_CPU`] ..= [`MAX_COMPILE_CPU`], in whole seconds.
pub fn compile_cpu<'de, D: Deserializer<'de>>(d: D) -> Result<std::time::Duration, D::Error> {
    check_compile_cpu(crate::field::units::duration(d)?).map_err(D::Error::custom)
}

/// A compile memory limit within [`MIN_COMPILE_MEMORY`] ..= [`MAX_COMPILE_MEMORY`].
pub fn compile_memory<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    check_compile_memory(crate::field::units::size(d)?).map_err(D::Error::custom)
}

/// `[limits] guest_log_rate`: bytes a second, 1 KiB ..= 64 MiB.
pub fn guest_log_rate<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let bytes = crate::field::units::size(d)?;
    if !((1 << 10)..=(64 << 20)).contains(&bytes) {
        return Err(D::Error::custom(
            "guest_log_rate must be from 1KiB to 64MiB (bytes a second)",
        ));
    }
    Ok(bytes)
}

/// The `compile_cpu` check, shared by the spec and `weir validate --compile-cpu`.
pub fn check_compile_cpu(cpu: std::time::Duration) -> Result<std::time::Duration, String> {
    if !(MIN_COMPILE_CPU..=MAX_COMPILE_CPU).contains(&cpu) || cpu.subsec_nanos() != 0 {
        return Err("compile_cpu must be whole seconds from 1s to 3600s".to_owned());
    }
    Ok(cpu)
}

/// The `compile_memory` check, shared by the spec and `weir validate --compile-memory`.
pub fn check_compile_memory(bytes: usize) -> Result<usize, String> {
    if !(MIN_COMPILE_MEMORY..=MAX_COMPILE_MEMORY).contains(&bytes) {
        return Err("compile_memory must be from 256MiB to 64GiB".to_owned());
    }
    Ok(bytes)
}

/// A path that is not empty (relative paths are resolved later, against the spec's
/// directory).
pub fn path<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
    let p = PathBuf::deserialize(d)?;
    if p.as_os_str().is_empty() {
        return Err(D::Error::custom("path must not be empty"));
    }
    Ok(p)
}

pub fn opt_path<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    path(d).map(Some)
}

/// `[checkpoint] dir`: a directory (relative ones resolved later) or `s3://bucket/prefix`.
pub fn opt_checkpoint_location<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<CheckpointLocation>, D::Error> {
    let dir = String::deserialize(d)?;
    CheckpointLocation::parse(&dir)
        .map(Some)
        .map_err(D::Error::custom)
}

pub fn spanned_path<'de, D: Deserializer<'de>>(d: D) -> Result<Spanned<PathBuf>, D::Error> {
    let p = Spanned::<PathBuf>::deserialize(d)?;
    if p.get_ref().as_os_str().is_empty() {
        return Err(D::Error::custom("path must not be empty"));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_name("name", "word-count_2").is_ok());
        assert!(check_name("name", "").is_err());
        assert!(check_name("name", "Word").is_err());
        assert!(check_name("name", "a/b").is_err());
        assert!(check_name("name", &"a".repeat(65)).is_err());
    }
}
