//! A host's own `toolq`: the stock CLI with one Rust tool added. Every command knows the tool
//! (`tools`, `enqueue`, `worker`, `wait`, ...), next to the built-in and configured ones.
//!
//! ```text
//! cargo run --example custom_cli -- enqueue shout --args '{"text":"hi"}'
//! cargo run --example custom_cli -- worker --drain
//! ```

use async_trait::async_trait;
use serde_json::json;
use toolq::{RegistryBuilder, Tool, ToolContext, ToolDef, ToolOutcome};

/// Upper-cases a text.
struct Shout;

#[async_trait]
impl Tool for Shout {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "shout",
            "Upper-cases a text.",
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        )
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let text = ctx.args["text"].as_str().unwrap_or_default().to_string();
        // A recorded step: a retry of this run would take its result instead of redoing it
        // (and with traces on it is a `toolq.step` span).
        let upper = ctx.step("shout", async move {
            Ok::<_, std::convert::Infallible>(text.to_uppercase())
        });
        match upper.await {
            Ok(shouted) => ToolOutcome::ok(json!({ "shouted": shouted })),
            Err(e) => e.into_outcome(),
        }
    }
}

fn main() {
    std::process::exit(toolq::cli::main_with(RegistryBuilder::new().tool(Shout)));
}
