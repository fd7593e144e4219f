//! What a checkpoint records of each operator and source: an `OperatorSnapshot` per
//! operator subtask, and a `SourcePosition` per source subtask, and the one way to
//! encode and decode the typed state inside them ([`encode`], [`decode`]).
//!
//! Each source and operator keeps its position or state as its own serde type
//! implementing [`SnapshotState`], stored as a JSON object inside the checkpoint's
//! `_metadata` with the type's format version under [`VERSION_FIELD`]
//! (`{"v": 1, ...}`), so no state type may have a field named `v`. No source or
//! operator calls serde_json on its snapshot's state itself.
//!
//! Invariants, so that a checkpoint written by an older weir still restores:
//! - A field added later has a serde default: a snapshot written before it decodes.
//! - Versions only go up, and a released version never changes meaning; a type bumps
//!   its `VERSION` when a default is not enough, and its [`SnapshotState::upgrade`]
//!   then decodes every older version.
//! - A snapshot without the version field (written before versions existed) is
//!   version 1.
//! - A snapshot of a version newer than the type's `VERSION` is refused with a
//!   [`SnapshotError::Newer`] naming the source or operator and both versions, never
//!   decoded by guesswork.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A source's position as [`encode`] wrote it, stored in checkpoint metadata.
pub type SourcePosition = serde_json::Value;

/// The key of a snapshot's format version inside its JSON object.
pub const VERSION_FIELD: &str = "v";

/// The version of a snapshot that has no version field: written before versions existed.
pub const UNVERSIONED: u32 = 1;

/// A source position or operator state as stored in a checkpoint.
pub trait SnapshotState: Serialize + DeserializeOwned {
    /// The format version this weir writes, and the newest it reads.
    const VERSION: u32;

    /// Decodes `value` (the JSON object without its version field) written at
    /// `version` (`1..=VERSION`). The default reads the current format, which is right
    /// while every change is an added field with a default; a type that bumps `VERSION`
    /// for another change converts the older versions here.
    fn upgrade(version: u32, value: serde_json::Value) -> Result<Self, serde_json::Error> {
        let _ = version;
        serde_json::from_value(value)
    }
}

/// Why a snapshot could not be encoded or decoded; `what` names the source or operator.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(
        "checkpoint written by a newer weir: {what} version {found}, this weir reads up to {supported}"
    )]
    Newer {
        what: String,
        found: u64,
        supported: u32,
    },
    #[error("{what}: invalid snapshot version {found} (expected a whole number from 1)")]
    BadVersion { what: String, found: String },
    /// The state's JSON is left out of the message: an operator's can list many files.
    /// The serde reason is part of the line, not a `source()`, so that a CLI printing
    /// the error chain does not repeat it (as in `ConnectorError`).
    #[error("{what}: unreadable snapshot: {error}")]
    Invalid {
        what: String,
        error: serde_json::Error,
    },
    #[error("{what}: cannot encode snapshot: {error}")]
    Encode {
        what: String,
        error: serde_json::Error,
    },
}

/// `state` as stored in a checkpoint: its JSON object with `"v": T::VERSION` added.
/// `what` names the source or operator for the error, which only a type that does not
/// serialise as a JSON object (a bug in the type) can cause.
pub fn encode<T: SnapshotState>(what: &str, state: &T) -> Result<serde_json::Value, SnapshotError> {
    let encode_error = |error| SnapshotError::Encode {
        what: what.to_owned(),
        error,
    };
    let mut value = serde_json::to_value(state).map_err(encode_error)?;
    let serde_json::Value::Object(fields) = &mut value else {
        return Err(encode_error(serde::ser::Error::custom(
            "a snapshot state must serialise as a JSON object",
        )));
    };
    fields.insert(VERSION_FIELD.to_owned(), T::VERSION.into());
    Ok(value)
}

/// Decodes a `T` written by [`encode`] of this or an older weir (see the module docs):
/// no version field is version 1, a newer version than `T::VERSION` is refused.
pub fn decode<T: SnapshotState>(what: &str, value: &serde_json::Value) -> Result<T, SnapshotError> {
    let invalid = |error| SnapshotError::Invalid {
        what: what.to_owned(),
        error,
    };
    let mut fields = value.clone();
    let version = match fields.as_object_mut().and_then(|f| f.remove(VERSION_FIELD)) {
        None => UNVERSIONED,
        Some(v) => {
            let found = v.as_u64().filter(|n| *n >= 1);
            let found = found.ok_or_else(|| SnapshotError::BadVersion {
                what: what.to_owned(),
                found: v.to_string(),
            })?;
            match u32::try_from(found) {
                Ok(version) if version <= T::VERSION => version,
                _ => {
                    return Err(SnapshotError::Newer {
                        what: what.to_owned(),
                        found,
                        supported: T::VERSION,
                    });
                }
            }
        }
    };
    T::upgrade(version, fields).map_err(invalid)
}

/// An operator's snapshot for one checkpoint, stored in the checkpoint's metadata.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OperatorSnapshot {
    /// What the operator needs to restore (and, for sinks, to commit): its
    /// [`SnapshotState`] as [`encode`] wrote it (a source's: its position).
    pub state: serde_json::Value,
    /// Files this checkpoint added to checkpoint storage (incremental state upload).
    #[serde(default)]
    pub files_added: u64,
    #[serde(default)]
    pub bytes_added: u64,
    /// Bytes of the whole state this snapshot references (shared and private files).
    #[serde(default)]
    pub state_bytes: u64,
    /// Shared files in checkpoint storage this snapshot needs, as (storage task, shared
    /// name): retention keeps them while the checkpoint is kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_files: Vec<(String, String)>,
}

