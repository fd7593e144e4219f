//! The operators a pipeline's steps become.
pub mod aggregate;
pub mod key_by;
pub mod map;
mod window_index;
