//! `toolq completions SHELL` and `toolq man`: generated from the clap definition, so they
//! always match the commands and flags of this build. Neither opens the database.

use clap::CommandFactory;
use clap_complete::Shell;

use super::Cli;
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
    let mut cmd = Cli::command();
    clap_complete::generate(a.shell, &mut cmd, "toolq", &mut std::io::stdout().lock());
    Ok(())
}

/// Prints the man page.
pub fn man() -> Result<()> {
    match clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout().lock()) {
        // `toolq man | head` closing the pipe early is not a failure.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Error::io("write the man page", e))
        }
        _ => Ok(()),
    }
}
