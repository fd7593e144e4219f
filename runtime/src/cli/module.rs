//! `weir module push|ls|rm`: a tenant's modules on a `weir serve` server.
//!
//! Invariants: output is a table (or, with `--json`, the server's JSON as is) on stdout;
//! a refusal is one line on stderr via `main` (`weir: error: <reason> (HTTP <status>)`)
//! and a non-zero exit. A module may be named by a unique prefix of its id, as `ls`
//! shows it; the prefix is resolved against the tenant's own list before anything is
//! deleted, and an ambiguous or unknown prefix is refused.

use std::path::{Path, PathBuf};

use anyhow::bail;

use crate::cli::server_client::{ServerArgs, ServerClient};
use crate::cli::table::{self, Table, print_json_or};
use crate::server::wire::Module;

/// Characters of a module id shown in tables (enough to name it uniquely in practice).
pub const SHORT_ID: usize = 12;
/// Characters of a full module id (hex SHA-256).
const FULL_ID: usize = 64;

#[derive(Debug, clap::Args)]
pub struct ModuleArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(subcommand)]
    pub command: ModuleCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ModuleCommand {
    /// Upload a component (.wasm); the same bytes twice are one module.
    Push {
        /// The component file.
        file: PathBuf,
        /// A name for people [default: the file's name without .wasm].
        #[arg(long)]
        name: Option<String>,
    },
    /// List your modules.
    Ls,
    /// Delete a module (refused while a pipeline uses it).
    Rm {
        /// The module's id, or a unique prefix of it (as `ls` shows it).
        id: String,
    },
}

pub fn execute(args: ModuleArgs) -> anyhow::Result<()> {
    let client = ServerClient::from_args(&args.server)?;
    let json = args.server.json;
    match args.command {
        ModuleCommand::Push { file, name } => push(&client, &file, name, json),
        ModuleCommand::Ls => {
            let reply = client.modules()?;
            print_json_or(json, &reply.json, || modules_table(&reply.value))
        }
        ModuleCommand::Rm { id } => {
            let id = resolve_id(&client, &id)?;
            let reply = client.delete_module(&id)?;
            print_json_or(json, &reply.json, || format!("deleted module {id}\n"))
        }
    }
}

fn push(
    client: &ServerClient,
    file: &Path,
    name: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let name = match name {
        Some(n) => n,
        None => default_name(file),
    };
    let reply = client.push_module(file, &name)?;
    let verb = if reply.status == 201 {
        "pushed"
    } else {
        "already uploaded"
    };
    print_json_or(json, &reply.json, || pushed_line(verb, &reply.value))
}

/// The name a module gets without `--name`: the file's name without `.wasm`.
pub fn default_name(file: &Path) -> String {
    file.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "module".to_owned())
}

fn pushed_line(verb: &str, m: &Module) -> String {
    format!(
        "{verb} {}: {} ({}, {})\n",
        m.name,
        m.id,
        m.world,
        table::size(m.size)
    )
}

/// The table `weir module ls` prints.
pub fn modules_table(modules: &[Module]) -> String {
    let mut t = Table::new(&["ID", "NAME", "WORLD", "SIZE", "UPLOADED"]);
    for m in modules {
        t.row(vec![
            m.id.chars().take(SHORT_ID).collect(),
            m.name.clone(),
            m.world.clone(),
            table::size(m.size),
            m.uploaded_at.clone(),
        ]);
    }
    t.render()
}

/// The full id of the tenant's module that `id` names (a full id, or a unique prefix).
pub fn resolve_id(client: &ServerClient, id: &str) -> anyhow::Result<String> {
    if id.len() == FULL_ID || id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        // Not a prefix: the server says what is wrong with it, if anything.
        return Ok(id.to_owned());
    }
    let prefix = id.to_ascii_lowercase();
    let modules = client.modules()?.value;
    let matching: Vec<&Module> = modules
        .iter()
        .filter(|m| m.id.starts_with(&prefix))
        .collect();
    match matching.as_slice() {
        [one] => Ok(one.id.clone()),
        [] => bail!("you have no module whose id starts with {prefix}"),
        many => bail!(
            "{} of your modules have ids starting with {prefix}: give more of the id",
            many.len()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(id: &str, name: &str) -> Module {
        Module {
            id: id.to_owned(),
            name: name.to_owned(),
            world: "mapper".to_owned(),
            exports: vec![],
            imports: vec![],
            size: 2048,
            uploaded_at: "2026-12-01T04:00:00Z".to_owned(),
        }
    }

    #[test]
    fn the_table_shows_short_ids_names_and_worlds() {
        let id = "0123456789abcdef".repeat(4);
        assert_eq!(
            modules_table(&[module(&id, "uppercase")]),
            "ID            NAME       WORLD   SIZE     UPLOADED\n\
             0123456789ab  uppercase  mapper  2.0 KiB  2026-12-01T04:00:00Z\n"
        );
    }

    #[test]
    fn the_default_name_is_the_file_stem() {
        assert_eq!(default_name(Path::new("/x/uppercase.wasm")), "uppercase");
        assert_eq!(default_name(Path::new("/")), "module");
    }
}
