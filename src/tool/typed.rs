//! Typed tool arguments: a tool declares a Rust type for its arguments; the JSON schema is
//! derived from it (schemars) and each run's arguments arrive parsed. The raw path, a
//! [`Tool`] with a hand-written schema, stays as it is; [`Typed`] adapts one into the other.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Tool, ToolContext, ToolDef, ToolOutcome};

/// A tool whose arguments are `Args`. Register it with [`super::RegistryBuilder::typed`].
///
/// ```
/// use async_trait::async_trait;
/// use serde::Deserialize;
/// use toolq::tool::{TypedTool, typed_def};
/// use toolq::{RegistryBuilder, ToolContext, ToolDef, ToolOutcome};
///
/// /// Arguments of `repeat`.
/// #[derive(Deserialize, schemars::JsonSchema)]
/// struct RepeatArgs {
///     /// The text to repeat.
///     text: String,
///     /// How many times (1 if absent).
///     times: Option<u32>,
/// }
///
/// struct Repeat;
///
/// #[async_trait]
/// impl TypedTool for Repeat {
///     type Args = RepeatArgs;
///     fn definition(&self) -> ToolDef {
///         typed_def::<RepeatArgs>("repeat", "Repeats a text.")
///     }
///     async fn call(&self, args: RepeatArgs, _ctx: ToolContext) -> ToolOutcome {
///         let times = args.times.unwrap_or(1) as usize;
///         ToolOutcome::ok(serde_json::json!({ "text": args.text.repeat(times) }))
///     }
/// }
///
/// let registry = RegistryBuilder::new().typed(Repeat).build().expect("valid schema");
/// // The derived schema checks arguments at enqueue time, like a hand-written one.
/// assert!(registry.validate("repeat", &serde_json::json!({"text": "ab", "times": 2})).is_ok());
/// assert!(registry.validate("repeat", &serde_json::json!({"times": 2})).is_err());
/// ```
#[async_trait]
pub trait TypedTool: Send + Sync + 'static {
    /// The arguments: parsed from each run's JSON, and the source of the tool's schema.
    type Args: DeserializeOwned + JsonSchema + Send + 'static;

    /// The definition. Its `parameters` are replaced by the schema derived from
    /// [`Self::Args`], so build it with [`typed_def`] or leave them empty.
    fn definition(&self) -> ToolDef;

    /// Executes one run with its parsed arguments; `ctx.args` holds the same as JSON.
    async fn call(&self, args: Self::Args, ctx: ToolContext) -> ToolOutcome;

    /// Shapes inbox messages about this tool's runs, as [`Tool::format_message`].
    fn format_message(&self, draft: &crate::inbox::NewMessage) -> Option<String> {
        let _ = draft;
        None
    }
}

/// The JSON schema of `A`, as a tool's `parameters` (JSON Schema 2020-12, which the
/// registry's validator reads).
pub fn schema_of<A: JsonSchema>() -> Value {
    schemars::schema_for!(A).to_value()
}

/// A [`ToolDef`] whose parameters are the schema of `A`.
pub fn typed_def<A: JsonSchema>(name: &str, description: &str) -> ToolDef {
    ToolDef::new(name, description, schema_of::<A>())
}

/// Adapts a [`TypedTool`] into a [`Tool`]: derives the schema, parses the arguments.
#[derive(Debug, Clone)]
pub struct Typed<T>(pub T);

#[async_trait]
impl<T: TypedTool> Tool for Typed<T> {
    fn definition(&self) -> ToolDef {
        let mut def = self.0.definition();
        def.parameters = schema_of::<T::Args>();
        def
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        // The registry validated the JSON against the derived schema before it was stored;
        // a value the schema allows but serde refuses is the tool's input error, not a crash.
        match serde_json::from_value::<T::Args>(ctx.args.clone()) {
            Ok(args) => self.0.call(args, ctx).await,
            Err(e) => ToolOutcome::tool_error(format!("arguments do not fit this tool: {e}")),
        }
    }

    fn format_message(&self, draft: &crate::inbox::NewMessage) -> Option<String> {
        self.0.format_message(draft)
    }
}