impl OperatorSnapshot {
    /// A snapshot that uploaded no files.
    pub fn new(state: serde_json::Value) -> Self {
        Self {
            state,
            files_added: 0,
            bytes_added: 0,
            state_bytes: 0,
            shared_files: Vec::new(),
        }
    }
}

/// Checks `T`'s version handling (for each state type's tests): `unversioned`, a JSON
/// object exactly as a weir before versions wrote it, decodes to `expected`; `expected`
/// encodes with `"v": T::VERSION` and decodes back; version `T::VERSION + 1` is refused
/// with the one-line message naming `what` and both versions.
#[cfg(test)]
pub fn assert_versioned<T>(what: &str, unversioned: serde_json::Value, expected: &T)
where
    T: SnapshotState + PartialEq + std::fmt::Debug,
{
    assert!(
        unversioned.get(VERSION_FIELD).is_none(),
        "the old literal must have no version field"
    );
    let old: T = decode(what, &unversioned).expect("an unversioned snapshot decodes");
    assert_eq!(&old, expected, "unversioned snapshot");

    let encoded = encode(what, expected).expect("encode");
    assert_eq!(encoded[VERSION_FIELD], serde_json::json!(T::VERSION));
    let mut without_version = encoded.clone();
    if let Some(fields) = without_version.as_object_mut() {
        fields.remove(VERSION_FIELD);
    }
    assert_eq!(
        without_version, unversioned,
        "today's encoding is the old one plus the version"
    );
    let back: T = decode(what, &encoded).expect("round trip");
    assert_eq!(&back, expected, "round trip");

    let mut newer = encoded;
    newer[VERSION_FIELD] = serde_json::json!(T::VERSION + 1);
    let err = decode::<T>(what, &newer).expect_err("a newer version is refused");
    assert_eq!(
        err.to_string(),
        format!(
            "checkpoint written by a newer weir: {what} version {}, this weir reads up to {}",
            T::VERSION + 1,
            T::VERSION
        )
    );
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Counter {
        count: u64,
        #[serde(default)]
        label: String,
    }

    impl SnapshotState for Counter {
        const VERSION: u32 = 1;
    }

    /// Version 2 renamed `n` to `count`; `upgrade` reads version 1.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Renamed {
        count: u64,
    }

    impl SnapshotState for Renamed {
        const VERSION: u32 = 2;
        fn upgrade(version: u32, value: serde_json::Value) -> Result<Self, serde_json::Error> {
            #[derive(Deserialize)]
            struct V1 {
                n: u64,
            }
            if version == 1 {
                let V1 { n } = serde_json::from_value(value)?;
                Ok(Renamed { count: n })
            } else {
                serde_json::from_value(value)
            }
        }
    }

    /// Catches: the version field left out, misplaced, or not stripped before decoding
    /// (a `deny_unknown_fields` type would refuse its own snapshots); a missing version
    /// read as anything but 1; a newer version decoded by guesswork.
    #[test]
    fn versions_are_written_checked_and_defaulted() {
        assert_versioned(
            "test state",
            json!({"count": 3, "label": "x"}),
            &Counter {
                count: 3,
                label: "x".into(),
            },
        );
        // A field added later decodes from a snapshot written before it.
        let old: Counter = decode("test state", &json!({"count": 3})).expect("decode");
        assert_eq!(old.label, "");
    }

    /// Catches: `upgrade` not called, or called with the wrong version (2 for a snapshot
    /// without a version field).
    #[test]
    fn older_versions_go_through_upgrade() {
        let old: Renamed = decode("renamed", &json!({"n": 7})).expect("unversioned is v1");
        assert_eq!(old, Renamed { count: 7 });
        let v1: Renamed = decode("renamed", &json!({"v": 1, "n": 7})).expect("v1");
        assert_eq!(v1, Renamed { count: 7 });
        let v2: Renamed = decode("renamed", &json!({"v": 2, "count": 8})).expect("v2");
        assert_eq!(v2, Renamed { count: 8 });
        assert_eq!(
            encode("renamed", &Renamed { count: 8 }).expect("encode"),
            json!({"v": 2, "count": 8})
        );
    }

    /// Catches: version 0, a negative, fractional or text version, or a non-object
    /// snapshot accepted or turned into a panic instead of one line naming the state.
    #[test]
    fn malformed_snapshots_are_one_line_errors() {
        for bad in [json!(0), json!(-1), json!(1.5), json!("1")] {
            let err = decode::<Counter>("test state", &json!({"v": bad, "count": 1}))
                .expect_err("bad version");
            assert_eq!(
                err.to_string(),
                format!(
                    "test state: invalid snapshot version {bad} (expected a whole number from 1)"
                )
            );
        }
        let huge = decode::<Counter>("test state", &json!({"v": u64::MAX, "count": 1}));
        assert!(matches!(huge, Err(SnapshotError::Newer { .. })));
        let err = decode::<Counter>("test state", &json!(null)).expect_err("not an object");
        assert!(
            err.to_string()
                .starts_with("test state: unreadable snapshot: "),
            "{err}"
        );
        // The reason is in the line, not repeated as a `source()`.
        assert!(std::error::Error::source(&err).is_none());
        let err =
            decode::<Counter>("test state", &json!({"count": 1, "extra": 2})).expect_err("extra");
        assert!(!err.to_string().contains('\n'), "{err}");
        #[derive(Serialize, Deserialize)]
        struct Bare(u64);
        impl SnapshotState for Bare {
            const VERSION: u32 = 1;
        }
        assert!(matches!(
            encode("test state", &Bare(7)),
            Err(SnapshotError::Encode { .. })
        ));
    }
}
