//! The one place that turns a decided end into what the engine writes. Every end of a run is
//! decided (purely) elsewhere: [`crate::run::ending::decide_waiting`] for a run that is not
//! running, the worker's attempt decision, its rescue, the approval hold. Each goes through
//! [`Core::finish_record`] here: the tool's formatter shapes the message text (if the tool is
//! known to this process), and the message data is encoded before the write transaction, so
//! the end-writer of either engine binds text only.

use crate::error::Result;
use crate::run::FinishRecord;
use crate::run::Run;
use crate::run::ending::{WaitingEnd, decide_waiting};

use super::Core;

impl Core {
    /// Makes a decided end final for the end-writer: its tool's message formatter, then its
    /// message data encoded. Every end passes here exactly once.
    pub fn finish_record(&self, tool: &str, mut record: FinishRecord) -> FinishRecord {
        if let (Some(m), Some(e)) = (record.message.as_mut(), self.registry().get(tool)) {
            e.format_message(m);
        }
        record.encode_message();
        record
    }

    /// The end of a run that is not running (cancelled while waiting, denied, expired), made
    /// final: [`decide_waiting`], then [`Core::finish_record`].
    pub fn waiting_end(&self, run: &Run, end: WaitingEnd) -> FinishRecord {
        self.finish_record(&run.tool, decide_waiting(run, end))
    }

    /// Records ends of runs (already final, see [`Core::finish_record`]) through the one
    /// end-writer ([`crate::store::Engine::run_end`]) in one transaction. Returns, per record,
    /// whether it applied (its fence still held).
    pub async fn record_ends(&self, records: Vec<FinishRecord>) -> Result<Vec<bool>> {
        Ok(self.engine().run_end(records, self.now()).await?)
    }
}
