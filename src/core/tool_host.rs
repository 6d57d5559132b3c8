//! The core as a running tool's narrow handle ([`ToolHost`]).

use async_trait::async_trait;

use super::{Core, EnqueueRequest};
use crate::error::Result;
use crate::ids::RunId;
use crate::run::Run;
use crate::schedule::api::ScheduleRequest;
use crate::schedule::model::Schedule;
use crate::tool::{BackgroundRun, Refused, Registry, ToolHost};

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

    async fn create_schedule(&self, req: ScheduleRequest) -> Result<Schedule> {
        Core::create_schedule(self, req).await
    }

    async fn run(&self, id: &RunId) -> Result<Run> {
        self.get_run(id).await
    }
}
