//! `weir pipeline create|ls|start|stop|status|savepoint|upgrade|rm`: a tenant's
//! pipelines on a `weir serve` server.
//!
//! Invariants: `create` sends the spec file's fields as the JSON the API takes
//! (`{"spec": {...}, "start": bool, "workers": N}`), whether the file is JSON or the TOML users write
//! for `weir run` (steps name modules by id there: `module = "<id>"`); a file that does
//! not parse is refused here, in one line naming the file and line, before anything is
//! sent. Output is a table or a `key: value` list (or, with `--json`, the server's JSON
//! as is) on stdout; a refusal is one line on stderr via `main` and a non-zero exit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::cli::module::resolve_id;
use crate::cli::server_client::{PipelineAction, ServerArgs, ServerClient};
use crate::cli::table::{self, Table, print_json_or};
use crate::server::wire::{
    CreatePipeline, PipelineState, PipelineStatus, UpgradePipeline, WorkerStatus,
};
use crate::spec::error::Located;

/// Characters of a last error shown in `pipeline ls` (`status` shows it whole).
const LS_ERROR_CHARS: usize = 60;

#[derive(Debug, clap::Args)]
pub struct PipelineArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(subcommand)]
    pub command: PipelineCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum PipelineCommand {
    /// Create a pipeline from a spec (.toml or .json; steps name modules by id) and start it.
    Create {
        /// The pipeline spec: the fields of a `weir run` spec, as TOML or JSON.
        spec: PathBuf,
        /// Create it stopped (start it later with `weir pipeline start`).
        #[arg(long)]
        no_start: bool,
        /// Run it as N worker processes (default 1), within your `workers` quota; with
        /// more than one, every source must be Kafka (see docs/src/operations/workers.md).
        #[arg(long, value_name = "N")]
        workers: Option<u32>,
    },
    /// List your pipelines.
    Ls,
    /// Start a pipeline (it resumes from its last committed checkpoint).
    Start {
        /// The pipeline's name.
        name: String,
    },
    /// Stop a pipeline after one more committed checkpoint.
    Stop {
        /// The pipeline's name.
        name: String,
    },
    /// Show a pipeline's state, checkpoints, counters and last error.
    Status {
        /// The pipeline's name.
        name: String,
        /// Also print the last lines of each worker's log.
        #[arg(long)]
        log: bool,
    },
    /// Stop a pipeline with a savepoint (a final checkpoint an upgrade starts from).
    Savepoint {
        /// The pipeline's name.
        name: String,
    },
    /// Replace steps' modules and/or rescale, and start the pipeline from its savepoint,
    /// keeping state.
    Upgrade {
        /// The pipeline's name.
        name: String,
        /// A step's new module: STEP=MODULE_ID (the step's `name`, or `step-N`; the id
        /// or a unique prefix of it). Repeat for several steps.
        #[arg(long = "module", value_name = "STEP=MODULE_ID", required_unless_present = "workers", value_parser = step_module)]
        modules: Vec<(String, String)>,
        /// Run it as M worker processes from now on (a rescale from the N workers'
        /// savepoints; between 1 and several is refused).
        #[arg(long, value_name = "M")]
        workers: Option<u32>,
    },
    /// Delete a pipeline: its worker is stopped, its state and checkpoints removed.
    Rm {
        /// The pipeline's name.
        name: String,
    },
}

