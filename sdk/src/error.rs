//! The error a guest function returns to refuse one record.

use core::fmt;

/// Why a guest function refused a record.
///
/// Returning `Err(Error)` from a `#[map]` or `#[aggregate]` function does not fail the
/// batch or the pipeline: the runtime routes that one input record to the pipeline's
/// dead-letter output with this message as the reason, and carries on.
///
/// Any `std::error::Error` converts into it, so `?` works on `serde_json`, UTF-8 and
/// number-parsing errors; [`bail!`](crate::bail) builds one from a format string.
pub struct Error {
    message: String,
}

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = core::result::Result<T, E>;

impl Error {
    /// An error with this message (the reason shown in the dead-letter output).
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The message, by value.
    pub fn into_message(self) -> String {
        self.message
    }
}

// `Error` deliberately does not implement `std::error::Error`: this blanket impl (the one
// `anyhow` uses) would then conflict with `From<T> for T`.
impl<E: std::error::Error> From<E> for Error {
    fn from(error: E) -> Self {
        Self::new(error.to_string())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.message, f)
    }
}

/// Returns early with an [`Error`] built from a format string: the record is rejected.
///
/// ```
/// # fn f(n: i64) -> weir_guest::Result<()> {
/// if n < 0 {
///     weir_guest::bail!("negative amount {n}");
/// }
/// # Ok(()) }
/// ```
#[macro_export]
macro_rules! bail {
    ($($arg:tt)+) => {
        return ::core::result::Result::Err($crate::Error::new(::std::format!($($arg)+)))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<i64> {
        let n: i64 = text.parse()?;
        if n < 0 {
            crate::bail!("negative amount {n}");
        }
        Ok(n)
    }

    #[test]
    fn std_errors_convert_and_bail_formats() {
        assert_eq!(parse("7").ok(), Some(7));
        assert_eq!(
            parse("x").expect_err("not a number").message(),
            "invalid digit found in string"
        );
        assert_eq!(
            parse("-3").expect_err("negative").into_message(),
            "negative amount -3"
        );
        assert_eq!(Error::new("why").to_string(), "why");
    }
}
