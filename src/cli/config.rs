//! `toolq config`: the effective configuration and where each value came from.

use super::render;
use crate::config::Layers;
use crate::config::explain::effective;
use crate::error::Result;

/// Flags of `config` (none beyond the global ones).
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Prints `key = value  # origin` per key (TOML you can paste), or the same as JSON.
pub fn run(layers: &Layers, json: bool, _args: &Args) -> Result<()> {
    let eff = effective(layers);
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
    Ok(())
}