pub fn execute(args: PipelineArgs) -> anyhow::Result<()> {
    let client = ServerClient::from_args(&args.server)?;
    let json = args.server.json;
    match args.command {
        PipelineCommand::Create {
            spec,
            no_start,
            workers,
        } => {
            let mut spec = load_spec(&spec)?;
            resolve_step_modules(&client, &mut spec)?;
            let body = CreatePipeline {
                spec,
                start: !no_start,
                workers,
            };
            let reply = client.create_pipeline(&body)?;
            print_json_or(json, &reply.json, || action_line("created", &reply.value))
        }
        PipelineCommand::Ls => {
            let reply = client.pipelines()?;
            print_json_or(json, &reply.json, || pipelines_table(&reply.value))
        }
        PipelineCommand::Status { name, log } => {
            let reply = client.pipeline(&name)?;
            print_json_or(json, &reply.json, || {
                let mut text = status_list(&reply.value);
                if log {
                    text.push_str(&log_tails(&reply.value));
                }
                text
            })
        }
        PipelineCommand::Start { name } => action(&client, json, &name, PipelineAction::Start),
        PipelineCommand::Stop { name } => action(&client, json, &name, PipelineAction::Stop),
        PipelineCommand::Savepoint { name } => {
            action(&client, json, &name, PipelineAction::Savepoint)
        }
        PipelineCommand::Upgrade {
            name,
            modules,
            workers,
        } => upgrade(&client, json, &name, modules, workers),
        PipelineCommand::Rm { name } => {
            let reply = client.delete_pipeline(&name)?;
            print_json_or(json, &reply.json, || format!("deleted pipeline {name}\n"))
        }
    }
}

fn action(
    client: &ServerClient,
    json: bool,
    name: &str,
    what: PipelineAction,
) -> anyhow::Result<()> {
    let reply = client.pipeline_action(name, what)?;
    let verb = match what {
        PipelineAction::Start => "started",
        PipelineAction::Stop => "stopped",
        PipelineAction::Savepoint => "took a savepoint of",
    };
    print_json_or(json, &reply.json, || action_line(verb, &reply.value))
}

fn upgrade(
    client: &ServerClient,
    json: bool,
    name: &str,
    modules: Vec<(String, String)>,
    workers: Option<u32>,
) -> anyhow::Result<()> {
    let mut by_step = BTreeMap::new();
    for (step, id) in modules {
        let id = resolve_id(client, &id)?;
        if by_step.insert(step.clone(), id).is_some() {
            bail!("--module {step}=...: the step is named twice");
        }
    }
    let body = UpgradePipeline {
        modules: by_step,
        workers,
    };
    let reply = client.upgrade_pipeline(name, &body)?;
    print_json_or(json, &reply.json, || action_line("upgraded", &reply.value))
}

/// Parses `STEP=MODULE_ID`.
fn step_module(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((step, id)) if !step.is_empty() && !id.is_empty() => {
            Ok((step.to_owned(), id.to_owned()))
        }
        _ => Err(format!("{text:?}: expected STEP=MODULE_ID")),
    }
}

/// The spec in `path` as the JSON object the API takes: a `.toml` file is converted,
/// a `.json` file taken as is.
pub fn load_spec(path: &Path) -> anyhow::Result<Value> {
    let shown = path.display().to_string();
    let kind = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    if !matches!(kind.as_deref(), Some("toml" | "json")) {
        bail!("{shown}: a pipeline spec is a .toml or .json file");
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        anyhow::anyhow!(
            "cannot read {shown}: {}",
            crate::connector::error::io_reason(&e)
        )
    })?;
    spec_json(&text, &shown, kind.as_deref() == Some("toml"))
}

/// `text` (TOML if `toml`, else JSON) as a JSON object; errors name `file` and the line.
pub fn spec_json(text: &str, file: &str, toml: bool) -> anyhow::Result<Value> {
    let spec = if toml {
        let table: toml::Table = toml::from_str(text)
            .map_err(|e| anyhow::anyhow!(Located::from(e).into_spec_error(text, file)))?;
        serde_json::to_value(table).with_context(|| format!("{file}: cannot convert to JSON"))?
    } else {
        serde_json::from_str(text).map_err(|e| anyhow::anyhow!("{file}: {e}"))?
    };
    if !spec.is_object() {
        bail!("{file}: a pipeline spec is an object of the spec's fields");
    }
    Ok(spec)
}

fn state_name(state: PipelineState) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{state:?}").to_lowercase())
}

fn action_line(verb: &str, s: &PipelineStatus) -> String {
    let mut line = format!("{verb} pipeline {}: {}", s.name, state_name(s.state));
    if let Some(c) = s.last_committed_checkpoint {
        line.push_str(&format!(", last committed checkpoint {c}"));
    }
    if let Some(c) = s.savepoint {
        line.push_str(&format!(", savepoint {c}"));
    }
    line.push('\n');
    line
}

