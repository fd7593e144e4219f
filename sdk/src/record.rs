//! The record a guest function sees, and the event-time window of an aggregate.

use crate::Error;

/// One record of the stream: an optional key, a value and an event time.
///
/// Keys and values are plain bytes; an empty key means "no key". The timestamp is event
/// time in milliseconds since the Unix epoch. A `Record` owns its bytes, so a map
/// function can move the value into its output without copying it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Record {
    /// The key; empty when the record has none.
    pub key: Vec<u8>,
    /// The value (payload).
    pub value: Vec<u8>,
    /// Event time, in milliseconds since the Unix epoch.
    pub timestamp: i64,
}

impl Record {
    /// A record with this key and value and timestamp 0.
    ///
    /// In a map function, prefer [`Record::with_timestamp`] (or editing the input record
    /// in place) to keep the input's event time.
    pub fn new(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
            timestamp: 0,
        }
    }

    /// This record with its event time set to `timestamp` (ms since the Unix epoch).
    #[must_use]
    pub fn with_timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = timestamp;
        self
    }

    /// The key bytes (empty when the record has no key).
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The value bytes.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// Event time, in milliseconds since the Unix epoch.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The key as UTF-8, or an error naming the problem (use `?` to reject the record).
    pub fn key_str(&self) -> Result<&str, Error> {
        core::str::from_utf8(&self.key).map_err(|e| Error::new(format!("key is not UTF-8: {e}")))
    }

    /// The value as UTF-8, or an error naming the problem (use `?` to reject the record).
    pub fn value_str(&self) -> Result<&str, Error> {
        core::str::from_utf8(&self.value)
            .map_err(|e| Error::new(format!("value is not UTF-8: {e}")))
    }

    /// The value parsed as JSON into `T`, or an error naming the problem (use `?` to
    /// reject the record).
    #[cfg(feature = "json")]
    pub fn json<'a, T: serde::Deserialize<'a>>(&'a self) -> Result<T, Error> {
        serde_json::from_slice(&self.value)
            .map_err(|e| Error::new(format!("value is not valid JSON: {e}")))
    }

    /// A record whose value is `value` serialised as JSON, with this key and timestamp 0.
    #[cfg(feature = "json")]
    pub fn from_json<T: serde::Serialize + ?Sized>(
        key: impl Into<Vec<u8>>,
        value: &T,
    ) -> Result<Self, Error> {
        let value = serde_json::to_vec(value)
            .map_err(|e| Error::new(format!("value does not serialise to JSON: {e}")))?;
        Ok(Self::new(key, value))
    }
}

/// The event-time window `[start, end)` an aggregate's accumulator belongs to, in
/// milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window {
    /// Inclusive start.
    pub start: i64,
    /// Exclusive end.
    pub end: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_and_accessors() {
        let record = Record::new("k", "v").with_timestamp(42);
        assert_eq!(
            (record.key(), record.value(), record.timestamp()),
            (&b"k"[..], &b"v"[..], 42)
        );
        assert_eq!(record.key_str().ok(), Some("k"));
        assert_eq!(Record::new("k", "v").timestamp, 0);
    }

    #[test]
    fn non_utf8_is_an_error_naming_the_part() {
        let record = Record::new(vec![0xff], vec![0xfe, b'a']);
        assert!(
            record
                .key_str()
                .expect_err("invalid key")
                .message()
                .starts_with("key is not UTF-8")
        );
        assert!(
            record
                .value_str()
                .expect_err("invalid value")
                .message()
                .starts_with("value is not UTF-8")
        );
    }

    #[cfg(feature = "json")]
    #[test]
    fn json_round_trip_and_malformed_json() {
        let record = Record::from_json("k", &serde_json::json!({"a": 1})).expect("serialises");
        assert_eq!(record.value, br#"{"a":1}"#);
        let value: serde_json::Value = record.json().expect("parses");
        assert_eq!(value["a"], 1);
        let bad = Record::new("k", "{not json");
        let error = bad.json::<serde_json::Value>().expect_err("malformed");
        assert!(
            error.message().starts_with("value is not valid JSON"),
            "{error}"
        );
    }
}
