//! `toolq check`: SQLite's integrity check of the database file, one line per problem.

use serde::Serialize;

use super::{Ctx, render};
use crate::error::{Result, StoreError};

/// Flags of `check`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run `PRAGMA quick_check` (faster; skips checking that indexes match their tables).
    #[arg(long)]
    pub quick: bool,
}

/// The `--json` shape.
#[derive(Debug, Serialize)]
struct Report<'a> {
    ok: bool,
    quick: bool,
    problems: &'a [String],
}

/// Prints `ok`, or each problem; exits 1 when there is any.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let quick = args.quick;
    let problems = ctx.client.engine().check(quick).await?;
    if ctx.json {
        render::json(&Report {
            ok: problems.is_empty(),
            quick,
            problems: &problems,
        });
    } else if problems.is_empty() {
        render::line("ok");
    } else {
        for p in &problems {
            render::line(p);
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(StoreError::CheckFailed {
        path: ctx.client.engine().location(),
        problems: problems.len(),
    }
    .into())
}
