//! Field validators used inside `Deserialize` (`deserialize_with`), so a refused value
//! is reported by toml at its own line, with a message that names the field.

use std::path::PathBuf;

use serde::de::{Deserialize, Deserializer, Error as _};
use toml::Spanned;

/// Largest `parallelism`.
pub const MAX_PARALLELISM_LIMIT: usize = 256;
/// Largest `max_parallelism`: key groups are stored as a big-endian u16 prefix.
pub const MAX_KEY_GROUPS: usize = 32_768;
/// Largest `batch_size`, in records.
pub const MAX_BATCH_SIZE: usize = 65_536;
/// Smallest guest memory limit: 1 MiB (a Rust guest's stack and heap start need more).
pub const MIN_GUEST_MEMORY: usize = 1 << 20;
/// Longest pipeline / step name: it ends up in file names and Kafka transactional ids.
pub const MAX_NAME_LEN: usize = 64;

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

pub fn batch_size<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    ranged(d, "batch_size", 1, MAX_BATCH_SIZE as u64).map(|v| *to_usize(v).get_ref())
}

pub fn retain<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    ranged(d, "retain", 2, u32::MAX as u64).map(|v| *to_usize(v).get_ref())
}

pub fn cache_entries<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    ranged(d, "cache_entries", 1, u32::MAX as u64).map(|v| *to_usize(v).get_ref())
}

pub fn guest_memory<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let bytes = crate::spec::units::size(d)?;
    if bytes < MIN_GUEST_MEMORY {
        return Err(D::Error::custom("memory must be at least 1MiB"));
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
