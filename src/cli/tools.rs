//! `toolq tools [NAME]`: the registered tools, or one with its schema.

use super::render;
use crate::error::{InputError, Result};
use crate::tool::Registry;

/// Flags of `tools`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Show this tool with its argument schema.
    pub name: Option<String>,
}

/// Lists tools. Needs no database: the tools come from the build and the config.
pub fn run(reg: &Registry, json: bool, args: Args) -> Result<()> {
    if let Some(name) = args.name {
        return show(reg, json, &name);
    }
    let defs: Vec<_> = reg.iter().map(|e| e.def.clone()).collect();
    if json {
        render::json(&defs);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = defs
        .iter()
        .map(|d| {
            vec![
                d.name.clone(),
                d.display_name.clone(),
                d.description.clone(),
            ]
        })
        .collect();
    render::table(&["NAME", "DISPLAY NAME", "DESCRIPTION"], &rows);
    Ok(())
}

/// One tool with its hints and argument schema.
fn show(reg: &Registry, json: bool, name: &str) -> Result<()> {
    let entry = reg.get(name).ok_or_else(|| {
        let known: Vec<String> = reg.iter().map(|e| e.def.name.clone()).collect();
        InputError::new(
            "tool",
            name,
            format!("is not registered (known tools: {})", known.join(", ")),
        )
    })?;
    let d = &entry.def;
    if json {
        render::json(d);
        return Ok(());
    }
    render::fields(&[
        ("name", d.name.clone()),
        ("display_name", d.display_name.clone()),
        ("description", d.description.clone()),
        ("policy", format!("{:?}", d.policy)),
        (
            "hints",
            format!(
                "readonly={} idempotent={} supports_background={}",
                d.hints.readonly, d.hints.idempotent, d.hints.supports_background
            ),
        ),
        (
            "timeout",
            d.timeout.map_or("-".into(), crate::clock::format_duration),
        ),
    ]);
    render::line("parameters:");
    render::line(&serde_json::to_string_pretty(&d.parameters).unwrap_or_default());
    Ok(())
}
