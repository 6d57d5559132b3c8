//! `toolq web`: serve the dashboard until SIGINT/SIGTERM.

use tokio_util::sync::CancellationToken;

use super::Ctx;
use crate::config::Override;
use crate::error::{Error, Result};
use crate::web::{WebOptions, WebServer};

/// Flags of `web`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on (overrides web.listen; default 127.0.0.1:8080). Any address but
    /// loopback needs a token.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// The token every request must carry (overrides web.token; TOOLQ_WEB__TOKEN keeps it out
    /// of the process list).
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// A second token that may read but not act (overrides web.read_token;
    /// TOOLQ_WEB__READ_TOKEN keeps it out of the process list).
    #[arg(long, value_name = "TOKEN")]
    pub read_token: Option<String>,
    /// Show everything, allow no action (overrides web.read_only).
    #[arg(long)]
    pub read_only: bool,
}

impl Args {
    /// The config keys these flags set.
    pub fn overrides(&self) -> Vec<Override> {
        let mut o = Vec::new();
        if let Some(a) = &self.listen {
            o.push(Override::new("web.listen", a.as_str(), "--listen"));
        }
        if let Some(t) = &self.token {
            o.push(Override::new("web.token", t.as_str(), "--token"));
        }
        if let Some(t) = &self.read_token {
            o.push(Override::new("web.read_token", t.as_str(), "--read-token"));
        }
        if self.read_only {
            o.push(Override::new("web.read_only", true, "--read-only"));
        }
        o
    }
}

/// The dashboard options the configuration gives, listening on `listen`.
pub fn options(ctx: &Ctx, listen: &str) -> WebOptions {
    let cfg = &ctx.client.config().web;
    WebOptions {
        listen: listen.to_string(),
        token: cfg.token.clone(),
        read_token: cfg.read_token.clone(),
        read_only: cfg.read_only,
    }
}

/// Serves the dashboard until SIGINT/SIGTERM.
pub async fn run(ctx: &Ctx, _args: Args) -> Result<()> {
    let listen = ctx.client.config().web.listen.clone();
    let server = WebServer::bind(ctx.client.clone(), options(ctx, &listen)).await?;
    let bound = server.local_addr()?;
    // One line on stdout that scripts (and tests) can read: where to point a browser.
    if ctx.json {
        crate::cli::render::json(&serde_json::json!({"url": format!("http://{bound}/")}));
    } else {
        crate::cli::render::raw(&format!("dashboard at http://{bound}/\n"));
    }
    crate::cli::render::finish()?;
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Error::io("listen for SIGTERM", e))?;
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        stop.cancel();
    });
    server.serve(shutdown).await
}
