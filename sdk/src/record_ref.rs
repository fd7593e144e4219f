//! `RecordRef`: a record borrowed from the input batch, without copying its bytes.
//!
//! Invariants:
//! - A `RecordRef<'a>` points into the columns of the batch being mapped (`keys` and
//!   `values`), which live until the map call returns: it cannot outlive that call, and
//!   nothing is copied or allocated to make one.
//! - It carries exactly what a [`Record`] carries (key, value, event time) with the same
//!   meaning (an empty key means "no key"); [`RecordRef::to_owned`] is the one copy, for
//!   a function that wants to keep or move the bytes.
//! - The `*_str` / `json` accessors fail with the same messages as `Record`'s, so a
//!   guest's rejections read the same whichever view it takes.

use crate::{Error, Record};

/// One input record, borrowed from the batch: key and value are slices of the batch's
/// columns.
///
/// A map function that takes `RecordRef<'_>` instead of [`Record`] reads its input in
/// place; with an [`Emitter`](crate::Emitter) it also writes its output in place, so
/// no record is copied into a `Record` on the way in or out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecordRef<'a> {
    /// The key; empty when the record has none.
    pub key: &'a [u8],
    /// The value (payload).
    pub value: &'a [u8],
    /// Event time, in milliseconds since the Unix epoch.
    pub timestamp: i64,
}

impl<'a> RecordRef<'a> {
    /// The key bytes (empty when the record has no key).
    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    /// The value bytes.
    pub fn value(&self) -> &'a [u8] {
        self.value
    }

    /// Event time, in milliseconds since the Unix epoch.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The key as UTF-8, or an error naming the problem (use `?` to reject the record).
    pub fn key_str(&self) -> Result<&'a str, Error> {
        core::str::from_utf8(self.key).map_err(|e| Error::new(format!("key is not UTF-8: {e}")))
    }

    /// The value as UTF-8, or an error naming the problem (use `?` to reject the record).
    pub fn value_str(&self) -> Result<&'a str, Error> {
        core::str::from_utf8(self.value).map_err(|e| Error::new(format!("value is not UTF-8: {e}")))
    }

    /// The value parsed as JSON into `T` (which may borrow from the batch), or an error
    /// naming the problem (use `?` to reject the record).
    #[cfg(feature = "json")]
    pub fn json<T: serde::Deserialize<'a>>(&self) -> Result<T, Error> {
        serde_json::from_slice(self.value)
            .map_err(|e| Error::new(format!("value is not valid JSON: {e}")))
    }

    /// An owned copy of this record (copies the key and the value).
    pub fn to_owned(&self) -> Record {
        Record {
            key: self.key.to_vec(),
            value: self.value.to_vec(),
            timestamp: self.timestamp,
        }
    }
}

impl<'a> From<&'a Record> for RecordRef<'a> {
    fn from(record: &'a Record) -> Self {
        Self {
            key: &record.key,
            value: &record.value,
            timestamp: record.timestamp,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrows_and_copies_like_a_record() {
        let owned = Record::new("k", "v").with_timestamp(42);
        let view = RecordRef::from(&owned);
        assert_eq!(
            (view.key(), view.value(), view.timestamp()),
            (&b"k"[..], &b"v"[..], 42)
        );
        assert_eq!(view.key_str().ok(), Some("k"));
        assert_eq!(view.value_str().ok(), Some("v"));
        assert_eq!(view.to_owned(), owned);
    }

    #[test]
    fn errors_read_as_the_owned_records_do() {
        let owned = Record::new(vec![0xff], vec![0xfe, b'a']);
        let view = RecordRef::from(&owned);
        let message = |r: Result<&str, Error>| r.expect_err("not UTF-8").message().to_owned();
        assert_eq!(message(view.key_str()), message(owned.key_str()));
        assert_eq!(message(view.value_str()), message(owned.value_str()));
    }

    #[cfg(feature = "json")]
    #[test]
    fn json_may_borrow_from_the_batch() {
        let owned = Record::new("", r#"{"word":"weir"}"#);
        let view = RecordRef::from(&owned);
        #[derive(serde::Deserialize)]
        struct Doc<'a> {
            word: &'a str,
        }
        let doc: Doc<'_> = view.json().expect("valid JSON");
        assert_eq!(doc.word, "weir");
        assert!(
            RecordRef::from(&Record::new("", "{"))
                .json::<Doc<'_>>()
                .is_err()
        );
    }
}
