//! The ids a client may send: tenant ids, pipeline names, module ids, step names and
//! token keys.
//!
//! Invariants: an id that passes these checks is safe as one path component and as a
//! piece of a Kafka name: ASCII lower-case letters, digits, `-` and `_` only (module
//! ids: 64 lower-case hex digits), never empty, never `.` or `..`, no slash, no control
//! character. Every id from a URL or a body is checked here before it reaches the
//! catalog, the file system or a spec.

use crate::server::error::ApiError;

/// Longest tenant id: short enough to leave room in Kafka names (249 bytes).
pub const MAX_TENANT_ID: usize = 32;
/// Longest pipeline name (the spec's own limit).
pub const MAX_PIPELINE_NAME: usize = 64;

/// A tenant id: `[a-z0-9][a-z0-9-]{0,31}`. No `.` or `_`, so that one tenant's Kafka
/// prefix `{id}.` is never a prefix of another's.
pub fn tenant_id(id: &str) -> Result<&str, ApiError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_TENANT_ID
        && !id.starts_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    ok.then_some(id).ok_or_else(|| {
        ApiError::bad_request(format!(
            "tenant id {}: use 1 to {MAX_TENANT_ID} of a-z, 0-9 and -, not starting with -",
            shown(id)
        ))
    })
}

/// A pipeline name: `[a-z0-9_-]{1,64}`, as the spec requires.
pub fn pipeline_name(name: &str) -> Result<&str, ApiError> {
    checked_name(name, MAX_PIPELINE_NAME, "pipeline name")
}

/// A step name (the spec's `name` of a step).
pub fn step_name(name: &str) -> Result<&str, ApiError> {
    checked_name(name, MAX_PIPELINE_NAME, "step name")
}

/// A module id: the SHA-256 of its bytes, 64 lower-case hex digits.
pub fn module_id(id: &str) -> Result<&str, ApiError> {
    let ok = id.len() == 64
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    ok.then_some(id).ok_or_else(|| {
        ApiError::bad_request(format!(
            "module id {}: a module id is the 64 hex digits of its SHA-256",
            shown(id)
        ))
    })
}

/// A token's key: the 16 hex digits of `weir_{key}_{secret}`.
pub fn token_key(key: &str) -> Result<&str, ApiError> {
    let ok = key.len() == 16
        && key
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    ok.then_some(key).ok_or_else(|| {
        ApiError::bad_request(format!(
            "token key {}: a token's key is the 16 hex digits after `weir_`",
            shown(key)
        ))
    })
}

fn checked_name<'a>(name: &'a str, max: usize, what: &str) -> Result<&'a str, ApiError> {
    let ok = !name.is_empty()
        && name.len() <= max
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    ok.then_some(name).ok_or_else(|| {
        ApiError::bad_request(format!(
            "{what} {}: use 1 to {max} of a-z, 0-9, - and _",
            shown(name)
        ))
    })
}

/// An id as it may appear in a one-line error: escaped, and cut short.
fn shown(id: &str) -> String {
    let mut s: String = id.chars().take(80).flat_map(char::escape_debug).collect();
    if id.chars().count() > 80 {
        s.push_str("...");
    }
    format!("\"{s}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_tricks_and_control_characters_are_refused() {
        for bad in [
            "",
            "..",
            ".",
            "a/b",
            "a\\b",
            "a\nb",
            "a\0",
            "A",
            "a.b",
            "-a",
            "é",
            &"a".repeat(33),
        ] {
            assert!(tenant_id(bad).is_err(), "{bad:?}");
        }
        for bad in [
            "",
            "..",
            "a/b",
            "../x",
            "a b",
            "a\tb",
            "a.b",
            &"a".repeat(65),
        ] {
            assert!(pipeline_name(bad).is_err(), "{bad:?}");
        }
        assert!(module_id(&"A".repeat(64)).is_err());
        assert!(module_id(&"a".repeat(63)).is_err());
        assert!(module_id(&format!("../{}", "a".repeat(61))).is_err());
    }

    #[test]
    fn good_ids_pass() {
        assert_eq!(tenant_id("team-a1").ok(), Some("team-a1"));
        assert_eq!(pipeline_name("word_count-2").ok(), Some("word_count-2"));
        assert!(module_id(&"0123456789abcdef".repeat(4)).is_ok());
    }

    #[test]
    fn an_error_shows_the_id_escaped_on_one_line() {
        let e = pipeline_name("a\nb").expect_err("refused");
        assert!(!e.message().contains('\n'), "{}", e.message());
    }
}
