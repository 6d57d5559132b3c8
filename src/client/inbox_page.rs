//! [`Client::inbox_page`]: a session's inbox newest first, paged by message id.

use super::Client;
use crate::error::{InputError, Result};
use crate::ids::validate_session;
use crate::inbox::{InboxPage, Message};

impl Client {
    /// A page of a session's messages, newest first (see [`InboxPage`]): the newest ones,
    /// those before an id (older), or those right after an id (newer).
    pub async fn inbox_page(&self, session: &str, page: InboxPage) -> Result<Vec<Message>> {
        validate_session(session)?;
        if !(1..=100_000).contains(&page.limit) {
            return Err(InputError::new(
                "limit",
                page.limit.to_string(),
                "must be between 1 and 100000",
            )
            .into());
        }
        Ok(self.engine().inbox_page(session.to_string(), page).await?)
    }
}
