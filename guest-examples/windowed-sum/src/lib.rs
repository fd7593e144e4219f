//! `windowed-sum`: a keyed, windowed aggregate that rejects bad records. Shows an update
//! function returning `Result<()>` that checks before it mutates.
//!
//! Sums an integer field of JSON object values (config `field`, default `"value"`) per
//! key and window, in an `i64`. A record whose value is not a JSON object with an integer
//! (fitting `i64`) in that field, or that would overflow the sum, is rejected to the
//! dead-letter output and leaves the sum unchanged. Sums are kept and checkpointed by the
//! runtime: exactly-once across failures. Each emitted record has the input's key and
//! value `{"key":"<key>","window_start":S,"window_end":E,"sum":X}` (`{"key":"<key>","sum":X}`
//! when the step is not windowed), with S and E the window's `[start, end)` in ms since
//! the Unix epoch and invalid UTF-8 in the key written as U+FFFD.
//!
//! Build: `make guests` (-> build/guests/windowed_sum.wasm); in the pipeline spec,
//! `[step.config] field = "amount"` to sum another field.

use std::sync::LazyLock;

use serde::Serialize;
use serde_json::Value;
use weir_guest::{Record, Result, Window, bail};

/// The field to sum, read once: the configuration never changes while a guest runs.
static FIELD: LazyLock<String> = LazyLock::new(|| weir_guest::config_or("field", "value"));

/// The emitted value; the fields serialise in this order.
#[derive(Serialize)]
struct KeySum<'a> {
    key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    window_start: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    window_end: Option<i64>,
    sum: i64,
}

#[weir_guest::aggregate(emit = emit_sum)]
fn sum(sum: &mut i64, record: &Record) -> Result<()> {
    let field = FIELD.as_str();
    let value: Value = record.json()?;
    let Value::Object(fields) = value else {
        bail!("value is not a JSON object");
    };
    let Some(addend) = fields.get(field).and_then(Value::as_i64) else {
        bail!("field `{field}` is missing or not an integer in the range of i64");
    };
    let Some(total) = sum.checked_add(addend) else {
        bail!("adding {addend} to the sum {sum} overflows i64");
    };
    *sum = total;
    Ok(())
}

fn emit_sum(key: &[u8], window: Option<Window>, sum: &i64) -> Record {
    let text = String::from_utf8_lossy(key);
    let value = KeySum {
        key: &text,
        window_start: window.map(|w| w.start),
        window_end: window.map(|w| w.end),
        sum: *sum,
    };
    // A struct of strings and integers always serialises.
    let json = serde_json::to_vec(&value).expect("a KeySum serialises to JSON");
    Record::new(key, json).with_timestamp(window.map_or(0, |w| w.end - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(total: &mut i64, value: &str) -> Result<()> {
        sum(total, &Record::new("k", value))
    }

    #[test]
    fn sums_the_field_and_rejects_without_changing_the_sum() {
        let mut total = 0;
        assert!(add(&mut total, r#"{"value":5,"other":"x"}"#).is_ok());
        assert!(add(&mut total, r#"{"value":-2}"#).is_ok());
        for bad in [
            r#"{"value":1.5}"#,
            r#"{"value":"3"}"#,
            r#"{"amount":3}"#,
            "[1]",
            "7",
            "{oops",
        ] {
            assert!(add(&mut total, bad).is_err(), "{bad}");
        }
        assert_eq!(total, 3);
        let mut total = i64::MAX - 1;
        let error = add(&mut total, r#"{"value":2}"#).expect_err("overflow");
        assert!(error.message().contains("overflows"), "{error}");
        assert_eq!(total, i64::MAX - 1);
    }

    #[test]
    fn emits_the_documented_json() {
        let windowed = emit_sum(
            b"sensor-1",
            Some(Window {
                start: 1000,
                end: 2000,
            }),
            &42,
        );
        assert_eq!(
            windowed.value_str().ok(),
            Some(r#"{"key":"sensor-1","window_start":1000,"window_end":2000,"sum":42}"#)
        );
        assert_eq!(
            emit_sum(b"s", None, &-1).value_str().ok(),
            Some(r#"{"key":"s","sum":-1}"#)
        );
    }
}
