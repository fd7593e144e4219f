//! How records are read from lines and written as lines, for every local connector.
//!
//! Input (`format` of file and stdin sources):
//! - `lines`: one record per line; key empty, value = the line, timestamp 0.
//! - `jsonl`: one record per line; value = the line as is; key = the top-level field
//!   `key_field` (a string gives its text, a number its JSON text, `null` or a missing
//!   field the empty key, anything else its compact JSON text); timestamp = the
//!   top-level integer field `timestamp_field` in ms (missing or not an integer: 0).
//!   A line that is not a JSON object still becomes a record (empty key, timestamp 0):
//!   the guests decide what is malformed.
//!
//! Output (`format` of file and stdout sinks): `value` writes the value bytes and `\n`;
//! `json` writes `{"key": <utf-8 text, or null when empty>, "value": <utf-8 text,
//! lossy>, "timestamp": N}` and `\n`.
//!
//! Invariant: the line terminator (`\n` or `\r\n`) is never part of a record, and one
//! record is always written as exactly one line by the `json` format (the `value`
//! format writes the bytes as they are: a value containing `\n` spans several lines).

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::field::InvalidField;
use crate::record::batch::{RecordBatch, RecordRef};

/// How a source turns a line into a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputFormat {
    #[default]
    Lines,
    Jsonl,
}

/// How a sink turns a record into a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    #[default]
    Value,
    Json,
}

impl OutputFormat {
    /// The extension of the files a file sink writes in this format.
    pub fn extension(self) -> &'static str {
        match self {
            OutputFormat::Value => "txt",
            OutputFormat::Json => "jsonl",
        }
    }
}

/// Checks the fields shared by line-reading sources.
pub(crate) fn check_line_fields(
    format: InputFormat,
    key_field: &Option<String>,
    timestamp_field: &Option<String>,
) -> Result<(), InvalidField> {
    for (field, v) in [
        ("key_field", key_field),
        ("timestamp_field", timestamp_field),
    ] {
        if v.is_some() && format == InputFormat::Lines {
            return Err(InvalidField::new(
                field,
                format!("{field} needs format = \"jsonl\""),
            ));
        }
        if v.as_deref() == Some("") {
            return Err(InvalidField::new(
                field,
                format!("{field} must not be empty"),
            ));
        }
    }
    Ok(())
}

/// Turns lines into records, per [`InputFormat`], counting the records that lacked a
/// field they were to be read from (see [`LineDecoder::warn_missing_fields`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineDecoder {
    format: InputFormat,
    key_field: Option<String>,
    timestamp_field: Option<String>,
    records: u64,
    /// Records without `key_field` (their key is empty).
    missing_key: u64,
    /// Records without an integer `timestamp_field` (their event time is 0).
    missing_timestamp: u64,
}

impl LineDecoder {
    pub fn new(
        format: InputFormat,
        key_field: Option<String>,
        timestamp_field: Option<String>,
    ) -> Self {
        LineDecoder {
            format,
            key_field,
            timestamp_field,
            records: 0,
            missing_key: 0,
            missing_timestamp: 0,
        }
    }

    /// Appends the record for `line` (without its terminator) to `out`.
    pub fn push_line(&mut self, line: &[u8], out: &mut RecordBatch) {
        match self.format {
            InputFormat::Jsonl if self.key_field.is_some() || self.timestamp_field.is_some() => {
                let fields = extract_fields(
                    line,
                    self.key_field.as_deref(),
                    self.timestamp_field.as_deref(),
                );
                self.records += 1;
                self.missing_key += u64::from(self.key_field.is_some() && !fields.found_key);
                self.missing_timestamp +=
                    u64::from(self.timestamp_field.is_some() && !fields.found_timestamp);
                out.push(&fields.key, line, fields.timestamp);
            }
            _ => out.push(b"", line, 0),
        }
    }

    /// Once a source is drained: one warning per configured field that some records
    /// lacked, with the counts (a misspelt `key_field` otherwise gives every record the
    /// empty key without a word). What it warned about is not said again.
    pub fn warn_missing_fields(&mut self, source: &str) {
        let fields = [
            (
                &self.key_field,
                &mut self.missing_key,
                "key_field",
                "their key is empty",
            ),
            (
                &self.timestamp_field,
                &mut self.missing_timestamp,
                "timestamp_field",
                "their event time is 0",
            ),
        ];
        for (field, missing, setting, consequence) in fields {
            if let Some(field) = field.as_deref().filter(|_| *missing > 0) {
                tracing::warn!(
                    "{source}: {} of {} records had no {} field `{field}` ({consequence}): is `{setting}` spelt as in the data?",
                    missing,
                    self.records,
                    if setting == "key_field" {
                        "top-level"
                    } else {
                        "top-level integer"
                    },
                );
                *missing = 0;
            }
        }
        self.records = 0;
    }
}

