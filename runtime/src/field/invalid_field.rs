//! `InvalidField`: a value of one table of a spec or config refused after it was
//! deserialized (a cross-field problem), naming the field the spec reports it at.

/// A cross-field problem in one table (a connector's or a step's config), found after
/// deserializing it; the spec reports it at the line of `field` in that table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidField {
    pub field: &'static str,
    pub message: String,
}

impl InvalidField {
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        InvalidField {
            field,
            message: message.into(),
        }
    }
}
