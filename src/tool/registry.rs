//! The registry: tool name -> tool, definition and compiled argument schema. Arguments are
//! validated here, before anything is written.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::{Tool, ToolDef, ToolExecutionMode};
use crate::error::InputError;

/// A registered tool.
pub struct Entry {
    /// The tool.
    pub tool: Arc<dyn Tool>,
    /// Its definition.
    pub def: ToolDef,
    /// How a host's call runs it (see [`crate::tool::BasicToolExecutor`]).
    pub mode: ToolExecutionMode,
    validator: jsonschema::Validator,
}

impl Entry {
    /// Shapes an inbox message about one of this tool's runs: a background mode's formatter
    /// when it has one (result or cancellation text), else the tool's own
    /// [`Tool::format_message`]; the default text otherwise.
    pub fn format_message(&self, msg: &mut crate::inbox::NewMessage) {
        match (self.mode.formatter(), msg.kind) {
            (Some(f), "completed" | "failed") => msg.body = f.result(msg),
            (Some(f), "cancelled") => msg.body = f.cancellation(msg),
            _ => super::apply_format(&*self.tool, msg),
        }
    }
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry").field("def", &self.def).finish()
    }
}

/// The set of tools a worker can run. Built once, then shared read-only.
#[derive(Debug, Default)]
pub struct Registry {
    tools: BTreeMap<String, Entry>,
}

/// Builds a [`Registry`]: the built-ins, the config's tools, a host's own tools.
///
/// ```
/// use toolq::{Config, RegistryBuilder};
///
/// let config = Config::default();
/// let registry = RegistryBuilder::new()
///     .with_builtins()
///     .with_config_tools(&config)
///     .expect("the default config defines no tools")
///     .build()
///     .expect("unique names, valid schemas");
/// assert!(registry.get("echo").is_some());
/// // A name registered twice is refused.
/// assert!(RegistryBuilder::new().with_builtins().with_builtins().build().is_err());
/// ```
#[derive(Default)]
pub struct RegistryBuilder {
    tools: Vec<Arc<dyn Tool>>,
    modes: BTreeMap<String, ToolExecutionMode>,
}

