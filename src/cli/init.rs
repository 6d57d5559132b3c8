//! `toolq init`: create or migrate the database.

use serde_json::json;

use super::{Ctx, render};
use crate::error::Result;
use crate::store::sqlite::SCHEMA_VERSION;

/// Flags of `init` (none).
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Opening the client already created or migrated the file; report it.
pub async fn run(ctx: &Ctx, _args: Args) -> Result<()> {
    let info = ctx.client.engine().info().await?;
    let path = ctx.client.engine().location();
    let version = if ctx.client.is_postgres() {
        crate::store::postgres::SCHEMA_VERSION
    } else {
        SCHEMA_VERSION
    };
    if ctx.json {
        render::json(
            &json!({"db": path, "schema_version": version, "journal_mode": info.journal_mode,
            "synchronous": info.synchronous, "sqlite": (!info.sqlite_version.is_empty()).then_some(&info.sqlite_version),
            "engine": info.engine, "server_version": info.server_version}),
        );
    } else {
        render::line(&format!(
            "database {path} ready (schema version {version}, journal_mode {}, synchronous {})",
            info.journal_mode, info.synchronous
        ));
    }
    Ok(())
}
