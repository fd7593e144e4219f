//! The book (`docs/src/`, mdBook) and the README hold: every relative link points to a
//! file that exists, and every `#anchor` to a heading of its target (mdBook's ids:
//! lowercase, whitespace to `-`, punctuation other than `-` and `_` dropped, `--` a
//! dash that is dropped too, `-1`, `-2` on repeats); every chapter is in `SUMMARY.md`;
//! every ```toml block is a pipeline spec that parses with Weir's own parser
//! (`PipelineSpec::parse`, its modules made as empty files in a scratch directory), a
//! `server.toml` (```toml,server) that `ServerConfig::load` accepts, or a fragment
//! marked ```toml,fragment; and the spec reference is the rustdoc of `weir::spec`, so
//! the two cannot differ. Needs no broker, no guest and no network.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use weir::server::config::ServerConfig;
use weir::spec::{PipelineSpec, SinkSpec, SourceConfig};

/// One Markdown file: its path, its lines outside fenced code, and its fenced blocks.
struct Page {
    path: PathBuf,
    /// (line number, text) of every line outside fenced code blocks.
    prose: Vec<(usize, String)>,
    blocks: Vec<Block>,
}

/// A fenced code block: the info string's words (```toml,server -> toml, server).
struct Block {
    line: usize,
    info: Vec<String>,
    text: String,
}

fn read_page(path: &Path) -> Page {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut prose = Vec::new();
    let mut blocks = Vec::new();
    // (fence, indent, line, info, text) of the block being read.
    let mut open: Option<(String, usize, usize, Vec<String>, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match &mut open {
            None if trimmed.starts_with("```") => {
                let fence: String = trimmed.chars().take_while(|c| *c == '`').collect();
                let info = trimmed[fence.len()..]
                    .split([',', ' '])
                    .filter(|w| !w.is_empty())
                    .map(str::to_owned)
                    .collect();
                open = Some((fence, indent, number, info, String::new()));
            }
            None => prose.push((number, line.to_owned())),
            Some((fence, _, _, _, _)) if trimmed.starts_with(fence.as_str()) => {
                if let Some((_, _, line, info, text)) = open.take() {
                    blocks.push(Block { line, info, text });
                }
            }
            Some((_, indent, _, _, text)) => {
                let strip = line.len() - line.trim_start().len();
                text.push_str(&line[strip.min(*indent)..]);
                text.push('\n');
            }
        }
    }
    assert!(
        open.is_none(),
        "{}: a code fence is never closed",
        path.display()
    );
    Page {
        path: path.to_owned(),
        prose,
        blocks,
    }
}

/// The book's chapters and the README.
fn pages() -> Vec<Page> {
    let root = weir_tests::repo_root();
    let mut paths = markdown_files(&root.join("docs/src"));
    paths.push(root.join("README.md"));
    paths.iter().map(|p| read_page(p)).collect()
}

/// Every `*.md` under `dir`, sorted.
fn markdown_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// `line` with its inline code spans (`x`, ``x``) removed.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|c| *c == '`').count();
        let fence = "`".repeat(ticks);
        let after = &rest[start + ticks..];
        match after.find(&fence) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The targets of `[text](target)` links on `line` (outside code spans).
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        targets.push(after[..end].trim().to_owned());
        rest = &after[end..];
    }
    targets
}

/// A heading's id as mdBook makes it.
fn heading_id(heading: &str) -> String {
    // Links in a heading keep their text; code spans keep their content, and outside
    // them smart punctuation turns `--` into a dash, which the id then drops.
    let mut text = String::new();
    for (i, part) in heading.split('`').enumerate() {
        if i % 2 == 1 {
            text.push_str(part);
        } else {
            text.push_str(&part.replace("--", ""));
        }
    }
    let text = match (text.find('['), text.find("](")) {
        (Some(open), Some(mid)) if open < mid => {
            let close = text[mid..].find(')').map_or(text.len(), |c| mid + c + 1);
            format!(
                "{}{}{}",
                &text[..open],
                &text[open + 1..mid],
                &text[close..]
            )
        }
        _ => text,
    };
    text.trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_ascii_lowercase())
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The ids of `page`'s headings (a repeated id gets `-1`, `-2`, ...).
fn heading_ids(page: &Page) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut ids = BTreeSet::new();
    for (_, line) in &page.prose {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let id = heading_id(line[hashes..].trim().trim_end_matches('#'));
        let n = seen.entry(id.clone()).or_insert(0);
        ids.insert(if *n == 0 {
            id.clone()
        } else {
            format!("{id}-{n}")
        });
        *n += 1;
    }
    ids
}

