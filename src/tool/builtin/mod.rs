//! Built-in tools, one file each.

mod await_event;
mod detached;
mod echo;
mod http;
mod math;
mod shell;
mod sleep;
pub mod spawn_background;
mod time;

use std::sync::Arc;

use super::Tool;

pub use await_event::AwaitEvent;
pub use detached::DetachedCommand;
pub use echo::Echo;
pub use http::HttpRequest;
pub use math::{Arith, MathOp};
pub use shell::Shell;
pub use sleep::Sleep;
pub use spawn_background::SpawnBackground;
pub use time::GetCurrentTime;

/// Every built-in tool.
pub fn all() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(Echo),
        Arc::new(GetCurrentTime),
        Arc::new(Arith(MathOp::Add)),
        Arc::new(Arith(MathOp::Subtract)),
        Arc::new(Arith(MathOp::Multiply)),
        Arc::new(Arith(MathOp::Divide)),
        Arc::new(Sleep),
        Arc::new(AwaitEvent),
        Arc::new(HttpRequest),
        Arc::new(SpawnBackground),
    ]
}

/// The built-ins the config turns on: `shell` and `detached_command` when
/// `[shell] enabled = true` (operation state in `state_dir`, else `<database>.operations`).
pub fn configured(config: &crate::Config) -> Vec<Arc<dyn Tool>> {
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    if config.shell.enabled {
        let state_dir = config
            .shell
            .state_dir
            .clone()
            .unwrap_or_else(|| format!("{}.operations", config.db_path));
        tools.push(Arc::new(Shell::new(&config.shell)));
        tools.push(Arc::new(crate::tool::AsyncAdapter(DetachedCommand::new(
            &config.shell,
            state_dir.into(),
        ))));
    }
    tools
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The config refuses a command tool named like a built-in by its own lists (it sits a
    /// layer below the tools and cannot ask them): they must name exactly these.
    #[test]
    fn config_lists_the_builtin_names() {
        let names = |tools: Vec<Arc<dyn Tool>>| -> Vec<String> {
            tools.iter().map(|t| t.definition().name).collect()
        };
        assert_eq!(names(all()), crate::config::BUILTIN_TOOLS);
        let mut config = crate::Config::default();
        config.shell.enabled = true;
        assert_eq!(names(configured(&config)), crate::config::SHELL_TOOLS);
    }
}
