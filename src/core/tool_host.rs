//! The core as a running tool's narrow handle ([`ToolHost`]).

use async_trait::async_trait;

use super::{Core, EnqueueRequest};
use crate::error::{Error, Result};
use crate::ids::RunId;
use crate::run::{Linked, LinkedResult, Run};
use crate::schedule::api::ScheduleRequest;
use crate::schedule::model::Schedule;
use crate::tool::{BackgroundRun, ChildRun, Refused, Registry, ToolHost};

#[async_trait]
impl ToolHost for Core {
    fn registry(&self) -> &Registry {
        Core::registry(self)
    }

    async fn start_background(
        &self,
        run: BackgroundRun,
        caller: &RunId,
    ) -> std::result::Result<RunId, Refused> {
        let mut req = EnqueueRequest::new(run.tool, run.args)
            .session(run.session)
            .title(run.title);
        req.signal_on_completion = run.signal_on_completion;
        req.delivery = run.delivery;
        req.parent = run.parent;
        req.tags = run.tags;
        let row = self
            .prepare(&req)
            .map_err(|e| Refused::Input(e.to_string()))?;
        match self
            .insert_background(row, Some(caller.to_string()), None)
            .await
        {
            Ok(Ok(id)) => Ok(id),
            Ok(Err(message)) => Err(Refused::Limit(message)),
            Err(e) => Err(Refused::Internal(e)),
        }
    }

    async fn start_child(&self, run: ChildRun) -> std::result::Result<RunId, Refused> {
        let mut req = EnqueueRequest::new(run.tool, run.args).session(run.session);
        req.parent = Some(run.parent);
        req.idempotency_key = Some(run.idempotency_key);
        // The parent reads its children's outcomes and reports: a fan-out of a thousand
        // children must not post a thousand messages to the session. The delivery stays the
        // default, so a child that needs approval still asks for it.
        req.signal_on_completion = false;
        match self.enqueue(req).await {
            Ok(e) => Ok(e.run_id),
            // Bad input (args, a key reused with other args) is the tool's own error.
            Err(e) if e.exit_code() == 2 => Err(Refused::Input(e.to_string())),
            Err(Error::Store(e)) => Err(Refused::Internal(e)),
            Err(e) => Err(Refused::Input(e.to_string())),
        }
    }

    async fn linked_results(&self, id: &RunId, which: Linked) -> Result<Vec<LinkedResult>> {
        Core::linked_results(self, id, which).await
    }

    async fn create_schedule(&self, req: ScheduleRequest) -> Result<Schedule> {
        Core::create_schedule(self, req).await
    }

    async fn run(&self, id: &RunId) -> Result<Run> {
        self.get_run(id).await
    }
}