/// `path` with `.` and `..` taken out (the file need not exist).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Every broken relative link of `pages`, one line each; and how many links and
/// anchors were checked.
fn broken_links(pages: &[Page]) -> (Vec<String>, usize, usize) {
    let ids: BTreeMap<PathBuf, BTreeSet<String>> = pages
        .iter()
        .map(|p| (normalize(&p.path), heading_ids(p)))
        .collect();
    let (mut broken, mut links, mut anchors) = (Vec::new(), 0, 0);
    for page in pages {
        let dir = page.path.parent().expect("a page's directory");
        for (number, line) in &page.prose {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                links += 1;
                let (file, anchor) = match target.split_once('#') {
                    Some((file, anchor)) => (file, Some(anchor)),
                    None => (target.as_str(), None),
                };
                let resolved = if file.is_empty() {
                    page.path.clone()
                } else {
                    normalize(&dir.join(file))
                };
                let at = format!("{}:{number}: {target}", page.path.display());
                if !resolved.exists() {
                    broken.push(format!("{at}: no such file"));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                anchors += 1;
                match ids.get(&resolved) {
                    Some(ids) if ids.contains(anchor) => {}
                    Some(ids) => broken.push(format!("{at}: no heading with this id in {ids:?}")),
                    None => broken.push(format!("{at}: an anchor into a page not checked")),
                }
            }
        }
    }
    (broken, links, anchors)
}

#[test]
fn every_relative_link_of_the_book_and_the_readme_resolves() {
    let pages = pages();
    let (broken, links, anchors) = broken_links(&pages);
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    // The book links its chapters to each other and the README into the book: a
    // checker that found almost nothing would prove nothing.
    assert!(links >= 60, "only {links} relative links checked");
    assert!(anchors >= 8, "only {anchors} anchors checked");
}

#[test]
fn a_broken_link_or_anchor_is_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = "# A page\n\n## Its part\n\n[ok](#its-part) [ok](page.md#a-page) \
                [bad](missing.md) [bad](#no-part) `[code](not-a-link.md)`\n\n\
                ```text\n[code](not-a-link-either.md)\n```\n";
    let path = weir_tests::write_file(dir.path(), "page.md", text);
    let (broken, links, anchors) = broken_links(&[read_page(&path)]);
    assert_eq!((links, anchors), (4, 3), "{broken:?}");
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(
        broken[0].ends_with("missing.md: no such file"),
        "{broken:?}"
    );
    assert!(broken[1].contains("#no-part: no heading"), "{broken:?}");
}

#[test]
fn heading_ids_follow_mdbook() {
    for (heading, id) in [
        ("Exactly-once with Kafka", "exactly-once-with-kafka"),
        ("The run's endpoint: --http", "the-runs-endpoint-http"),
        ("Hosting: `weir serve`", "hosting-weir-serve"),
        ("The floors of `runtime/src`", "the-floors-of-runtimesrc"),
        (
            "Rescaling: stop, then start another number",
            "rescaling-stop-then-start-another-number",
        ),
        (
            "1. The operator starts a server",
            "1-the-operator-starts-a-server",
        ),
        ("weir_guest and `on_error`", "weir_guest-and-on_error"),
    ] {
        assert_eq!(heading_id(heading), id, "{heading}");
    }
}

#[test]
fn every_chapter_is_in_the_summary_and_every_summary_entry_exists() {
    let src = weir_tests::repo_root().join("docs/src");
    let summary = read_page(&src.join("SUMMARY.md"));
    let listed: BTreeSet<PathBuf> = summary
        .prose
        .iter()
        .flat_map(|(_, line)| link_targets(line))
        .map(|target| normalize(&src.join(target)))
        .collect();
    let chapters: BTreeSet<PathBuf> = markdown_files(&src)
        .into_iter()
        .filter(|p| !p.ends_with("SUMMARY.md"))
        .map(|p| normalize(&p))
        .collect();
    let missing: Vec<_> = chapters.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "chapters not in SUMMARY.md: {missing:?}"
    );
    let absent: Vec<_> = listed.difference(&chapters).collect();
    assert!(
        absent.is_empty(),
        "SUMMARY.md entries with no file: {absent:?}"
    );
    assert!(chapters.len() >= 15, "{chapters:?}");
}

/// What kind of ```toml block `block` is.
enum Toml {
    Spec,
    Server,
    Fragment,
}

fn toml_kind(page: &Page, block: &Block) -> Option<Toml> {
    if block.info.first().map(String::as_str) != Some("toml") {
        return None;
    }
    if block.info.iter().any(|w| w == "fragment") {
        return Some(Toml::Fragment);
    }
    if block.info.iter().any(|w| w == "server") {
        return Some(Toml::Server);
    }
    let spec = block
        .text
        .lines()
        .any(|l| l.starts_with("[[sources]]") || l.starts_with("name ="));
    assert!(
        spec,
        "{}:{}: a ```toml block that is no pipeline spec: mark it ```toml,server or \
         ```toml,fragment",
        page.path.display(),
        block.line
    );
    Some(Toml::Spec)
}