impl RegistryBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the built-in tools (echo, get_current_time, add, subtract, multiply, divide, sleep,
    /// await_event, http_request, spawn_background).
    pub fn with_builtins(mut self) -> Self {
        self.tools.extend(super::builtin::all());
        self
    }

    /// Adds what the config defines: its `[tools.NAME]` command tools, and the built-ins it
    /// enables (`shell` when `[shell] enabled = true`).
    pub fn with_config_tools(
        mut self,
        config: &crate::Config,
    ) -> Result<Self, crate::error::ConfigError> {
        self.tools
            .extend(super::command::command_tools(&config.tools)?);
        self.tools.extend(super::builtin::configured(config));
        Ok(self)
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: impl Tool) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    /// Adds an async tool (it runs through [`super::AsyncAdapter`]). A host's call of it runs
    /// in the background (delivered `WhenIdle`): only a queued run stores its operation id and
    /// stages and resumes them after a crash. A later [`RegistryBuilder::mode`] overrides this.
    pub fn async_tool(self, tool: impl super::AsyncTool) -> Self {
        let name = tool.definition().name;
        self.tool(super::AsyncAdapter(tool)).background(&name)
    }

    /// Adds a tool with typed arguments (its schema derived from its `Args` type).
    pub fn typed(self, tool: impl super::TypedTool) -> Self {
        self.tool(super::Typed(tool))
    }

    /// Adds a shared tool.
    pub fn tool_arc(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Sets how a host's call runs tool `name` (default [`ToolExecutionMode::Standard`]).
    pub fn mode(mut self, name: &str, mode: ToolExecutionMode) -> Self {
        self.modes.insert(name.to_string(), mode);
        self
    }

    /// Runs tool `name` in the background with the default formatter, delivered `WhenIdle`.
    pub fn background(self, name: &str) -> Self {
        self.mode(
            name,
            ToolExecutionMode::background(super::FunctionResponseScheduling::WhenIdle),
        )
    }

    /// Builds the registry: names must be unique, every schema must compile, and every mode
    /// must name a registered tool.
    pub fn build(mut self) -> Result<Registry, InputError> {
        let mut tools = BTreeMap::new();
        for tool in self.tools {
            let def = tool.definition();
            if def.name.is_empty() {
                return Err(InputError::new("tool name", "", "must not be empty"));
            }
            let validator = jsonschema::validator_for(&def.parameters).map_err(|e| {
                InputError::new(
                    format!("tool {:?} parameters schema", def.name),
                    def.parameters.to_string(),
                    format!("is not a valid JSON schema: {e}"),
                )
            })?;
            let name = def.name.clone();
            if tools.contains_key(&name) {
                return Err(InputError::new(
                    "tool",
                    &name,
                    "is registered twice: built-in tools, a host's own tools and the config's \
                     [tools.NAME] need names of their own",
                ));
            }
            let mode = self.modes.remove(&name).unwrap_or_default();
            tools.insert(
                name,
                Entry {
                    tool,
                    def,
                    mode,
                    validator,
                },
            );
        }
        if let Some(name) = self.modes.keys().next() {
            return Err(InputError::new(
                "tool mode",
                name,
                "names a tool that is not registered",
            ));
        }
        Ok(Registry { tools })
    }
}

impl Registry {
    /// A registry with just the built-in tools.
    pub fn builtins() -> Registry {
        // The built-in schemas are fixed and covered by tests.
        RegistryBuilder::new()
            .with_builtins()
            .build()
            .expect("built-in tools have unique names and valid schemas")
    }

    /// Looks up a tool.
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.tools.get(name)
    }

    /// The names of all tools, sorted.
    pub fn names(&self) -> Vec<String> {
        self.tools.keys().cloned().collect()
    }

    /// Whether a tool of that name is registered.
    pub fn has(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The names of all tools, sorted, borrowed (the seed's `tool_names`).
    pub fn tool_names(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).collect()
    }

    /// Every tool's definition, sorted by name (the seed's `tool_definitions`).
    pub fn tool_definitions(&self) -> Vec<ToolDef> {
        self.tools.values().map(|e| e.def.clone()).collect()
    }

    /// All tools, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.tools.values()
    }

    /// Checks that `tool` exists and `args` match its schema; the error names the tool,
    /// the failing location and the reason.
    pub fn validate(&self, tool: &str, args: &Value) -> Result<&Entry, InputError> {
        let entry = self.tools.get(tool).ok_or_else(|| {
            let known: Vec<&str> = self.tools.keys().map(String::as_str).collect();
            InputError::new(
                "tool",
                tool,
                format!("is not registered (known tools: {})", known.join(", ")),
            )
        })?;
        if !args.is_object() {
            return Err(InputError::new(
                "args",
                args.to_string(),
                "must be a JSON object",
            ));
        }
        // Valid args, the common case, take the validator's boolean path: collecting errors
        // first built an error iterator per enqueue (3 % of a batch enqueue's instructions).
        if entry.validator.is_valid(args) {
            return Ok(entry);
        }
        let problems: Vec<String> = entry
            .validator
            .iter_errors(args)
            .take(3)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("at {at}: {e}")
                }
            })
            .collect();
        if !problems.is_empty() {
            return Err(InputError::new(
                "args",
                args.to_string(),
                format!(
                    "do not match the schema of tool {tool:?}: {}",
                    problems.join("; ")
                ),
            ));
        }
        Ok(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_tool_and_bad_args_are_named() {
        let r = Registry::builtins();
        let e = r.validate("nope", &json!({})).unwrap_err().to_string();
        assert!(e.contains("\"nope\"") && e.contains("echo"), "{e}");
        let e = r
            .validate("add", &json!({"a": "x", "b": 1}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/a") && e.contains("add"), "{e}");
        let e = r.validate("echo", &json!([1])).unwrap_err().to_string();
        assert!(e.contains("JSON object"), "{e}");
        assert!(r.validate("echo", &json!({"message": "hi"})).is_ok());
        let e = r.validate("echo", &json!({})).unwrap_err().to_string();
        assert!(e.contains("message"), "{e}");
        let e = r
            .validate("echo", &json!({"message": "hi", "extra": 1}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("extra"), "{e}");
    }

    #[test]
    fn parity_accessors_match_the_seed() {
        let r = Registry::builtins();
        assert!(r.has("echo") && !r.has("nope"));
        assert_eq!(r.len(), r.tool_names().len());
        assert!(!r.is_empty());
        assert!(RegistryBuilder::new().build().unwrap().is_empty());
        let names = r.tool_names();
        let defs: Vec<String> = r.tool_definitions().into_iter().map(|d| d.name).collect();
        assert_eq!(names, defs.iter().map(String::as_str).collect::<Vec<_>>());
    }

    #[test]
    fn a_mode_must_name_a_registered_tool() {
        let e = RegistryBuilder::new()
            .with_builtins()
            .background("nope")
            .build()
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope") && e.contains("not registered"), "{e}");
        let r = RegistryBuilder::new()
            .with_builtins()
            .background("sleep")
            .build()
            .unwrap();
        assert!(r.get("sleep").unwrap().mode.is_background());
        assert!(!r.get("echo").unwrap().mode.is_background());
    }

    #[test]
    fn hints_are_opt_in_and_builtins_set_what_they_need() {
        assert!(!crate::tool::ToolHints::default().supports_background);
        let r = Registry::builtins();
        let bg = |n: &str| r.get(n).unwrap().def.hints.supports_background;
        for n in ["sleep", "http_request"] {
            assert!(bg(n), "{n} runs long: background-capable");
        }
        for n in [
            "echo",
            "get_current_time",
            "add",
            "divide",
            "spawn_background",
        ] {
            assert!(!bg(n), "{n} answers at once: inline only");
        }
    }
}
