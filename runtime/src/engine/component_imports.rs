//! A component's top-level imports, read from its bytes before anything compiles it,
//! so that a component importing what weir does not link (`wasi:http`, a foreign
//! interface) is refused in milliseconds, costs no compile (seconds to minutes, and
//! gigabytes, for a 15 MiB component) and leaves nothing in the compiled-code cache.
//!
//! Invariants:
//! - Only the outermost component's import section is read: a nested component's or
//!   module's imports are satisfied inside the component (what componentize-py and
//!   componentize-js emit), never by the host. Nesting is tracked by the parser's
//!   `Version`/`End` payloads.
//! - This is a fast path, not the wall: bytes it cannot parse yield `None`, and the
//!   compile then says what is wrong; after a compile, `GuestModule` checks the
//!   compiled component's own import list again.

use wasmparser::{Parser, Payload};

/// The names of the outermost component's imports (`wasi:http/types@0.2.0`, ...), in
/// order; `None` if the bytes do not parse as a component.
pub(crate) fn top_level_imports(bytes: &[u8]) -> Option<Vec<String>> {
    let mut depth = 0usize;
    let mut imports = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.ok()? {
            Payload::Version { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(section) if depth == 1 => {
                for import in section {
                    imports.push(import.ok()?.name.name.to_owned());
                }
            }
            _ => {}
        }
    }
    Some(imports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_outermost_components_imports_are_read() {
        let wat = r#"(component
            (import "wasi:http/types@0.2.0" (instance))
            (component $inner
                (import "acme:inner/thing" (instance))
            )
            (import "weir:transform/log@0.1.0" (instance))
        )"#;
        let bytes = wat::parse_str(wat).expect("wat");
        assert_eq!(
            top_level_imports(&bytes),
            Some(vec![
                "wasi:http/types@0.2.0".to_owned(),
                "weir:transform/log@0.1.0".to_owned()
            ])
        );
        assert_eq!(top_level_imports(b"\0asm garbage"), None);
    }
}
