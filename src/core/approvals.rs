//! Expiring approvals whose deadline passed: each an end through [`Core::waiting_end`].

use super::Core;
use crate::error::Result;
use crate::run::ending::WaitingEnd;

impl Core {
    /// Cancels, as expired, every awaiting run whose approval deadline has passed; returns
    /// how many. The worker calls this on every heartbeat.
    pub async fn expire_approvals(&self) -> Result<usize> {
        let now = self.now();
        let runs = self.engine().run_list_overdue_approvals(now, 500).await?;
        if runs.is_empty() {
            return Ok(0);
        }
        let records = runs
            .into_iter()
            .map(|r| self.waiting_end(&r, WaitingEnd::Expired))
            .collect();
        let applied = self.record_ends(records).await?;
        Ok(applied.into_iter().filter(|&ok| ok).count())
    }
}
