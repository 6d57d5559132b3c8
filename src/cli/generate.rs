//! `toolq completions SHELL` and `toolq man`: generated from the clap definition, so they
//! always match the commands and flags of this build. Neither opens the database.

use clap_complete::Shell;

use super::render;
use crate::error::{Error, Result};

/// Flags of `completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Prints the completion script for one shell; `cli` is the whole command line's definition
/// (passed in: it holds these flags, so this file cannot import it without a circle).
pub fn completions(a: &CompletionsArgs, mut cli: clap::Command) -> Result<()> {
    let mut buf = Vec::new();
    clap_complete::generate(a.shell, &mut cli, "toolq", &mut buf);
    // Printed through render, which handles a closed pipe like every other command.
    render::raw(&String::from_utf8_lossy(&buf));
    Ok(())
}

/// Prints the man page of `cli`, the whole command line's definition.
pub fn man(cli: clap::Command) -> Result<()> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(cli)
        .render(&mut buf)
        .map_err(|e| Error::io("render the man page", e))?;
    render::raw(&String::from_utf8_lossy(&buf));
    Ok(())
}
