//! `add`, `subtract`, `multiply`, `divide`: arithmetic on two numbers.

use async_trait::async_trait;
use serde_json::json;

use crate::tool::{Tool, ToolContext, ToolDef, ToolHints, ToolOutcome};

/// Which operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MathOp {
    /// a + b
    Add,
    /// a - b
    Subtract,
    /// a * b
    Multiply,
    /// a / b (b must not be 0)
    Divide,
}

/// An arithmetic tool over `{"a": number, "b": number}`.
#[derive(Debug, Clone, Copy)]
pub struct Arith(pub MathOp);

impl Arith {
    fn name(self) -> &'static str {
        match self.0 {
            MathOp::Add => "add",
            MathOp::Subtract => "subtract",
            MathOp::Multiply => "multiply",
            MathOp::Divide => "divide",
        }
    }
}

#[async_trait]
impl Tool for Arith {
    fn definition(&self) -> ToolDef {
        let name = self.name();
        ToolDef::new(
            name,
            &format!(
                "Returns {{\"result\": a {} b}}.",
                match self.0 {
                    MathOp::Add => "+",
                    MathOp::Subtract => "-",
                    MathOp::Multiply => "*",
                    MathOp::Divide => "/",
                }
            ),
            json!({
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
                "additionalProperties": false
            }),
        )
        .display_name(&format!("{}{}", name[..1].to_uppercase(), &name[1..]))
        .hints(ToolHints {
            readonly: true,
            idempotent: true,
            supports_background: false,
        })
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        if let (Some(a), Some(b)) = (ctx.args["a"].as_i64(), ctx.args["b"].as_i64()) {
            let exact = match self.0 {
                MathOp::Add => a.checked_add(b),
                MathOp::Subtract => a.checked_sub(b),
                MathOp::Multiply => a.checked_mul(b),
                MathOp::Divide if b != 0 && a % b == 0 => a.checked_div(b),
                MathOp::Divide => None,
            };
            if let Some(r) = exact {
                return ToolOutcome::ok(json!({ "result": r }));
            }
        }
        let (Some(a), Some(b)) = (ctx.args["a"].as_f64(), ctx.args["b"].as_f64()) else {
            return ToolOutcome::tool_error("a and b must be numbers");
        };
        let r = match self.0 {
            MathOp::Add => a + b,
            MathOp::Subtract => a - b,
            MathOp::Multiply => a * b,
            MathOp::Divide if b == 0.0 => return ToolOutcome::tool_error("cannot divide by zero"),
            MathOp::Divide => a / b,
        };
        if !r.is_finite() {
            return ToolOutcome::tool_error(format!(
                "result of {a} and {b} is not a finite number"
            ));
        }
        ToolOutcome::ok(json!({ "result": r }))
    }
}
