//! `toolq inbox SESSION`: a session's messages, newest first, a page at a time (`--before ID`
//! for older ones, `--after ID` for newer ones); `--follow` prints them oldest first and keeps
//! printing new messages as they arrive until interrupted.

use std::time::Duration;

use super::{Ctx, render};
use crate::error::{InputError, Result};
use crate::inbox::InboxFilter;
use crate::inbox::InboxPage;

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
    /// At most this many (a page).
    #[arg(long, default_value_t = 100)]
    pub limit: i64,
    /// Only messages older than this message id (the next page back).
    #[arg(long, value_name = "ID")]
    pub before: Option<i64>,
    /// Only messages newer than this message id: the --limit messages right after it.
    /// With --follow: start after it.
    #[arg(long, value_name = "ID")]
    pub after: Option<i64>,
    /// Print the messages oldest first, then keep printing new ones as they arrive (until
    /// Ctrl-C). With --json, one compact JSON object per line.
    #[arg(long, short = 'f', conflicts_with = "before")]
    pub follow: bool,
    /// Only what to deliver now, oldest first: interrupt and silent messages (and, with
    /// --idle, when_idle ones). A silent one (its delivery says so) goes into the model's
    /// context without starting a turn. Nothing is acknowledged without --ack.
    #[arg(long, conflicts_with_all = ["follow", "before", "after", "unread"])]
    pub deliverable: bool,
    /// With --deliverable: the session is idle (also deliver when_idle messages).
    #[arg(long, requires = "deliverable")]
    pub idle: bool,
}

/// `--deliverable`: what the session should be told now.
async fn deliverable(ctx: &Ctx, args: &Args) -> Result<()> {
    let activity = if args.idle {
        crate::client::SessionActivity::Idle
    } else {
        crate::client::SessionActivity::Busy
    };
    let mut msgs = ctx.client.deliverable(&args.session, activity).await?;
    msgs.truncate(usize::try_from(args.limit).unwrap_or(0));
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
            "nothing to deliver to session {} now",
            args.session
        ));
    }
    for m in &msgs {
        show(m);
    }
    Ok(())
}

/// How often `--follow` looks for new messages.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// Streams messages: everything after `after_id`, then new ones as they arrive.
async fn follow(ctx: &Ctx, args: &Args) -> Result<()> {
    let mut after_id = args.after.unwrap_or(0);
    loop {
        let msgs = ctx
            .client
            .inbox(
                &args.session,
                InboxFilter {
                    after_id,
                    unacked_only: args.unread,
                    limit: 1000,
                },
            )
            .await?;
        if let Some(last) = msgs.last() {
            after_id = last.id;
        }
        if args.ack && !msgs.is_empty() {
            ctx.client
                .mark_inbox(&args.session, msgs.iter().map(|m| m.id).collect(), true)
                .await?;
        }
        for m in &msgs {
            if ctx.json {
                match serde_json::to_string(m) {
                    Ok(s) => render::line(&s),
                    Err(e) => render::note(&format!("could not encode JSON: {e}")),
                }
            } else {
                show(m);
            }
        }
        // Nobody reads the output any more: stop following (and acknowledging).
        render::check()?;
        tokio::select! {
            _ = tokio::time::sleep(FOLLOW_EVERY) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

fn show(m: &crate::inbox::Message) {
    let ack = m
        .acked_at
        .as_deref()
        .map_or(String::new(), |a| format!(", acked {a}"));
    render::line(&format!(
        "#{} {} {} ({}{})",
        m.id, m.created_at, m.kind, m.delivery, ack
    ));
    render::line(&render::visible(&m.body));
    render::line("");
}

/// Lists (and optionally acknowledges) messages.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    // The session is the positional argument: name it as `--help` shows it, not as the
    // `--session` flag other commands have.
    crate::ids::validate_session(&args.session).map_err(|e| InputError {
        field: "SESSION".into(),
        ..e
    })?;
    if args.follow {
        return follow(ctx, &args).await;
    }
    if args.deliverable {
        return deliverable(ctx, &args).await;
    }
    let msgs = ctx
        .client
        .inbox_page(
            &args.session,
            InboxPage {
                after_id: args.after,
                before_id: args.before,
                unacked_only: args.unread,
                limit: args.limit,
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
    } else {
        print_page(&args, &msgs);
    }
    Ok(())
}

/// One page of messages, newest first, with a note when it is empty, when older ones
/// remain, and of what was acknowledged.
fn print_page(args: &Args, msgs: &[crate::inbox::Message]) {
    if msgs.is_empty() {
        let page = match (args.before, args.after) {
            (Some(b), _) => format!(" before #{b}"),
            (None, Some(a)) => format!(" after #{a}"),
            (None, None) => String::new(),
        };
        render::note(&format!(
            "no {}messages for session {}{page}",
            if args.unread { "unacknowledged " } else { "" },
            args.session
        ));
    }
    for m in msgs {
        show(m);
    }
    if args.after.is_none()
        && msgs.len() as i64 == args.limit
        && let Some(oldest) = msgs.last()
    {
        render::note(&format!(
            "(newest first; older messages: --before {})",
            oldest.id
        ));
    }
    if args.ack && !msgs.is_empty() {
        render::note(&format!("acknowledged {} messages", msgs.len()));
    }
}
