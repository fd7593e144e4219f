//! What the crate's in-process tests share: where the built guests are.

use std::path::PathBuf;

/// Where `make guests` puts the guests: `$WEIR_GUESTS_DIR`, else the guest target dir.
pub fn guests_dir() -> PathBuf {
    std::env::var_os("WEIR_GUESTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            home.join(".cache/weir/guest-target/wasm32-wasip2/release")
        })
}

/// The built guest `name` (`uppercase`, `windowed_sum`, ...), `-` or `_` in its name.
pub fn guest_path(name: &str) -> PathBuf {
    let dir = guests_dir();
    for candidate in [name.to_owned(), name.replace('_', "-")] {
        let path = dir.join(format!("{candidate}.wasm"));
        if path.exists() {
            return path;
        }
    }
    panic!(
        "guest {name}.wasm not found in {}: run `make guests` first",
        dir.display()
    );
}
