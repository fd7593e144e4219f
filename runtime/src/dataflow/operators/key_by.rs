//! `KeyByField`: re-keys each record by a top-level field of its JSON value.
//!
//! Runs just before a shuffle so that partitioning, state and windows see the new key.
//! Invariant: the key is the field's JSON text, without quotes for strings (`"u1"` ->
//! `u1`, `42` -> `42`). A value that is not a JSON object with that field is refused to
//! the dead-letter output, never silently given an empty key.

use crate::dataflow::operator::{Operator, OperatorError, Output};
use crate::record::batch::RecordBatch;

#[derive(Debug)]
pub struct KeyByField {
    id: String,
    field: String,
}

impl KeyByField {
    pub fn new(id: String, field: String) -> Self {
        Self { id, field }
    }
}

impl Operator for KeyByField {
    fn id(&self) -> &str {
        &self.id
    }

    fn handle_batch(&mut self, batch: RecordBatch, out: &mut Output) -> Result<(), OperatorError> {
        let mut keyed = RecordBatch::with_capacity(batch.len(), batch.values.len());
        for r in batch.iter() {
            let field =
                serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(r.value)
                    .map_err(|e| format!("value is not a JSON object: {e}"))
                    .and_then(|mut object| {
                        object
                            .remove(&self.field)
                            .ok_or_else(|| format!("no field `{}`", self.field))
                    });
            match field {
                Ok(serde_json::Value::String(s)) => keyed.push(s.as_bytes(), r.value, r.timestamp),
                Ok(other) => keyed.push(other.to_string().as_bytes(), r.value, r.timestamp),
                Err(reason) => out.reject(
                    &self.id,
                    format!("key-by: {reason}"),
                    r.key,
                    r.value,
                    r.timestamp,
                ),
            }
        }
        out.emit(keyed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rekeys_by_field_and_refuses_what_has_none() {
        let mut op = KeyByField::new("key-by".into(), "user".into());
        let mut batch = RecordBatch::default();
        batch.push(b"", br#"{"user":"u1","n":1}"#, 1);
        batch.push(b"", br#"{"user":42}"#, 2);
        batch.push(b"old", b"not json", 3);
        batch.push(b"", br#"{"other":1}"#, 4);
        let mut out = Output::default();
        op.handle_batch(batch, &mut out).expect("handled");
        let keys: Vec<&[u8]> = out.batches[0].iter().map(|r| r.key).collect();
        assert_eq!(keys, [b"u1".as_slice(), b"42"]);
        assert_eq!(out.dead_letters.len(), 2);
        assert_eq!(out.dead_letters[0].key, b"old");
    }
}
