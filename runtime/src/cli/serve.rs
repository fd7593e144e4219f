//! `weir serve --config server.toml`: runs the hosting server until SIGINT or SIGTERM,
//! then stops every pipeline with a final checkpoint and exits.

use std::path::PathBuf;

use anyhow::Context;

use crate::server::{self, config::ServerConfig};

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The server's config file (TOML).
    #[arg(long)]
    pub config: PathBuf,
}

pub fn execute(args: ServeArgs) -> anyhow::Result<()> {
    let config = ServerConfig::load(&args.config)?;
    let app = server::open(config, super::this_program()?)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("weir-serve")
        .build()
        .context("cannot start the server's runtime")?;
    runtime.block_on(async move {
        server::serve(app, shutdown_signal(), |url| {
            eprintln!("weir: serving on {url}");
        })
        .await
    })?;
    eprintln!("weir: server stopped");
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without handlers the default actions still end the process.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
