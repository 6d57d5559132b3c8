//! Built-in tools, one file each.

mod echo;
mod math;
mod sleep;
mod spawn_background;
mod time;

use std::sync::Arc;

use super::Tool;

pub use echo::Echo;
pub use math::{Arith, MathOp};
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
        Arc::new(SpawnBackground),
    ]
}
