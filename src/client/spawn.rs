//! [`Client::spawn_background`]: the built-in tool's contract, called directly by an agent host.

use crate::client::Client;
use crate::tool::builtin::SpawnBackground;
use crate::tool::{Tool, ToolContext, ToolOutcome};
use serde_json::Value;

impl Client {
    /// The narrow handle a tool gets from this client's queue (for a [`ToolContext`] built
    /// outside a worker).
    pub fn tool_host(&self) -> std::sync::Arc<dyn crate::tool::ToolHost> {
        std::sync::Arc::new(self.core().clone())
    }

    /// Calls `spawn_background` for `session` directly, as an agent host does when its session
    /// makes the tool call: same contract, messages and limits as the built-in tool, answered at
    /// once (the run it starts is executed by a worker). Nothing is written on a rejection.
    pub async fn spawn_background(&self, session: &str, args: Value) -> ToolOutcome {
        if let Err(e) = crate::ids::validate_session(session) {
            return ToolOutcome::tool_error(e.to_string());
        }
        let ctx = ToolContext {
            // Not a stored run: nothing is excluded from the session's active-run count.
            run_id: crate::ids::RunId::generate(),
            session_id: session.to_string(),
            title: "Spawn Background".into(),
            args,
            attempt: 1,
            sink: crate::tool::RunSink::new(crate::tool::sink::SinkLimits::default()),
            cancel: tokio_util::sync::CancellationToken::new(),
            stop: crate::tool::StopSignal::default(),
            operation_id: None,
            host: Some(self.tool_host()),
            clock: self.clock().clone(),
            durable: crate::tool::Durable::none(),
        };
        SpawnBackground.call(ctx).await
    }
}
