//! The `weir` binary: CLI glue only; everything else lives in the `weir` library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WEIR_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    // A task thread's panic fails its pipeline with one `weir: error:` line naming the
    // task and the panic; the hook keeps the default multi-line report for other threads.
    weir::dataflow::task_panic::install_hook();
    let cli = weir::cli::Cli::parse();
    match cli.command.execute() {
        Ok(code) => code,
        Err(e) => {
            // One line: the error and its causes, outermost first.
            let causes: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            eprintln!("weir: error: {}", dedup_causes(causes).join(": "));
            ExitCode::FAILURE
        }
    }
}

/// Drops a cause whose text is already contained in the one before it (thiserror
/// messages often embed their source).
fn dedup_causes(causes: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in causes {
        if out.last().is_some_and(|prev| prev.contains(&c)) {
            continue;
        }
        out.push(c);
    }
    out
}
