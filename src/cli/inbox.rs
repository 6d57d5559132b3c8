//! `toolq inbox SESSION`: a session's messages, oldest first.

use super::{Ctx, render};
use crate::error::Result;
use crate::store::inbox::InboxFilter;

/// Flags of `inbox`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session.
    pub session: String,
    /// Only messages not yet acknowledged.
    #[arg(long)]
    pub unread: bool,
    /// Acknowledge the messages shown.
    #[arg(long)]
    pub ack: bool,
    /// At most this many.
    #[arg(long, default_value_t = 100)]
    pub limit: i64,
}

/// Lists (and optionally acknowledges) messages.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    let msgs = ctx
        .client
        .inbox(
            &args.session,
            InboxFilter {
                after_id: 0,
                unacked_only: args.unread,
                limit: args.limit.clamp(1, 100_000),
            },
        )
        .await?;
    if args.ack && !msgs.is_empty() {
        ctx.client
            .mark_inbox(&args.session, msgs.iter().map(|m| m.id).collect(), true)
            .await?;
    }
    if ctx.json {
        render::json(&msgs);
        return Ok(());
    }
    if msgs.is_empty() {
        render::note(&format!(
            "no {}messages for session {}",
            if args.unread { "unacknowledged " } else { "" },
            args.session
        ));
    }
    for m in &msgs {
        let ack = m
            .acked_at
            .as_deref()
            .map_or(String::new(), |a| format!(", acked {a}"));
        render::line(&format!(
            "#{} {} {} ({}{})",
            m.id, m.created_at, m.kind, m.delivery, ack
        ));
        render::line(&m.body);
        render::line("");
    }
    if args.ack && !msgs.is_empty() {
        render::note(&format!("acknowledged {} messages", msgs.len()));
    }
    Ok(())
}
