//! What a guest component may import and must export, checked at load.
//!
//! Invariants:
//! - A component is accepted only if every import is an interface in
//!   [`ALLOWED_IMPORTS`] (any version), so a guest never sees a file, a socket or an
//!   HTTP client. Refusal names ALL offending imports, not only the first.
//! - A component is a weir guest iff it exports exactly one of `weir:transform/map`
//!   (world `mapper`) and `weir:transform/aggregate` (world `aggregator`), any version;
//!   whether that version's types match the host's is checked later by wasmtime when
//!   the typed bindings are built.

use super::World;

/// Interfaces a guest may import: weir's own, and the WASI subset Rust's std needs
/// (stdio, exit as a trap, clocks, random). Versions are ignored here; the linker
/// resolves any semver-compatible 0.2.x.
pub const ALLOWED_IMPORTS: &[&str] = &[
    "weir:transform/log",
    "weir:transform/config",
    "weir:transform/types",
    "wasi:io/error",
    "wasi:io/streams",
    "wasi:io/poll",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/stdin",
    "wasi:cli/exit",
    "wasi:cli/environment",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:clocks/wall-clock",
    "wasi:clocks/monotonic-clock",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
];

const MAP_EXPORT: &str = "weir:transform/map";
const AGGREGATE_EXPORT: &str = "weir:transform/aggregate";

/// `name` without its `@version` suffix.
pub(crate) fn unversioned(name: &str) -> &str {
    name.split_once('@').map_or(name, |(n, _)| n)
}

/// The imports not in [`ALLOWED_IMPORTS`], in the component's order.
pub(crate) fn forbidden_imports<'a>(imports: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    imports
        .into_iter()
        .filter(|name| !ALLOWED_IMPORTS.contains(&unversioned(name)))
        .collect()
}

/// [`ALLOWED_IMPORTS`] for an error message, one group per package in the list's order:
/// `weir:transform/{log,config,types}, wasi:io/{error,streams,poll}, ...`.
pub(crate) fn allowed_imports_summary() -> String {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for name in ALLOWED_IMPORTS {
        let (package, interface) = name.split_once('/').unwrap_or((name, ""));
        match groups.last_mut() {
            Some((last, interfaces)) if *last == package => interfaces.push(interface),
            _ => groups.push((package, vec![interface])),
        }
    }
    groups
        .iter()
        .map(|(package, interfaces)| match interfaces.as_slice() {
            [one] => format!("{package}/{one}"),
            many => format!("{package}/{{{}}}", many.join(",")),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The world a component with these exports implements, or why it implements none.
pub(crate) fn world_of<'a>(exports: impl IntoIterator<Item = &'a str>) -> Result<World, String> {
    let exports: Vec<&str> = exports.into_iter().collect();
    let map = exports.iter().any(|e| unversioned(e) == MAP_EXPORT);
    let aggregate = exports.iter().any(|e| unversioned(e) == AGGREGATE_EXPORT);
    match (map, aggregate) {
        (true, false) => Ok(World::Mapper),
        (false, true) => Ok(World::Aggregator),
        (true, true) => Err(format!(
            "exports both {MAP_EXPORT} and {AGGREGATE_EXPORT}; a weir guest implements exactly one world"
        )),
        (false, false) => {
            let listed = if exports.is_empty() {
                "nothing".to_owned()
            } else {
                exports.join(", ")
            };
            Err(format!(
                "exports {listed}; a weir guest exports {MAP_EXPORT} or {AGGREGATE_EXPORT}"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_are_checked_without_versions_and_all_offenders_listed() {
        let imports = [
            "wasi:io/streams@0.2.3",
            "wasi:filesystem/types@0.2.3",
            "weir:transform/log@0.1.0",
            "wasi:filesystem/preopens@0.2.3",
            "wasi:sockets/tcp@0.2.0",
        ];
        assert_eq!(
            forbidden_imports(imports),
            [
                "wasi:filesystem/types@0.2.3",
                "wasi:filesystem/preopens@0.2.3",
                "wasi:sockets/tcp@0.2.0"
            ]
        );
    }

    /// Catches an error text that drifts from the list the check actually uses.
    #[test]
    fn the_allowed_imports_summary_lists_exactly_the_allowed_imports() {
        let summary = allowed_imports_summary();
        assert!(
            summary.starts_with("weir:transform/{log,config,types}, wasi:io/{error,streams,poll}"),
            "{summary}"
        );
        let mut expanded = Vec::new();
        for group in summary.split(", ") {
            let (package, rest) = group.split_once('/').expect("package/interface");
            let rest = rest.trim_start_matches('{').trim_end_matches('}');
            expanded.extend(rest.split(',').map(|i| format!("{package}/{i}")));
        }
        assert_eq!(expanded, ALLOWED_IMPORTS);
    }

    #[test]
    fn world_is_read_from_exports() {
        assert_eq!(world_of(["weir:transform/map@0.1.0"]), Ok(World::Mapper));
        assert_eq!(
            world_of(["weir:transform/aggregate@0.1.0"]),
            Ok(World::Aggregator)
        );
        let err = world_of(["wasi:cli/run@0.2.0"]).expect_err("must fail");
        assert!(
            err.contains("exports wasi:cli/run@0.2.0; a weir guest exports"),
            "{err}"
        );
        assert!(world_of(["weir:transform/map", "weir:transform/aggregate"]).is_err());
    }
}