/// Removes a trailing `\n` or `\r\n`.
/// Default longest input line (`max_line_bytes`), terminator excluded: 1 MiB. A line is
/// held whole in memory (and becomes one record), so without a bound one endless line
/// (`/dev/zero`, a corrupt file) would grow the host without limit.
pub const DEFAULT_MAX_LINE_BYTES: usize = 1 << 20;

/// `#[serde(default = ...)]` for `max_line_bytes`.
pub fn default_max_line_bytes() -> usize {
    DEFAULT_MAX_LINE_BYTES
}

/// What [`read_line_bounded`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineRead {
    /// End of input, nothing read.
    End,
    /// A line (with its terminator, if any) of this many bytes is in the buffer.
    Line(usize),
    /// The line is longer than the bound (terminator excluded); the buffer holds at
    /// most the bound plus one read buffer's worth of it.
    TooLong,
}

/// Reads one line (up to and including `\n`) into `line`, like `read_until`, but stops
/// once the line passes `max` bytes without its terminator (`\r\n` or `\n`), so memory
/// stays bounded whatever the input.
pub fn read_line_bounded<R: std::io::BufRead>(
    reader: &mut R,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<LineRead> {
    line.clear();
    loop {
        let available = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(if line.is_empty() {
                LineRead::End
            } else if strip_line_end(line).len() > max {
                LineRead::TooLong
            } else {
                LineRead::Line(line.len())
            });
        }
        let (taken, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        line.extend_from_slice(&available[..taken]);
        reader.consume(taken);
        // `max + 2` leaves room for a "\r\n" terminator not yet seen whole.
        if strip_line_end(line).len() > max && (done || line.len() > max.saturating_add(2)) {
            return Ok(LineRead::TooLong);
        }
        if done {
            return Ok(LineRead::Line(line.len()));
        }
    }
}

pub fn strip_line_end(mut line: &[u8]) -> &[u8] {
    if let Some(rest) = line.strip_suffix(b"\n") {
        line = rest;
        if let Some(rest) = line.strip_suffix(b"\r") {
            line = rest;
        }
    }
    line
}

/// The key the value's top-level JSON field `field` gives (see the module docs), or
/// `None` when `value` is not a JSON object. Shared with key-by on a field.
pub fn json_field_key(value: &[u8], field: &str) -> Option<Vec<u8>> {
    let mut de = serde_json::Deserializer::from_slice(value);
    let fields = FieldsSeed {
        key_field: Some(field),
        timestamp_field: None,
    }
    .deserialize(&mut de)
    .ok()?;
    Some(fields.key)
}

#[derive(Debug, Default)]
struct Fields {
    key: Vec<u8>,
    timestamp: i64,
    found_key: bool,
    found_timestamp: bool,
}

fn extract_fields(line: &[u8], key_field: Option<&str>, timestamp_field: Option<&str>) -> Fields {
    let mut de = serde_json::Deserializer::from_slice(line);
    FieldsSeed {
        key_field,
        timestamp_field,
    }
    .deserialize(&mut de)
    .unwrap_or_default()
}

/// Reads a JSON object, keeping only the two fields of interest and skipping the rest
/// without building a tree.
struct FieldsSeed<'a> {
    key_field: Option<&'a str>,
    timestamp_field: Option<&'a str>,
}

impl<'de> DeserializeSeed<'de> for FieldsSeed<'_> {
    type Value = Fields;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Fields, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FieldsSeed<'_> {
    type Value = Fields;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
        let mut fields = Fields::default();
        while let Some(name) = map.next_key::<Cow<'de, str>>()? {
            if Some(&*name) == self.key_field {
                fields.key = render_key(&map.next_value::<serde_json::Value>()?);
                fields.found_key = true;
            } else if Some(&*name) == self.timestamp_field {
                let time = match map.next_value::<serde_json::Value>()? {
                    serde_json::Value::Number(n) => n.as_i64(),
                    _ => None,
                };
                fields.found_timestamp = time.is_some();
                fields.timestamp = time.unwrap_or(0);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(fields)
    }
}

fn render_key(v: &serde_json::Value) -> Vec<u8> {
    match v {
        serde_json::Value::String(s) => s.as_bytes().to_vec(),
        serde_json::Value::Null => Vec::new(),
        other => other.to_string().into_bytes(),
    }
}

