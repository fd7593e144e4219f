//! Text that reaches the user from a guest, or from wasmtime about a guest, made safe to
//! print on one line.
//!
//! Invariants:
//! - [`escape`] output contains no control character (no `\n`, `\r`, ESC, ...) and no
//!   Unicode line or paragraph separator: each is written as its Rust escape (`\n`,
//!   `\u{1b}`). A guest can therefore never start a new line in Weir's output, nor
//!   forge a `weir: error:` line, whatever it puts in a panic message, a log call, its
//!   stderr or its custom-section names (which appear in wasm backtraces).
//! - [`one_line`] is for multi-line text whose line structure is the host's own
//!   (wasmparser errors, wasmtime trap backtraces): its non-empty lines are trimmed,
//!   escaped and joined with ` | `.
//! - Both are total (never panic) on any input.

/// `text` with every control character and line/paragraph separator escaped.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The non-empty lines of `text`, trimmed, escaped and joined with ` | `.
pub(crate) fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(escape)
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_keeps_everything_on_one_line() {
        assert_eq!(
            escape("boom\nweir: error: forged\r\x1b[31m\u{2028}ok é"),
            "boom\\nweir: error: forged\\r\\u{1b}[31m\\u{2028}ok é"
        );
    }

    #[test]
    fn one_line_joins_trimmed_lines() {
        assert_eq!(
            one_line("error: bad\n  0: frame\n\n  1: other\x07\n"),
            "error: bad | 0: frame | 1: other\\u{7}"
        );
    }
}
