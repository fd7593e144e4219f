//! Output of the client subcommands: aligned tables, `key: value` lists, or the
//! server's JSON (`--json`).
//!
//! Invariants: every cell is one line whatever the server sent (control characters
//! escaped, see `server_client::one_line`), so a module name or an error cannot forge
//! a row; columns are separated by at least two spaces and no line ends in spaces.

use crate::cli::server_client::one_line;

/// Longest cell before it is cut (`...`), unless a column says otherwise.
const MAX_CELL_CHARS: usize = 200;

/// A table with a header row.
#[derive(Debug, Clone)]
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&'static str]) -> Self {
        Table {
            header: header.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are empty, extra ones dropped).
    pub fn row(&mut self, cells: Vec<String>) {
        let mut cells: Vec<String> = cells
            .iter()
            .take(self.header.len())
            .map(|c| one_line(c, MAX_CELL_CHARS))
            .collect();
        cells.resize(self.header.len(), String::new());
        self.rows.push(cells);
    }

    /// The table as lines, each ending in `\n`.
    pub fn render(&self) -> String {
        let width = |i: usize| {
            self.rows
                .iter()
                .map(|r| r[i].chars().count())
                .chain([self.header[i].chars().count()])
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..self.header.len()).map(width).collect();
        let header: Vec<String> = self.header.iter().map(|h| (*h).to_owned()).collect();
        let mut out = String::new();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (cell, w) in row.iter().zip(&widths) {
                line.push_str(&format!("{cell:<w$}  "));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `key: value` lines, values aligned after the longest key.
pub fn key_values(pairs: &[(String, String)]) -> String {
    let width = pairs
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0)
        + 1;
    let mut out = String::new();
    for (key, value) in pairs {
        let key = format!("{}:", one_line(key, MAX_CELL_CHARS));
        let line = format!("{key:<width$} {}", one_line(value, MAX_CELL_CHARS * 5));
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A byte count for people: `812 B`, `1.5 KiB`, `12.0 MiB`.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// An optional value, or `-`.
pub fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// The first `chars` characters of `text` on one line (`...` if cut).
pub fn shorten(text: &str, chars: usize) -> String {
    one_line(text, chars)
}

/// Prints `json` pretty with `--json`, else what `text` renders.
pub fn print_json_or(
    json: bool,
    value: &serde_json::Value,
    text: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    use std::io::Write;
    let out = if json {
        if value.is_null() {
            return Ok(());
        }
        format!("{}\n", serde_json::to_string_pretty(value)?)
    } else {
        text()
    };
    let mut stdout = std::io::stdout().lock();
    // A closed pipe (`weir module ls | head -1`) is not an error worth a line.
    match stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_lines_have_no_trailing_spaces() {
        let mut t = Table::new(&["ID", "NAME", "WORLD"]);
        t.row(vec!["abc".into(), "uppercase".into(), "mapper".into()]);
        t.row(vec!["abcdef".into(), "x".into(), String::new()]);
        assert_eq!(
            t.render(),
            "ID      NAME       WORLD\nabc     uppercase  mapper\nabcdef  x\n"
        );
    }

    #[test]
    fn a_cell_cannot_add_a_line() {
        let mut t = Table::new(&["NAME"]);
        t.row(vec!["evil\nID  forged".into()]);
        assert_eq!(t.render().lines().count(), 2);
    }

    #[test]
    fn key_values_align() {
        let pairs = vec![
            ("name".to_owned(), "p".to_owned()),
            ("state".to_owned(), "running".to_owned()),
            ("last_error".to_owned(), String::new()),
        ];
        assert_eq!(
            key_values(&pairs),
            "name:       p\nstate:      running\nlast_error:\n"
        );
    }

    #[test]
    fn sizes_for_people() {
        assert_eq!(size(812), "812 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(12 << 20), "12.0 MiB");
    }
}