/// Parses a spec from the docs in a scratch directory where its modules exist (as
/// empty files: parsing checks that a step's module is there, loading it comes later).
/// The spec's directory lies a few levels down, so `../../build/guests/...` stays inside.
fn parse_spec(page: &Page, block: &Block) -> PipelineSpec {
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path().join("a/b/c/d");
    for line in block.text.lines() {
        let Some(value) = line.trim_start().strip_prefix("module") else {
            continue;
        };
        let Some(quoted) = value.trim_start().strip_prefix('=') else {
            continue;
        };
        let module = quoted.split('"').nth(1).unwrap_or_default();
        let path = normalize(&dir.join(module));
        assert!(
            !module.is_empty()
                && Path::new(module).is_relative()
                && path.starts_with(scratch.path()),
            "{}:{}: module {module:?} lies outside the scratch directory",
            page.path.display(),
            block.line
        );
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(&path, b"").expect("module file");
    }
    std::fs::create_dir_all(&dir).expect("mkdir");
    let label = format!("{}:{}", page.path.display(), block.line);
    PipelineSpec::parse(&block.text, &dir, &label)
        .unwrap_or_else(|e| panic!("a spec in the docs does not parse: {e}"))
}

/// Loads a `server.toml` from the docs, its admin token from a file instead of the
/// environment.
fn load_server_config(page: &Page, block: &Block) -> ServerConfig {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = weir_tests::write_file(
        dir.path(),
        "admin-token",
        "a-docs-test-admin-token-0123456789",
    );
    let text = block.text.replace(
        "admin_token_env = \"WEIR_ADMIN_TOKEN\"",
        &format!("admin_token_file = {:?}", token.display().to_string()),
    );
    assert_ne!(text, block.text, "{}:{}", page.path.display(), block.line);
    let path = weir_tests::write_file(dir.path(), "server.toml", &text);
    ServerConfig::load(&path).unwrap_or_else(|e| {
        panic!(
            "{}:{}: a server.toml in the docs does not load: {e}",
            page.path.display(),
            block.line
        )
    })
}

#[test]
fn every_spec_in_the_book_and_the_readme_parses() {
    let pages = pages();
    let (mut specs, mut servers, mut fragments) = (Vec::new(), 0, 0);
    for page in &pages {
        for block in &page.blocks {
            match toml_kind(page, block) {
                Some(Toml::Spec) => specs.push((page.path.clone(), parse_spec(page, block))),
                Some(Toml::Server) => {
                    load_server_config(page, block);
                    servers += 1;
                }
                Some(Toml::Fragment) => fragments += 1,
                None => {}
            }
        }
    }
    // The reference itself: every source, step and sink type, all in one spec.
    let reference: Vec<&PipelineSpec> = specs
        .iter()
        .filter(|(path, _)| path.ends_with("docs/src/spec-reference.md"))
        .map(|(_, spec)| spec)
        .collect();
    assert_eq!(
        reference.len(),
        2,
        "the minimal spec and the full reference"
    );
    let full = reference
        .iter()
        .find(|s| s.name == "word-count")
        .expect("the full reference");
    let sources: Vec<&str> = full.sources.iter().map(|s| s.config.type_name()).collect();
    assert_eq!(sources, ["generator", "file", "stdin", "kafka"]);
    assert!(matches!(full.sources[3].config, SourceConfig::Kafka(_)));
    let steps: Vec<&str> = full.steps.iter().map(|s| s.type_name()).collect();
    assert_eq!(steps, ["map", "aggregate"]);
    let sinks: Vec<&str> = full.sinks.iter().map(SinkSpec::type_name).collect();
    assert_eq!(sinks, ["file", "stdout", "kafka"]);
    assert_eq!(
        (
            full.parallelism,
            full.max_parallelism,
            full.repartition_partitions
        ),
        (2, 128, 32)
    );
    let readme = specs
        .iter()
        .filter(|(p, _)| p.ends_with("README.md"))
        .count();
    assert_eq!(readme, 1, "the README's spec");
    assert!(specs.len() >= 5, "only {} specs", specs.len());
    assert!(servers >= 1, "no server.toml checked");
    eprintln!(
        "{} specs parsed, {servers} server.toml loaded, {fragments} fragments",
        specs.len()
    );
}

#[test]
fn the_spec_reference_is_the_rustdoc_of_weir_spec() {
    let root = weir_tests::repo_root();
    let module = std::fs::read_to_string(root.join("runtime/src/spec/mod.rs")).expect("mod.rs");
    assert!(
        module.contains("#![doc = include_str!(\"../../../docs/src/spec-reference.md\")]"),
        "runtime/src/spec/mod.rs includes docs/src/spec-reference.md as its doc"
    );
    assert!(
        !module.contains("//! ```toml"),
        "a second copy of the reference in runtime/src/spec/mod.rs"
    );
}
