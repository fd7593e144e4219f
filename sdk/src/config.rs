//! The step's configuration (`[step.config]` in the pipeline spec), read-only.

/// The value configured under `name`, if any.
///
/// Each call asks the host. The configuration never changes while a guest runs, so read
/// a value once and keep it, e.g. in a `std::sync::LazyLock`:
///
/// ```ignore
/// static FIELD: LazyLock<String> = LazyLock::new(|| weir_guest::config_or("field", "kind"));
/// ```
///
/// Outside wasm (unit tests of a guest function on the host) every name is unset.
pub fn config(name: &str) -> Option<String> {
    #[cfg(target_arch = "wasm32")]
    return crate::bindings::config(name);
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = name;
        None
    }
}

/// The value configured under `name`, or `default` when it is unset.
pub fn config_or(name: &str, default: &str) -> String {
    config(name).unwrap_or_else(|| default.to_owned())
}