/// Appends `record` as one output line, `\n` included.
pub fn encode_record(format: OutputFormat, record: RecordRef<'_>, buf: &mut Vec<u8>) {
    match format {
        OutputFormat::Value => buf.extend_from_slice(record.value),
        OutputFormat::Json => {
            #[derive(Serialize)]
            struct Line<'a> {
                key: Option<Cow<'a, str>>,
                value: Cow<'a, str>,
                timestamp: i64,
            }
            let line = Line {
                key: (!record.key.is_empty()).then(|| String::from_utf8_lossy(record.key)),
                value: String::from_utf8_lossy(record.value),
                timestamp: record.timestamp,
            };
            // Serializing strings and integers into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut *buf, &line);
        }
    }
    buf.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(d: &mut LineDecoder, line: &str) -> (Vec<u8>, Vec<u8>, i64) {
        let mut b = RecordBatch::default();
        d.push_line(line.as_bytes(), &mut b);
        let r = b.get(0);
        (r.key.to_vec(), r.value.to_vec(), r.timestamp)
    }

    #[test]
    fn decodes_lines_and_jsonl() {
        let mut lines = LineDecoder::new(InputFormat::Lines, None, None);
        assert_eq!(decode(&mut lines, "hello"), (vec![], b"hello".to_vec(), 0));
        let mut j = LineDecoder::new(InputFormat::Jsonl, Some("user".into()), Some("ts".into()));
        assert_eq!(
            decode(&mut j, r#"{"user":"ann","ts":17,"x":[1,{"a":2}]}"#).0,
            b"ann"
        );
        assert_eq!(decode(&mut j, r#"{"user":"ann","ts":17}"#).2, 17);
        assert_eq!(
            decode(&mut j, r#"{"user":42,"ts":"17"}"#),
            (b"42".to_vec(), br#"{"user":42,"ts":"17"}"#.to_vec(), 0)
        );
        assert_eq!(decode(&mut j, r#"{"user":1.5}"#).0, b"1.5");
        assert_eq!(
            decode(&mut j, r#"{"user":null,"ts":1.5}"#),
            (vec![], br#"{"user":null,"ts":1.5}"#.to_vec(), 0)
        );
        assert_eq!(
            decode(&mut j, "not json"),
            (vec![], b"not json".to_vec(), 0)
        );
        assert_eq!(decode(&mut j, r#"{"other":1}"#).0, b"");
        assert_eq!(json_field_key(br#"{"k":"v"}"#, "k"), Some(b"v".to_vec()));
        assert_eq!(json_field_key(b"[1]", "k"), None);
    }

    #[test]
    fn strips_line_ends() {
        assert_eq!(strip_line_end(b"a\r\n"), b"a");
        assert_eq!(strip_line_end(b"a\n"), b"a");
        assert_eq!(strip_line_end(b"a"), b"a");
        assert_eq!(strip_line_end(b"a\r"), b"a\r");
    }

    #[test]
    fn encodes_value_and_json() {
        let r = RecordRef {
            key: b"",
            value: b"v\xff",
            timestamp: 7,
        };
        let mut buf = Vec::new();
        encode_record(OutputFormat::Value, r, &mut buf);
        assert_eq!(buf, b"v\xff\n");
        buf.clear();
        encode_record(OutputFormat::Json, r, &mut buf);
        assert_eq!(
            String::from_utf8(buf).expect("utf-8"),
            "{\"key\":null,\"value\":\"v\u{fffd}\",\"timestamp\":7}\n"
        );
        let mut buf = Vec::new();
        encode_record(
            OutputFormat::Json,
            RecordRef {
                key: b"k",
                value: b"\"q\"",
                timestamp: -1,
            },
            &mut buf,
        );
        assert_eq!(
            buf,
            b"{\"key\":\"k\",\"value\":\"\\\"q\\\"\",\"timestamp\":-1}\n"
        );
    }

    /// Issue 35 item 5: records without the configured fields are counted (a line that
    /// is not a JSON object lacks both), and the counts start again after a warning.
    #[test]
    fn records_missing_a_configured_field_are_counted() {
        let mut j = LineDecoder::new(InputFormat::Jsonl, Some("user".into()), Some("ts".into()));
        for line in [
            r#"{"user":"a","ts":1}"#,
            r#"{"usr":"b","ts":2}"#,
            r#"{"user":"c","ts":"3"}"#,
            "not json",
        ] {
            decode(&mut j, line);
        }
        assert_eq!((j.records, j.missing_key, j.missing_timestamp), (4, 2, 2));
        j.warn_missing_fields("test");
        assert_eq!((j.records, j.missing_key, j.missing_timestamp), (0, 0, 0));
    }
}