/// The table `weir pipeline ls` prints.
pub fn pipelines_table(pipelines: &[PipelineStatus]) -> String {
    let mut t = Table::new(&[
        "NAME",
        "STATE",
        "COMMITTED",
        "IN",
        "OUT",
        "RESTARTS",
        "LAST ERROR",
    ]);
    for p in pipelines {
        t.row(vec![
            p.name.clone(),
            state_name(p.state),
            table::or_dash(p.last_committed_checkpoint),
            p.records_in.to_string(),
            p.records_out.to_string(),
            p.restarts.to_string(),
            table::or_dash(
                p.last_error
                    .as_deref()
                    .map(|e| table::shorten(e, LS_ERROR_CHARS)),
            ),
        ]);
    }
    t.render()
}

/// The `key: value` list `weir pipeline status` prints.
pub fn status_list(s: &PipelineStatus) -> String {
    let mut pairs: Vec<(String, String)> = vec![
        ("name".into(), s.name.clone()),
        ("state".into(), state_name(s.state)),
        ("desired".into(), s.desired.as_str().to_owned()),
    ];
    for (step, id) in &s.modules {
        pairs.push((format!("module {step}"), id.clone()));
    }
    pairs.extend([
        (
            "last complete checkpoint".into(),
            table::or_dash(s.last_complete_checkpoint),
        ),
        (
            "last committed checkpoint".into(),
            table::or_dash(s.last_committed_checkpoint),
        ),
        ("savepoint".into(), table::or_dash(s.savepoint)),
        ("records in".into(), s.records_in.to_string()),
        ("records out".into(), s.records_out.to_string()),
        ("dead letters".into(), s.dead_letters.to_string()),
        ("consumer lag".into(), table::or_dash(s.consumer_lag)),
        ("restarts".into(), s.restarts.to_string()),
        ("last error".into(), table::or_dash(s.last_error.clone())),
        ("created".into(), s.created_at.clone()),
    ]);
    // A pipeline of one worker shows what it showed before workers existed.
    if s.workers > 1 {
        pairs.push(("workers".into(), s.workers.to_string()));
        for w in &s.worker_status {
            pairs.push((format!("worker {}/{}", w.index, s.workers), worker_line(w)));
        }
    }
    table::key_values(&pairs)
}

/// Each step's `module` as a full id: the spec may name one by a unique prefix of its
/// id, as `weir module ls` shows it (`module::resolve_id`).
fn resolve_step_modules(client: &ServerClient, spec: &mut serde_json::Value) -> anyhow::Result<()> {
    let steps = spec.get_mut("steps").and_then(|s| s.as_array_mut());
    for step in steps.into_iter().flatten() {
        if let Some(serde_json::Value::String(id)) = step.get_mut("module") {
            *id = resolve_id(client, id)?;
        }
    }
    Ok(())
}

/// `weir pipeline status --log`: the last lines of each worker's log, under a heading
/// naming the worker.
fn log_tails(s: &PipelineStatus) -> String {
    let mut text = String::new();
    for w in &s.worker_status {
        text.push_str(&format!("\nlog of worker {}/{}:\n", w.index, s.workers));
        for line in &w.log_tail {
            text.push_str(&format!("  {line}\n"));
        }
    }
    text
}

