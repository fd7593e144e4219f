//! `weir build [DIR]`: builds the guest project in DIR (default `.`) into
//! `DIR/NAME.wasm`, whatever its language, and says what it built.
//!
//! Invariants:
//! - The language is the project's: `Cargo.toml` (Rust), else exactly one top-level
//!   `.py` (Python; `test_*.py`, unit tests, do not count) or `.js` (JavaScript) file. NAME is the crate's name, or the source
//!   file's stem (`_` and `-` as written).
//! - The world is found in the code, not given by hand: a Python `@weir_guest.aggregate`
//!   or `@weir_guest.map`, a JavaScript `export const aggregate` or `export const map`;
//!   Rust's attribute macro fixes it at compile time. Code with neither (or both) is
//!   refused before any build.
//! - Rust builds with `cargo build --release --target wasm32-wasip2` in DIR, with the
//!   project's own profile and `.cargo/config.toml`, and for what a crate leaves unset
//!   the examples' settings (LTO, one codegen unit, `+simd128`: `rust_guest_flags`);
//!   `CARGO_TARGET_DIR` is honoured. Python and JavaScript with this checkout's `build.py` / `build.mjs`,
//!   which refuse a guest whose registration does not match the world.
//! - The result is loaded as `weir run` would load it (every check, compiled into the
//!   cache), and one line on stdout names its path, world and SHA-256.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use super::new_project::checkout;
use super::rust_guest_flags;
use crate::engine::CompileLimits;

#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// The project's directory.
    #[arg(default_value = ".")]
    pub dir: PathBuf,
}

/// A project's language, and its source file for Python and JavaScript.
enum Project {
    Rust,
    Python(PathBuf),
    Js(PathBuf),
}

pub fn execute(args: BuildArgs) -> anyhow::Result<()> {
    let dir = &args.dir;
    let (name, built) = match project(dir)? {
        Project::Rust => build_rust(dir)?,
        Project::Python(source) => {
            build_with_tool(dir, &source, "python3", "sdk-python/tools/build.py")?
        }
        Project::Js(source) => build_with_tool(dir, &source, "node", "sdk-js/tools/build.mjs")?,
    };
    let engine = super::guest_engine(false, CompileLimits::default())?;
    let module = engine.load(&built)?;
    println!(
        "built {}: weir guest {name}, world {}, sha256 {}",
        built.display(),
        module.world(),
        module.sha256_hex()
    );
    Ok(())
}

fn project(dir: &Path) -> anyhow::Result<Project> {
    if dir.join("Cargo.toml").is_file() {
        return Ok(Project::Rust);
    }
    let mut sources = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        // `test_*.py`: a Python project's host-side unit tests, not its module.
        let is_test = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("test_"));
        match path.extension().and_then(|e| e.to_str()) {
            Some("py") if is_test => {}
            Some("py") => sources.push(Project::Python(path)),
            Some("js") => sources.push(Project::Js(path)),
            _ => {}
        }
    }
    match sources.len() {
        1 => Ok(sources.remove(0)),
        0 => bail!(
            "{}: no Cargo.toml and no .py or .js file: not a guest project (`weir new` makes one)",
            dir.display()
        ),
        n => bail!(
            "{}: {n} .py/.js files at the top: a guest project has one (its module)",
            dir.display()
        ),
    }
}

/// `cargo build` of the project; its name and the component copied to `DIR/NAME.wasm`.
fn build_rust(dir: &Path) -> anyhow::Result<(String, PathBuf)> {
    let (defaults, words) = rust_guest_flags::for_crate(dir);
    if !words.is_empty() {
        eprintln!("weir build: with {words} (the crate leaves them unset)");
    }
    let output = Command::new("cargo")
        .envs(defaults)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(dir)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo (is Rust installed, with `rustup target add wasm32-wasip2`?)")?;
    anyhow::ensure!(
        output.status.success(),
        "cargo build failed ({})",
        output.status
    );
    let wasm = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .flat_map(|m| {
            m["filenames"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str().map(PathBuf::from))
                .collect::<Vec<_>>()
        })
        .rfind(|f| f.extension().is_some_and(|e| e == "wasm"))
        .context("cargo built no .wasm: is the crate a `cdylib` (crate-type = [\"cdylib\"])?")?;
    let name = wasm
        .file_stem()
        .map(|s| s.to_string_lossy().replace('_', "-"))
        .unwrap_or_default();
    let built = dir.join(format!("{name}.wasm"));
    std::fs::copy(&wasm, &built).with_context(|| format!("copying {}", wasm.display()))?;
    Ok((name, built))
}

/// `build.py` / `build.mjs` of this checkout on `source`, its world read from the code.
fn build_with_tool(
    dir: &Path,
    source: &Path,
    interpreter: &str,
    tool: &str,
) -> anyhow::Result<(String, PathBuf)> {
    let code =
        std::fs::read_to_string(source).with_context(|| format!("reading {}", source.display()))?;
    let world = world_in(&code).with_context(|| {
        format!(
            "{}: no guest registration found: a map (`@weir_guest.map` / `export const map`) or an aggregate (`@weir_guest.aggregate` / `export const aggregate`)",
            source.display()
        )
    })?;
    let name = source
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let built = dir.join(format!("{name}.wasm"));
    let status = Command::new(interpreter)
        .arg(checkout().join(tool))
        .args(["--world", world, "-o"])
        .arg(&built)
        .arg(source)
        // The tool's own report goes with the build's other messages: stdout is our one line.
        .stdout(std::process::Stdio::from(std::io::stderr()))
        .status()
        .with_context(|| format!("running {interpreter} {tool}"))?;
    anyhow::ensure!(status.success(), "{tool} failed ({status})");
    Ok((name, built))
}

/// The world a Python or JavaScript guest registers, if exactly one.
fn world_in(code: &str) -> Option<&'static str> {
    let map = code.contains("@weir_guest.map") || code.contains("export const map");
    let aggregate =
        code.contains("@weir_guest.aggregate") || code.contains("export const aggregate");
    match (map, aggregate) {
        (true, false) => Some("mapper"),
        (false, true) => Some("aggregator"),
        _ => None,
    }
}
