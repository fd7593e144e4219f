//! The operators a pipeline's steps become.
pub mod aggregate;
pub mod guest_call;
pub mod key_by;
pub mod map;
mod on_error;
mod window_index;

pub use on_error::OnError;
