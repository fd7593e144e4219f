//! `CheckpointLocation`: where a pipeline's checkpoints live, as `[checkpoint] dir`
//! names it: a local directory (the default) or `s3://bucket/prefix` in an
//! S3-compatible object store.
//!
//! Invariants: an `s3://` location always has a bucket, and its prefix is a
//! normalised key prefix (no leading, trailing or doubled `/`, no `.`/`..` segment), so
//! two spellings of one place compare equal and no prefix can climb out of itself.
//! Other URL schemes (`gs://`, `file://`, `https://` ...) are refused, never read as a
//! relative directory named `gs:`.

use std::fmt;
use std::path::{Path, PathBuf};

/// The URL schemes that name an object store (only S3-compatible ones are supported).
const S3_SCHEME: &str = "s3://";

/// Where a pipeline's checkpoints live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointLocation {
    /// A local directory (absolute once the spec is resolved).
    Local(PathBuf),
    /// A prefix in an S3-compatible bucket; credentials and endpoint come from the
    /// environment (see `storage::object`).
    S3(S3Location),
}

/// `s3://bucket/prefix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    pub bucket: String,
    /// Normalised: empty (the bucket's root) or `a/b` without leading or trailing `/`.
    pub prefix: String,
}

impl CheckpointLocation {
    /// Parses `[checkpoint] dir`: `s3://bucket[/prefix]`, else a path (relative ones are
    /// resolved later against the spec's directory).
    pub fn parse(dir: &str) -> Result<CheckpointLocation, String> {
        if dir.is_empty() {
            return Err("path must not be empty".into());
        }
        if let Some(rest) = dir.strip_prefix(S3_SCHEME) {
            return S3Location::parse(rest).map(CheckpointLocation::S3);
        }
        if let Some((scheme, _)) = dir.split_once("://")
            && !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        {
            return Err(format!(
                "{dir:?}: {scheme}:// is not a supported checkpoint store: use a local directory or s3://bucket/prefix"
            ));
        }
        Ok(CheckpointLocation::Local(PathBuf::from(dir)))
    }

    /// A local location resolved against `base_dir`; object store locations as they are.
    pub fn resolve(self, base_dir: &Path) -> CheckpointLocation {
        match self {
            CheckpointLocation::Local(dir) => CheckpointLocation::Local(base_dir.join(dir)),
            other => other,
        }
    }

    /// The location one path component `name` below this one: a subdirectory, or the
    /// prefix extended by `/name` (a worker's own checkpoints, see `cluster::Worker`).
    pub fn child(&self, name: &str) -> CheckpointLocation {
        match self {
            CheckpointLocation::Local(dir) => CheckpointLocation::Local(dir.join(name)),
            CheckpointLocation::S3(s3) => CheckpointLocation::S3(S3Location {
                bucket: s3.bucket.clone(),
                prefix: if s3.prefix.is_empty() {
                    name.to_owned()
                } else {
                    format!("{}/{name}", s3.prefix)
                },
            }),
        }
    }

    /// The local directory, if this is one.
    pub fn as_local(&self) -> Option<&Path> {
        match self {
            CheckpointLocation::Local(dir) => Some(dir),
            CheckpointLocation::S3(_) => None,
        }
    }
}

impl S3Location {
    fn parse(rest: &str) -> Result<S3Location, String> {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        // S3's bucket naming rules, loosely: what a URL host label can carry.
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.'))
            && !bucket.starts_with(['-', '.'])
            && !bucket.ends_with(['-', '.']);
        if !bucket_ok {
            return Err(format!(
                "s3://{rest}: {bucket:?} is not a bucket name (3 to 63 lowercase letters, digits, '-' or '.')"
            ));
        }
        let mut segments = Vec::new();
        for segment in prefix.split('/').filter(|s| !s.is_empty()) {
            if segment == "." || segment == ".." || segment.contains(['\\', '\0']) {
                return Err(format!(
                    "s3://{rest}: the prefix may not contain {segment:?}"
                ));
            }
            segments.push(segment);
        }
        Ok(S3Location {
            bucket: bucket.to_owned(),
            prefix: segments.join("/"),
        })
    }
}

impl fmt::Display for S3Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefix.is_empty() {
            write!(f, "{S3_SCHEME}{}", self.bucket)
        } else {
            write!(f, "{S3_SCHEME}{}/{}", self.bucket, self.prefix)
        }
    }
}

impl fmt::Display for CheckpointLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointLocation::Local(dir) => write!(f, "{}", dir.display()),
            CheckpointLocation::S3(s3) => s3.fmt(f),
        }
    }
}

impl From<PathBuf> for CheckpointLocation {
    fn from(dir: PathBuf) -> Self {
        CheckpointLocation::Local(dir)
    }
}

impl From<&PathBuf> for CheckpointLocation {
    fn from(dir: &PathBuf) -> Self {
        CheckpointLocation::Local(dir.clone())
    }
}

impl From<&CheckpointLocation> for CheckpointLocation {
    fn from(location: &CheckpointLocation) -> Self {
        location.clone()
    }
}

impl From<&Path> for CheckpointLocation {
    fn from(dir: &Path) -> Self {
        CheckpointLocation::Local(dir.to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(bucket: &str, prefix: &str) -> CheckpointLocation {
        CheckpointLocation::S3(S3Location {
            bucket: bucket.into(),
            prefix: prefix.into(),
        })
    }

    #[test]
    fn s3_urls_and_paths_are_told_apart() {
        assert_eq!(
            CheckpointLocation::parse("s3://weir-ckpt/a/b").expect("parses"),
            s3("weir-ckpt", "a/b")
        );
        assert_eq!(
            CheckpointLocation::parse("s3://weir-ckpt//a/b/").expect("parses"),
            s3("weir-ckpt", "a/b")
        );
        assert_eq!(
            CheckpointLocation::parse("s3://weir-ckpt").expect("parses"),
            s3("weir-ckpt", "")
        );
        assert_eq!(
            CheckpointLocation::parse("s3://weir-ckpt/a/b")
                .expect("parses")
                .to_string(),
            "s3://weir-ckpt/a/b"
        );
        assert_eq!(
            CheckpointLocation::parse("ckpt/s3:x").expect("parses"),
            CheckpointLocation::Local("ckpt/s3:x".into())
        );
        assert_eq!(
            CheckpointLocation::parse("rel")
                .expect("parses")
                .resolve(Path::new("/base")),
            CheckpointLocation::Local("/base/rel".into())
        );
        assert_eq!(s3("b-1", "p").resolve(Path::new("/base")), s3("b-1", "p"));
    }

    #[test]
    fn bad_locations_are_refused_with_a_reason() {
        for (bad, says) in [
            ("", "empty"),
            ("s3://", "bucket name"),
            ("s3://UPPER/x", "bucket name"),
            ("s3://bkt/../x", "\"..\""),
            ("gs://b/x", "gs:// is not a supported"),
            ("file:///tmp/x", "file:// is not a supported"),
        ] {
            let err = CheckpointLocation::parse(bad).expect_err(bad);
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
