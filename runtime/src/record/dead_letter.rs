//! `DeadLetter`: a record an operator refused instead of failing the pipeline, and its
//! line in the dead-letter output (a `FileSink` of format `value`, operator id
//! `dead-letter`, whose record values are made here).
//!
//! Invariant: one dead letter is one JSON object on one line, fields in this order:
//! `{"operator": .., "reason": .., "key": <utf-8 text, lossy>, "value": <utf-8 text,
//! lossy>, "timestamp": N}`; the bytes carry no trailing newline (the sink adds it).

use serde::Serialize;

/// A record routed to the pipeline's dead-letter output instead of failing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The operator that refused it.
    pub operator: String,
    pub reason: String,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub timestamp: i64,
}

/// The dead-letter output's line for `d`, without the `\n`.
pub fn dead_letter_record(d: &DeadLetter) -> Vec<u8> {
    #[derive(Serialize)]
    struct Line<'a> {
        operator: &'a str,
        reason: &'a str,
        key: std::borrow::Cow<'a, str>,
        value: std::borrow::Cow<'a, str>,
        timestamp: i64,
    }
    let line = Line {
        operator: &d.operator,
        reason: &d.reason,
        key: String::from_utf8_lossy(&d.key),
        value: String::from_utf8_lossy(&d.value),
        timestamp: d.timestamp,
    };
    // Serializing strings and an integer cannot fail.
    serde_json::to_vec(&line).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_json_line() {
        let d = DeadLetter {
            operator: "step-1".into(),
            reason: "bad\ninput".into(),
            key: b"k".to_vec(),
            value: b"{\"x\":\xff}".to_vec(),
            timestamp: 42,
        };
        assert_eq!(
            String::from_utf8(dead_letter_record(&d)).expect("utf-8"),
            r#"{"operator":"step-1","reason":"bad\ninput","key":"k","value":"{\"x\":�}","timestamp":42}"#
        );
    }
}
