//! Field values of a pipeline spec or a server config, and how they are refused:
//! durations and byte sizes as written (`units`), the validators used inside
//! `Deserialize` with every limit they enforce (`checks`), and `InvalidField`, a
//! cross-field problem named by its field.
//!
//! A leaf: it imports only `storage` (for checkpoint locations). `spec`, `connector`,
//! `server` and `cli` all import it, so a connector's config validates itself without
//! knowing the spec that holds it.

pub mod checks;
mod invalid_field;
pub mod units;

pub use invalid_field::InvalidField;