/// One worker in `weir pipeline status`: state, pid, restarts, last committed
/// checkpoint, last error.
fn worker_line(w: &WorkerStatus) -> String {
    let mut line = state_name(w.state);
    if let Some(pid) = w.pid {
        line.push_str(&format!(", pid {pid}"));
    }
    line.push_str(&format!(
        ", {} restarts, committed checkpoint {}",
        w.restarts,
        table::or_dash(w.last_committed_checkpoint)
    ));
    if let Some(e) = &w.last_error {
        line.push_str(&format!(", last error: {e}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::wire::Desired;

    fn status() -> PipelineStatus {
        PipelineStatus {
            name: "upper".into(),
            state: PipelineState::Failed,
            desired: Desired::Running,
            modules: BTreeMap::from([("step-0".to_owned(), "ab".repeat(32))]),
            last_complete_checkpoint: Some(4),
            last_committed_checkpoint: Some(3),
            records_in: 10,
            records_out: 9,
            dead_letters: 0,
            consumer_lag: None,
            restarts: 2,
            last_error: Some(format!("module uppercase: {}", "x".repeat(100))),
            savepoint: None,
            created_at: "2026-12-01T04:00:00Z".into(),
            workers: 1,
            worker_status: vec![],
        }
    }

    #[test]
    fn toml_specs_become_the_same_json_as_json_specs() {
        let toml = "name = \"p\"\n[[steps]]\ntype = \"map\"\nmodule = \"abc\"\n[checkpoint]\ninterval = \"1s\"\n";
        let json = r#"{"name":"p","steps":[{"type":"map","module":"abc"}],"checkpoint":{"interval":"1s"}}"#;
        assert_eq!(
            spec_json(toml, "p.toml", true).expect("a value"),
            spec_json(json, "p.json", false).expect("a value")
        );
    }

    #[test]
    fn a_bad_toml_spec_is_one_line_naming_file_and_line() {
        let e =
            spec_json("name = \"p\"\nparallelism = = 2\n", "p.toml", true).expect_err("an error");
        let text = e.to_string();
        assert!(text.starts_with("p.toml line 2: "), "{text}");
        assert_eq!(text.lines().count(), 1, "{text}");
        let e = spec_json("[1]", "p.json", false).expect_err("an error");
        assert_eq!(
            e.to_string(),
            "p.json: a pipeline spec is an object of the spec's fields"
        );
    }

    #[test]
    fn step_modules_parse() {
        assert_eq!(
            step_module("count=abc").expect("a value"),
            ("count".into(), "abc".into())
        );
        assert!(step_module("count").is_err());
        assert!(step_module("=abc").is_err());
    }

    #[test]
    fn ls_shortens_the_last_error_and_status_shows_it_whole() {
        let table = pipelines_table(&[status()]);
        let row = table.lines().nth(1).expect("a value");
        assert!(
            row.starts_with("upper  failed  3          10  9    2         module uppercase: xxx"),
            "{table}"
        );
        assert!(row.ends_with("..."), "{row}");
        let list = status_list(&status());
        assert!(
            list.contains(&format!("module step-0:             {}\n", "ab".repeat(32))),
            "{list}"
        );
        assert!(
            list.contains(&format!(
                "last error:                module uppercase: {}\n",
                "x".repeat(100)
            )),
            "{list}"
        );
        assert!(list.contains("consumer lag:              -\n"), "{list}");
        assert!(!list.contains("worker"), "one worker adds nothing: {list}");
    }

    #[test]
    fn status_shows_each_of_several_workers() {
        let mut s = status();
        s.workers = 2;
        s.worker_status = vec![
            WorkerStatus {
                index: 0,
                state: PipelineState::Running,
                pid: Some(42),
                restarts: 0,
                last_error: None,
                last_committed_checkpoint: Some(7),
                records_in: 5,
                records_out: 5,
                log_tail: vec![],
            },
            WorkerStatus {
                index: 1,
                state: PipelineState::Failed,
                pid: None,
                restarts: 3,
                last_error: Some("boom".into()),
                last_committed_checkpoint: None,
                records_in: 5,
                records_out: 4,
                log_tail: vec!["weir: error: boom".into()],
            },
        ];
        let list = status_list(&s);
        assert!(list.contains("workers:                   2\n"), "{list}");
        assert_eq!(
            log_tails(&s),
            "\nlog of worker 0/2:\n\nlog of worker 1/2:\n  weir: error: boom\n"
        );
        assert!(
            list.contains(
                "worker 0/2:                running, pid 42, 0 restarts, committed checkpoint 7\n"
            ),
            "{list}"
        );
        assert!(
            list.contains(
                "worker 1/2:                failed, 3 restarts, committed checkpoint -, last error: boom\n"
            ),
            "{list}"
        );
    }
}
