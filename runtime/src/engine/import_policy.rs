//! What a guest component may import and must export, checked at load.
//!
//! Invariants:
//! - WASI is deny-by-default, not refused: a guest may import weir's own interfaces and
//!   every interface of WASI 0.2 that wasmtime-wasi implements ([`ALLOWED_IMPORTS`]:
//!   io, cli, clocks, random, filesystem, sockets), so components built by
//!   componentize-py and componentize-js load. Each is linked (`linker.rs`) against a
//!   context that grants nothing (`host.rs`): no preopened directory, no environment
//!   variable or argument, empty stdin, every socket and name lookup refused.
//! - Everything else is refused at load, ALL offenders named in one line: foreign
//!   interfaces (anything outside `weir:transform/*` and `wasi:*`), WASI interfaces weir
//!   does not link (`wasi:http/*`: a guest gets no HTTP client; `wasi:keyvalue/*`, ...),
//!   and WASI imports at a version other than 0.2.x (0.3, or none), which the 0.2
//!   linker could not serve anyway.
//! - Versions of weir's own interfaces are not checked here: the typed bindings check
//!   that the world's types match when the `InstancePre` is built.
//! - A component is a weir guest iff it exports exactly one of `weir:transform/map`
//!   (world `mapper`) and `weir:transform/aggregate` (world `aggregator`), any version;
//!   whether that version's types match the host's is checked later by wasmtime when
//!   the typed bindings are built.

use super::World;

/// Interfaces a guest may import, without versions: weir's own, then every WASI 0.2
/// interface (at any 0.2.x, [`WASI_VERSION`]). Grouped by package, in the order the
/// refusal message lists them.
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
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "wasi:sockets/network",
    "wasi:sockets/instance-network",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
    "wasi:sockets/ip-name-lookup",
];

/// The version prefix every `wasi:` import must carry: the linker serves WASI 0.2.
const WASI_VERSION: &str = "0.2.";

const MAP_EXPORT: &str = "weir:transform/map";
const AGGREGATE_EXPORT: &str = "weir:transform/aggregate";
/// The optional fused call an aggregator may export beside `aggregate`.
pub(crate) const UPDATE_AND_EMIT_EXPORT: &str = "weir:transform/update-and-emit";

/// `name` without its `@version` suffix.
pub(crate) fn unversioned(name: &str) -> &str {
    name.split_once('@').map_or(name, |(n, _)| n)
}

/// Whether the import `name` (`package/interface@version`) is allowed.
fn is_allowed(name: &str) -> bool {
    let (interface, version) = name
        .split_once('@')
        .map_or((name, None), |(i, v)| (i, Some(v)));
    ALLOWED_IMPORTS.contains(&interface)
        && (!interface.starts_with("wasi:") || version.is_some_and(|v| v.starts_with(WASI_VERSION)))
}

/// The imports a weir guest may not use, in the component's order.
pub(crate) fn forbidden_imports<'a>(imports: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    imports
        .into_iter()
        .filter(|name| !is_allowed(name))
        .collect()
}

/// The one-line refusal of a component importing `forbidden` (not empty): every
/// offender, then what a guest may import.
pub(crate) fn refusal(forbidden: &[&str]) -> String {
    format!(
        "imports {} which a weir guest may not use (allowed: {}, WASI at 0.2.x; \
         wasi:http is not linked)",
        forbidden.join(", "),
        allowed_imports_summary()
    )
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
    fn all_of_wasi_0_2_is_allowed_and_foreign_imports_are_all_listed() {
        let imports = [
            "wasi:io/streams@0.2.3",
            "wasi:filesystem/types@0.2.9",
            "acme:evil/thing@1.0.0",
            "weir:transform/log@0.1.0",
            "wasi:filesystem/preopens@0.2.0",
            "wasi:sockets/tcp@0.2.0",
            "wasi:cli/environment@0.2.9",
            "wasi:http/outgoing-handler@0.2.0",
            "wasi:io/poll@0.3.0",
            "wasi:random/random",
            "evil",
        ];
        assert_eq!(
            forbidden_imports(imports),
            [
                "acme:evil/thing@1.0.0",
                "wasi:http/outgoing-handler@0.2.0",
                "wasi:io/poll@0.3.0",
                "wasi:random/random",
                "evil",
            ]
        );
        // weir's own interfaces: the version is checked by the typed bindings.
        assert!(
            forbidden_imports(["weir:transform/types", "weir:transform/config@0.9.0"]).is_empty()
        );
    }

    #[test]
    fn the_refusal_is_one_line_naming_every_offender() {
        let text = refusal(&["acme:evil/thing@1.0.0", "wasi:http/types@0.2.0"]);
        assert!(
            text.starts_with(
                "imports acme:evil/thing@1.0.0, wasi:http/types@0.2.0 which a weir guest may not use \
                 (allowed: weir:transform/{log,config,types}, wasi:io/{error,streams,poll}, "
            ),
            "{text}"
        );
        assert!(
            text.ends_with(", WASI at 0.2.x; wasi:http is not linked)"),
            "{text}"
        );
        assert!(!text.contains('\n'), "{text}");
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
