//! `--from-scratch` deletes only what Weir made: a `[checkpoint] dir` pointing at an
//! existing, unrelated directory (or at the spec's own parent, `".."`) is refused with
//! one line and every file in it survives; Weir's own storage is emptied and reused.

use std::path::Path;

use weir_tests::{committed_lines, guest, stderr_of, toml_path, weir, write_file};

fn spec(dir: &Path, checkpoint_dir: &str) -> std::path::PathBuf {
    let text = format!(
        r#"
name = "ownership"
state_dir = {state}

[checkpoint]
interval = "200ms"
dir = {checkpoint_dir}

[[sources]]
type = "generator"
count = 1000

[[steps]]
type = "map"
module = {upper}

[[sinks]]
type = "file"
path = {out}
"#,
        state = toml_path(&dir.join("state")),
        upper = toml_path(&guest("uppercase")),
        out = toml_path(&dir.join("out")),
    );
    write_file(dir, "pipeline.toml", &text)
}

#[test]
fn from_scratch_refuses_a_directory_weir_did_not_make() {
    let dir = tempfile::tempdir().expect("tempdir");
    let theirs = dir.path().join("thesis");
    std::fs::create_dir(&theirs).expect("mkdir");
    write_file(&theirs, "chapter1.tex", "years of work");

    for (checkpoint_dir, entry) in [
        (toml_path(&theirs), "chapter1.tex"),
        // Relative to the spec's directory: the spec's own parent.
        ("\"..\"".to_owned(), ""),
    ] {
        let spec_dir = dir.path().join("specs");
        std::fs::create_dir_all(&spec_dir).expect("mkdir");
        let spec = spec(&spec_dir, &checkpoint_dir);
        let out = weir()
            .args(["run", "--quiet", "--from-scratch"])
            .arg(&spec)
            .output()
            .expect("run weir");
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(
            err.contains("not a weir checkpoint directory")
                && err.contains(entry)
                && err.contains("point [checkpoint] dir at an empty or new directory"),
            "{err}"
        );
        assert!(committed_lines(&spec_dir.join("out")).is_empty());
    }
    assert_eq!(
        std::fs::read_to_string(theirs.join("chapter1.tex")).expect("still there"),
        "years of work"
    );
    assert!(dir.path().join("specs/pipeline.toml").exists());
}

#[test]
fn from_scratch_empties_weirs_own_storage_and_runs_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = spec(dir.path(), &toml_path(&dir.path().join("checkpoints")));
    for _ in 0..2 {
        let out = weir()
            .args(["run", "--quiet", "--from-scratch"])
            .arg(&spec)
            .output()
            .expect("run weir");
        assert!(out.status.success(), "{}", stderr_of(&out));
        assert_eq!(committed_lines(&dir.path().join("out")).len(), 1000);
    }
}
