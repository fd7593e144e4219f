//! The release settings `weir build` gives a Rust guest crate that does not choose its
//! own: the ones the shipped examples build with (`guest-examples/Cargo.toml`'s release
//! profile and `.cargo/config.toml`), so a crate written by hand runs as fast as one
//! made by `weir new`.
//!
//! Invariants:
//! - Only what the crate leaves unset is set, through cargo's environment overrides:
//!   `CARGO_PROFILE_RELEASE_LTO=true` when the manifest's `[profile.release]` names no
//!   `lto`, `CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1` when it names no `codegen-units`
//!   (an environment variable would override the manifest, so one it sets is left
//!   alone), and `CARGO_TARGET_WASM32_WASIP2_RUSTFLAGS=-C target-feature=+simd128` when
//!   no rustflags are configured anywhere cargo would read them (the environment's
//!   `RUSTFLAGS`, `CARGO_ENCODED_RUSTFLAGS`, `CARGO_BUILD_RUSTFLAGS`, that variable
//!   itself, or a `rustflags` key in a `.cargo/config.toml` of the crate's directory,
//!   its ancestors or `CARGO_HOME`): rustflags from two places do not add up, so a
//!   crate's own would be replaced.
//! - The choice is a pure function of the manifest, whether rustflags are configured,
//!   and the environment (`defaults`), tested on its own.

use std::path::{Path, PathBuf};

/// The variable carrying the wasm target's rustflags.
const TARGET_RUSTFLAGS: &str = "CARGO_TARGET_WASM32_WASIP2_RUSTFLAGS";
/// Rustflags set in the environment, any of which a default would conflict with.
const ENV_RUSTFLAGS: [&str; 4] = [
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    TARGET_RUSTFLAGS,
];

/// The environment overrides for the crate in `dir`, and a few words on what they are
/// for the build's report (empty when the crate sets everything itself).
pub fn for_crate(dir: &Path) -> (Vec<(&'static str, &'static str)>, String) {
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml"))
        .ok()
        .and_then(|text| text.parse::<toml::Table>().ok())
        .unwrap_or_default();
    let configured = config_files(dir).iter().any(|f| sets_rustflags(f));
    let set = defaults(&manifest, configured, &|name| {
        std::env::var_os(name).is_some()
    });
    let words = set
        .iter()
        .map(|(name, _)| match *name {
            "CARGO_PROFILE_RELEASE_LTO" => "LTO",
            "CARGO_PROFILE_RELEASE_CODEGEN_UNITS" => "one codegen unit",
            _ => "+simd128",
        })
        .collect::<Vec<_>>()
        .join(", ");
    (set, words)
}

/// What to set, given the crate's manifest, whether a cargo config sets rustflags, and
/// which environment variables are set.
pub fn defaults(
    manifest: &toml::Table,
    config_sets_rustflags: bool,
    env_has: &dyn Fn(&str) -> bool,
) -> Vec<(&'static str, &'static str)> {
    let release = manifest
        .get("profile")
        .and_then(|p| p.get("release"))
        .and_then(toml::Value::as_table);
    let unset =
        |key: &str, var: &str| !release.is_some_and(|r| r.contains_key(key)) && !env_has(var);
    let mut set = Vec::new();
    if unset("lto", "CARGO_PROFILE_RELEASE_LTO") {
        set.push(("CARGO_PROFILE_RELEASE_LTO", "true"));
    }
    if unset("codegen-units", "CARGO_PROFILE_RELEASE_CODEGEN_UNITS") {
        set.push(("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1"));
    }
    if !config_sets_rustflags && !ENV_RUSTFLAGS.iter().any(|v| env_has(v)) {
        set.push((TARGET_RUSTFLAGS, "-C target-feature=+simd128"));
    }
    set
}

/// The cargo config files cargo would read for a build in `dir`: `.cargo/config.toml`
/// (or the older `.cargo/config`) in `dir` and each ancestor, and in `CARGO_HOME`.
fn config_files(dir: &Path) -> Vec<PathBuf> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let in_dirs = dir
        .ancestors()
        .map(|d| d.join(".cargo"))
        .chain(home)
        .flat_map(|d| [d.join("config.toml"), d.join("config")]);
    in_dirs.filter(|f| f.is_file()).collect()
}

/// Whether the config file at `path` has a `rustflags` key anywhere (`build.rustflags`,
/// `target.<triple or cfg>.rustflags`). A file that does not parse counts as setting
/// them: cargo will say what is wrong with it, and nothing is overridden meanwhile.
fn sets_rustflags(path: &Path) -> bool {
    let Some(table) = std::fs::read_to_string(path)
        .ok()
        .and_then(|text| text.parse::<toml::Table>().ok())
    else {
        return true;
    };
    fn any_rustflags(table: &toml::Table) -> bool {
        table
            .iter()
            .any(|(key, value)| key == "rustflags" || value.as_table().is_some_and(any_rustflags))
    }
    any_rustflags(&table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(text: &str) -> toml::Table {
        text.parse().expect("toml")
    }

    const BARE: &str = "[package]\nname = \"g\"\n[lib]\ncrate-type = [\"cdylib\"]\n";

    #[test]
    fn a_bare_crate_gets_every_default() {
        let set = defaults(&manifest(BARE), false, &|_| false);
        assert_eq!(
            set,
            [
                ("CARGO_PROFILE_RELEASE_LTO", "true"),
                ("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1"),
                (TARGET_RUSTFLAGS, "-C target-feature=+simd128"),
            ]
        );
    }

    #[test]
    fn what_the_crate_or_its_environment_sets_is_left_alone() {
        let own = format!("{BARE}[profile.release]\nlto = \"thin\"\n");
        let set = defaults(&manifest(&own), true, &|_| false);
        assert_eq!(set, [("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")]);
        for var in ENV_RUSTFLAGS {
            let set = defaults(&manifest(BARE), false, &|name| name == var);
            assert!(
                set.iter().all(|(name, _)| *name != TARGET_RUSTFLAGS),
                "{var}"
            );
        }
        let set = defaults(&manifest(BARE), false, &|name| {
            name == "CARGO_PROFILE_RELEASE_CODEGEN_UNITS"
        });
        assert!(
            set.iter()
                .all(|(name, _)| *name != "CARGO_PROFILE_RELEASE_CODEGEN_UNITS")
        );
    }

    #[test]
    fn rustflags_are_found_in_config_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write");
            path
        };
        let target = write(
            "a.toml",
            "[target.wasm32-wasip2]\nrustflags = [\"-C\", \"x\"]\n",
        );
        let build = write("b.toml", "[build]\nrustflags = \"-C y\"\n");
        let other = write("c.toml", "[net]\noffline = true\n");
        let broken = write("d.toml", "[build\n");
        assert!(sets_rustflags(&target) && sets_rustflags(&build) && sets_rustflags(&broken));
        assert!(!sets_rustflags(&other));
        // The crate's own .cargo/config.toml is among the files read.
        std::fs::create_dir(dir.path().join(".cargo")).expect("mkdir");
        std::fs::write(
            dir.path().join(".cargo/config.toml"),
            "[build]\nrustflags = []\n",
        )
        .expect("write");
        let files = config_files(dir.path());
        assert!(files.iter().any(|f| f.ends_with(".cargo/config.toml")
            && f.starts_with(std::fs::canonicalize(dir.path()).expect("canonical"))));
    }
}
