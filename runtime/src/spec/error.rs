//! `SpecError`: why a pipeline spec was refused, as one line naming the file and line.
//!
//! Invariant: `Display` is a single line, `<file> line <n>: <reason>` when the problem
//! has a place in the file (every value, key and table has one), `<file>: <reason>`
//! when it does not (a missing required table or key at the top level).

use std::ops::Range;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("cannot read pipeline spec {}: {}", .path.display(), crate::connector::error::io_reason(.error))]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },

    #[error("{file}{}: {message}", at_line(.line))]
    Invalid {
        /// The spec's name as given to `load` / `parse`.
        file: String,
        /// 1-based line, when the problem has a place in the file.
        line: Option<usize>,
        message: String,
    },
}

fn at_line(line: &Option<usize>) -> String {
    line.map(|l| format!(" line {l}")).unwrap_or_default()
}

impl SpecError {
    /// The 1-based line the error points at, if any.
    pub fn line(&self) -> Option<usize> {
        match self {
            SpecError::Invalid { line, .. } => *line,
            SpecError::Read { .. } => None,
        }
    }
}

/// An error located by a byte span in the spec's text; becomes a `SpecError` once the
/// text and the file name are known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    /// `None` (or the root table's empty span at 0) when there is no better place.
    pub span: Option<Range<usize>>,
    pub message: String,
}

impl Located {
    pub fn at(span: Range<usize>, message: impl Into<String>) -> Self {
        Located {
            span: Some(span),
            message: message.into(),
        }
    }

    pub fn into_spec_error(self, text: &str, file: &str) -> SpecError {
        let line = self
            .span
            .filter(|s| !(s.start == 0 && s.end == 0))
            .map(|s| line_of(text, s.start));
        SpecError::Invalid {
            file: file.to_owned(),
            line,
            message: one_line(&self.message),
        }
    }
}

impl From<toml::de::Error> for Located {
    fn from(e: toml::de::Error) -> Self {
        let mut message = e.message().trim().to_owned();
        if let Some(hint) = super::did_you_mean::hint(&message) {
            message.push_str(&hint);
        }
        // toml keeps the key path private but renders it as "in `a.b`" when the error
        // carries no input text; name the key unless the message already does.
        let rendered = e.to_string();
        if let Some(keys) = rendered
            .rsplit_once("\nin `")
            .map(|(_, k)| k.trim_end().trim_end_matches('`'))
        {
            let last = keys.rsplit('.').next().unwrap_or(keys);
            if !keys.is_empty() && !mentions(&message, last) {
                message = format!("{keys}: {message}");
            }
        }
        Located {
            span: e.span(),
            message,
        }
    }
}

/// Whether `message` names `key` as a word (so "parallelism must be ..." names
/// `parallelism`, but "interval" is not named by "intervals").
fn mentions(message: &str, key: &str) -> bool {
    message
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|w| w == key)
}

fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_one_line_with_the_line_number() {
        let text = "a = 1\nb = 2\nc = 3\n";
        let e = Located::at(12..13, "c is wrong\n  really").into_spec_error(text, "spec.toml");
        assert_eq!(e.to_string(), "spec.toml line 3: c is wrong really");
        assert_eq!(e.line(), Some(3));
        let e = Located {
            span: None,
            message: "no sources".into(),
        }
        .into_spec_error(text, "spec.toml");
        assert_eq!(e.to_string(), "spec.toml: no sources");
        let e = Located::at(0..0, "missing field `name`").into_spec_error(text, "spec.toml");
        assert_eq!(e.to_string(), "spec.toml: missing field `name`");
    }
}
