//! `toolq config`: the effective configuration and where each value came from.

use super::render;
use crate::config::explain::{ToolRetryPolicy, effective, retry_policies};
use crate::config::{Config, Layers};
use crate::error::Result;

/// Flags of `config` (none beyond the global ones).
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Prints `key = value  # origin` per key (TOML you can paste), then the retry policy of each
/// of `tools` as comments; or the same as JSON.
pub fn run(
    layers: &Layers,
    config: &Config,
    tools: &[String],
    json: bool,
    _args: &Args,
) -> Result<()> {
    let mut eff = effective(layers);
    eff.retry_policies = retry_policies(config, layers, tools);
    if json {
        render::json(&eff);
        return Ok(());
    }
    render::line(&format!("# config file: {}", layers.file_summary()));
    let width = eff
        .values
        .iter()
        .map(|e| e.key.len() + e.value.to_string().len() + 3)
        .max()
        .unwrap_or(0);
    for e in &eff.values {
        let line = format!("{} = {}", e.key, e.value);
        render::line(&format!("{line:width$}  # {}", e.origin));
    }
    render::line(
        "# retry policy per tool (* = tools without keys of their own; a run's own \
         max_attempts wins):",
    );
    for p in &eff.retry_policies {
        render::line(&policy_line(p));
    }
    Ok(())
}

/// `#   tool: max_attempts = 3 (runs.max_attempts, built-in default); ...`
fn policy_line(p: &ToolRetryPolicy) -> String {
    let parts: Vec<String> = [
        ("max_attempts", &p.max_attempts),
        ("backoff_base", &p.backoff_base),
        ("backoff_max", &p.backoff_max),
        ("retry_on", &p.retry_on),
    ]
    .iter()
    .map(|(name, v)| match &v.key {
        Some(key) => format!("{name} = {} ({key}, {})", v.value, v.origin),
        None => format!("{name} = {} ({})", v.value, v.origin),
    })
    .collect();
    format!("#   {}: {}", p.tool, parts.join("; "))
}
