//! Reads the web dashboard needs beyond the CLI's: keyset pages of runs newest first,
//! finished runs per time bucket, and the messages about one run.

use chrono::{DateTime, Utc};

use crate::client::Client;
use crate::error::{InputError, Result};
use crate::ids::RunId;
use crate::inbox::Message;
use crate::run::{Run, RunFilter};
use crate::store::{FinishedBucket, RunPage};

impl Client {
    /// Up to `limit` (1-1000) runs `filter` matches, newest first, starting after `before`
    /// (a run id from the previous page; `None` for the first page).
    pub async fn runs_page(
        &self,
        filter: &RunFilter,
        before: Option<&RunId>,
        limit: i64,
    ) -> Result<Vec<Run>> {
        if !(1..=1000).contains(&limit) {
            return Err(
                InputError::new("limit", limit.to_string(), "must be between 1 and 1000").into(),
            );
        }
        let p = RunPage {
            filter: filter.clone(),
            before: before.map(|id| id.to_string()),
            limit,
        };
        Ok(self.engine().run_page(p).await?)
    }

    /// Runs finished at or after `since`, per final state and bucket of `bucket_secs`
    /// seconds (bucket 0 starts at `since`).
    pub async fn finished_buckets(
        &self,
        since: DateTime<Utc>,
        bucket_secs: i64,
    ) -> Result<Vec<FinishedBucket>> {
        Ok(self
            .engine()
            .run_finished_buckets(since, bucket_secs.max(1))
            .await?)
    }

    /// The inbox messages about one run, oldest first (at most 100).
    pub async fn run_messages(&self, id: &RunId) -> Result<Vec<Message>> {
        Ok(self.engine().inbox_of_run(id.clone(), 100).await?)
    }
}
