//! `split-words`: a flat-map step. Shows a map that returns `Vec<Record>`: zero or more
//! output records per input, in order.
//!
//! Splits a record's text into words and emits one record per word, with key = value =
//! the word and the input's event time, so that a following `key-by` + aggregate (see
//! `word-count`) groups by word. The text is the string field `text` when the value is a
//! JSON object that has one, otherwise the whole value read as UTF-8. A word is a maximal
//! run of alphanumeric characters (Unicode), lowercased. A value that is not UTF-8 is
//! rejected to the dead-letter output; a value without words emits nothing.
//!
//! Build: `make guests` (-> build/guests/split_words.wasm).

use serde_json::Value;
use weir_guest::{Record, Result};

#[weir_guest::map]
fn split_words(record: Record) -> Result<Vec<Record>> {
    let whole = record.value_str()?;
    let document = whole
        .trim_start()
        .starts_with('{')
        .then(|| serde_json::from_str::<Value>(whole));
    let text = match &document {
        Some(Ok(Value::Object(fields))) => match fields.get("text") {
            Some(Value::String(text)) => text.as_str(),
            _ => whole,
        },
        _ => whole,
    };
    Ok(text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(|word| {
            let word = word.to_lowercase();
            Record::new(word.clone(), word).with_timestamp(record.timestamp)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(value: &[u8]) -> Option<Vec<(String, String, i64)>> {
        let records = split_words(Record::new("line", value).with_timestamp(7)).ok()?;
        Some(
            records
                .into_iter()
                .map(|r| {
                    (
                        r.key_str().expect("utf-8").into(),
                        r.value_str().expect("utf-8").into(),
                        r.timestamp,
                    )
                })
                .collect(),
        )
    }

    fn w(word: &str) -> (String, String, i64) {
        (word.into(), word.into(), 7)
    }

    #[test]
    fn splits_text_or_the_json_text_field() {
        assert_eq!(
            words(b"Hello, hello WORLD!  x2"),
            Some(vec![w("hello"), w("hello"), w("world"), w("x2")])
        );
        assert_eq!(
            words(br#"{"text":"Gr\u00fc\u00dfe aus K\u00f6ln","id":3}"#),
            Some(vec![w("grüße"), w("aus"), w("köln")])
        );
        // No string `text` field: the whole value is the text.
        assert_eq!(
            words(br#"{"body":"a b"}"#),
            Some(vec![w("body"), w("a"), w("b")])
        );
        assert_eq!(words(b"{broken"), Some(vec![w("broken")]));
        assert_eq!(words(b" ,;- "), Some(vec![]));
    }

    #[test]
    fn non_utf8_is_rejected() {
        assert_eq!(words(&[b'a', 0xff]), None);
    }
}
