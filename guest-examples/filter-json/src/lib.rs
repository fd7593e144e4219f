//! `filter-json`: a filter step over JSON values. Shows a map that returns
//! `Option<Record>`, reads the step's configuration, and rejects bad input.
//!
//! Keeps a record, unchanged, when its value is a JSON object whose top-level field
//! `field` (config `field`, default `"kind"`) equals config `equals`: a string field is
//! compared by its string value (`"click"` matches `equals = "click"`), any other by its
//! compact JSON text (`42`, `true`, `null`, `{"a":1}`). Valid JSON without that field, or
//! that is not an object, is dropped. A value that is not valid JSON is rejected to the
//! dead-letter output with the parser's message, and so is every record while `equals`
//! is not configured: the step never guesses what to keep.
//!
//! Build: `make guests` (-> build/guests/filter_json.wasm); in the pipeline spec,
//! `[step.config] field = "kind"` and `equals = "click"`.

use std::sync::LazyLock;

use serde_json::Value;
use weir_guest::{Error, Record, Result};

/// The field to look at, read once: the configuration never changes while a guest runs.
static FIELD: LazyLock<String> = LazyLock::new(|| weir_guest::config_or("field", "kind"));
/// The value to keep.
static EQUALS: LazyLock<Option<String>> = LazyLock::new(|| weir_guest::config("equals"));

#[weir_guest::map]
fn filter_json(record: Record) -> Result<Option<Record>> {
    let Some(equals) = EQUALS.as_deref() else {
        return Err(Error::new(
            "filter-json: config `equals` is not set; set it (and optionally `field`, default \
             \"kind\") in the step's [config]",
        ));
    };
    keep_if(record, &FIELD, equals)
}

/// `record` if its JSON value's top-level `field` equals `equals`.
fn keep_if(record: Record, field: &str, equals: &str) -> Result<Option<Record>> {
    let value: Value = record.json()?;
    let keep = match value.get(field) {
        Some(Value::String(text)) => text == equals,
        // Compact JSON text (`Value`'s `==` against a string matches only strings).
        Some(other) => {
            let text = other.to_string();
            text == equals
        }
        None => false,
    };
    Ok(keep.then_some(record))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(value: &str, equals: &str) -> Option<bool> {
        keep_if(Record::new("k", value), "kind", equals)
            .ok()
            .map(|r| r.is_some())
    }

    #[test]
    fn compares_strings_by_value_and_others_by_json_text() {
        assert_eq!(kept(r#"{"kind":"click","n":1}"#, "click"), Some(true));
        assert_eq!(kept(r#"{"kind":"view"}"#, "click"), Some(false));
        assert_eq!(kept(r#"{"kind":42}"#, "42"), Some(true));
        assert_eq!(
            kept(r#"{"kind":{"a":[1,true]}}"#, r#"{"a":[1,true]}"#),
            Some(true)
        );
        assert_eq!(kept(r#"{"other":"click"}"#, "click"), Some(false));
        assert_eq!(kept(r#"["click"]"#, "click"), Some(false));
    }

    #[test]
    fn malformed_json_and_missing_config_are_rejections() {
        assert_eq!(kept("{not json", "click"), None);
        // On the host no configuration is set.
        let error = filter_json(Record::new("k", "{}")).expect_err("no `equals`");
        assert!(error.message().contains("`equals` is not set"), "{error}");
    }
}
