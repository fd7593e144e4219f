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
        // Colours only on a terminal: a worker's log file or a pipe gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // A task thread's panic fails its pipeline with one `weir: error:` line naming the
    // task and the panic; the hook keeps the default multi-line report for other threads.
    weir::dataflow::task_panic::install_hook();
    let cli = weir::cli::Cli::parse();
    match cli.command.execute() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("weir: error: {}", weir::cli::error_line(&e));
            ExitCode::FAILURE
        }
    }
}
