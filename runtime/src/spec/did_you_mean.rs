//! "Did you mean": the known name closest to a misspelt one, for spec errors.
//!
//! Invariant: a suggestion is made only when exactly the closest candidate is within
//! [`max_distance`] edits (optimal string alignment: insertions, deletions,
//! substitutions and swaps of two neighbours, so `tpye` is one edit from `type`); a
//! far-off or ambiguous name gets none rather than a wrong guess.

/// Edits allowed for a word of `len` characters: one per three, at least one.
fn max_distance(len: usize) -> usize {
    (len / 3).max(1)
}

/// The candidate closest to `word`, if it is close enough and the only one that close.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = max_distance(word.chars().count());
    let mut best: Option<(usize, &'a str)> = None;
    let mut tied = false;
    for candidate in candidates {
        let d = distance(word, candidate);
        if d == 0 || d > limit {
            continue;
        }
        match best {
            Some((b, _)) if d > b => {}
            Some((b, _)) if d == b => tied = true,
            _ => {
                best = Some((d, candidate));
                tied = false;
            }
        }
    }
    best.filter(|_| !tied).map(|(_, c)| c)
}

/// For serde's "unknown field `x`, expected one of `a`, `b`" (or "unknown variant"),
/// "; did you mean `a`?" when one of the expected names is close to `x`.
pub(crate) fn hint(message: &str) -> Option<String> {
    let rest = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("unknown variant `"))?;
    let (word, expected) = rest.split_once('`')?;
    let names = expected.split('`').skip(1).step_by(2);
    closest(word, names).map(|name| format!("; did you mean `{name}`?"))
}

/// Optimal string alignment distance between `a` and `b`, by characters.
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = d;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_names_are_suggested_and_far_or_ambiguous_ones_are_not() {
        assert_eq!(closest("tpye", ["type", "module"]), Some("type"));
        assert_eq!(
            closest("windw", ["window", "module", "config"]),
            Some("window")
        );
        assert_eq!(
            closest("step", ["sources", "steps", "sinks"]),
            Some("steps")
        );
        assert_eq!(closest("colour", ["type", "module"]), None, "too far");
        assert_eq!(closest("cat", ["bat", "hat"]), None, "ambiguous");
        assert_eq!(closest("type", ["type"]), None, "not a misspelling");
    }

    #[test]
    fn serde_unknown_field_messages_get_a_hint() {
        assert_eq!(
            hint("unknown field `paralelism`, expected one of `name`, `parallelism`").as_deref(),
            Some("; did you mean `parallelism`?")
        );
        assert_eq!(
            hint("unknown variant `tumblng`, expected `tumbling` or `hopping`").as_deref(),
            Some("; did you mean `tumbling`?")
        );
        assert_eq!(hint("unknown field `zzz`, expected `name`"), None);
        assert_eq!(hint("invalid type: string, expected u64"), None);
    }
}
