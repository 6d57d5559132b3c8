//! What a command runs with: the configuration (by its layers, flags last) and the tools.

use super::args::{Cli, Command};
use crate::config::{Config, Layers, Override};
use crate::error::{InputError, Result};
use crate::tool::{Registry, RegistryBuilder};

/// Loads the configuration by the lookup order (`--config`, `TOOLQ_CONFIG`, `./toolq.toml`,
/// built-in defaults), then `TOOLQ_*__*` environment variables, then flags (`--db`, the
/// worker's). `db_from_env` says `--db` was given as `TOOLQ_DB` (named so in provenance).
pub fn load_config(cli: &Cli, db_from_env: bool) -> Result<(Config, Layers)> {
    let mut overrides = Vec::new();
    if let Some(db) = &cli.db {
        let flag = if db_from_env { "TOOLQ_DB" } else { "--db" };
        if db.as_os_str().is_empty() {
            let reason = if db_from_env {
                "is set but empty: unset it, or set it to a database file or a postgres:// URL"
            } else {
                "must not be empty: give a database file or a postgres:// URL"
            };
            return Err(InputError::new(flag, "", reason).into());
        }
        let db = db.display().to_string();
        if crate::db_url::is_postgres(&db) {
            overrides.push(Override::new("database.url", db, flag));
        } else {
            // A path given here wins over a url in the config file.
            overrides.push(Override::new("database.path", db, flag));
            overrides.push(Override::new("database.url", String::new(), flag));
        }
    }
    if let Command::Worker(a) = &cli.command {
        overrides.extend(a.overrides());
    }
    if let Command::Web(a) = &cli.command {
        overrides.extend(a.overrides());
    }
    Ok(crate::config::resolve(cli.config.as_deref(), &overrides)?)
}

/// The tools this process can run: the built-ins plus what the config defines.
pub fn registry(config: &Config) -> Result<Registry> {
    registry_with(config, RegistryBuilder::new())
}

/// The tools this process can run: `host`'s own tools, the built-ins and what the config
/// defines (a name registered twice is an error).
pub fn registry_with(config: &Config, host: RegistryBuilder) -> Result<Registry> {
    let registry = host.with_builtins().with_config_tools(config)?.build()?;
    if let Some(name) = config
        .approvals
        .require
        .iter()
        .find(|n| registry.get(n).is_none())
    {
        let known: Vec<&str> = registry.iter().map(|e| e.def.name.as_str()).collect();
        let hint = match crate::config::suggest(name, &known) {
            Some(s) => format!("; did you mean `{s}`?"),
            None => String::new(),
        };
        return Err(InputError::new(
            "approvals.require",
            name,
            format!(
                "names a tool that is not registered{hint}\n  registered tools: {}",
                known.join(", ")
            ),
        )
        .into());
    }
    Ok(registry)
}
