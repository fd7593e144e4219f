//! Where in a tenant's JSON spec a line of the TOML generated from it comes from, so
//! that a refusal the spec parser locates by line (`spec line 12: ...`) names the
//! tenant's own field instead (`spec field steps[1].window.size: ...`): the tenant
//! never sees the generated TOML.
//!
//! Invariants: the TOML is `toml::to_string`'s of a JSON object: tables as `[a.b]`
//! headers, arrays of tables as `[[a]]` headers (one per element, in order), every
//! other value on its own `key = value` line. A line maps to the header above it plus
//! its key; a header line to the table itself. A line this cannot place gives `None`,
//! and the refusal keeps no line at all.

use std::collections::BTreeMap;

/// The JSON path of line `line` (1-based) of `toml` (see the module invariants).
pub fn json_path_of_line(toml: &str, line: usize) -> Option<String> {
    let mut arrays: BTreeMap<String, usize> = BTreeMap::new();
    let mut table = String::new();
    for (i, text) in toml.lines().enumerate().take(line) {
        let text = text.trim();
        let at_line = i + 1 == line;
        if let Some(header) = text.strip_prefix("[[").and_then(|r| r.strip_suffix("]]")) {
            let n = *arrays
                .entry(header.to_owned())
                .and_modify(|n| *n += 1)
                .or_insert(0);
            table = format!("{}[{n}]", indexed(header, &arrays, header));
        } else if let Some(header) = text.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            table = indexed(header, &arrays, "");
        } else if at_line {
            let key = text.split_once('=')?.0.trim().trim_matches('"');
            return Some(join(&table, key));
        }
        if at_line {
            return Some(table);
        }
    }
    None
}

/// Dotted `header` as a JSON path, each prefix that is an array of tables (other than
/// `except`, the header being opened) indexed by its current element.
fn indexed(header: &str, arrays: &BTreeMap<String, usize>, except: &str) -> String {
    let mut path = String::new();
    let mut prefix = String::new();
    for part in header.split('.') {
        prefix = join(&prefix, part);
        path = join(&path, part);
        if prefix != except
            && let Some(n) = arrays.get(&prefix)
        {
            path = format!("{path}[{n}]");
        }
    }
    path
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_map_to_the_json_fields_they_came_from() {
        let spec = serde_json::json!({
            "name": "wc",
            "checkpoint": {"interval": "1s"},
            "sources": [{"type": "kafka", "topic": "a.in"}],
            "steps": [
                {"type": "map", "module": "m"},
                {"type": "aggregate", "module": "n", "window": {"size": "1h"}},
            ],
        });
        let toml = toml::to_string(&spec).expect("toml");
        let line_of = |needle: &str| {
            toml.lines()
                .position(|l| l.contains(needle))
                .map(|i| i + 1)
                .unwrap_or_else(|| panic!("{needle} in {toml}"))
        };
        let path = |needle: &str| json_path_of_line(&toml, line_of(needle));
        assert_eq!(path("name = ").as_deref(), Some("name"));
        assert_eq!(path("interval").as_deref(), Some("checkpoint.interval"));
        assert_eq!(path("topic").as_deref(), Some("sources[0].topic"));
        assert_eq!(path("\"n\"").as_deref(), Some("steps[1].module"));
        assert_eq!(path("size").as_deref(), Some("steps[1].window.size"));
        assert_eq!(path("[steps.window]").as_deref(), Some("steps[1].window"));
        assert_eq!(json_path_of_line(&toml, 10_000), None);
    }
}
