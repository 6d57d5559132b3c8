//! `toolq completions SHELL` and `toolq man`: generated from the clap definition, so they
//! always match the commands and flags of this build. Neither opens the database.

use clap::CommandFactory;
use clap_complete::Shell;

use super::{Cli, render};
use crate::error::{Error, Result};

/// Flags of `completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Prints the completion script for one shell.
pub fn completions(a: &CompletionsArgs) -> Result<()> {
    let mut buf = Vec::new();
    clap_complete::generate(a.shell, &mut Cli::command(), "toolq", &mut buf);
    // Printed through render, which handles a closed pipe like every other command.
    render::raw(&String::from_utf8_lossy(&buf));
    Ok(())
}

/// Prints the man page.
pub fn man() -> Result<()> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut buf)
        .map_err(|e| Error::io("render the man page", e))?;
    render::raw(&String::from_utf8_lossy(&buf));
    Ok(())
}
