//! Approvals: a run of a tool that requires approval waits in `awaiting_approval` with an
//! `approval_request` inbox message; an operator approves it (queued again, then executed),
//! denies it (cancelled with a message), or its deadline passes (cancelled as expired).
//! Decision, actor, time and note stay on the run. Everything is in the database, so it
//! survives restarts.

use chrono::{DateTime, Utc};

use crate::client::{Client, about_of};
use crate::clock::ts;
use crate::inbox::approval_message;
use crate::run::Run;
use crate::run::{Fence, FinishRecord, Outcome};
use crate::tool::ToolPolicy;
use crate::worker::finish::blank;

/// Whether a claimed run must first wait for approval, and until when. `None`: run it.
/// A run approved once is not asked again (e.g. on retry); a denied one that is retried is.
pub fn gate_of(client: &Client, run: &Run, now: DateTime<Utc>) -> Option<Option<DateTime<Utc>>> {
    if run.approval_state.as_deref() == Some("approved") {
        return None;
    }
    let entry = client.registry().get(&run.tool)?;
    let cfg = &client.config().approvals;
    let required =
        entry.def.policy == ToolPolicy::RequiresApproval || cfg.require.contains(&run.tool);
    if !required {
        return None;
    }
    let after = entry.def.approval_deadline.or(cfg.deadline);
    // A deadline past the last storable instant is no deadline.
    Some(
        after
            .and_then(|d| chrono::Duration::from_std(d).ok())
            .and_then(|d| now.checked_add_signed(d))
            .filter(|t| *t <= crate::clock::latest()),
    )
}

/// The records that move a claimed run to `awaiting_approval` (fenced by its lease) and post
/// its approval request. Pure.
pub fn await_approval(run: &Run, deadline: Option<DateTime<Utc>>) -> FinishRecord {
    let about = about_of(run);
    let mut rec = blank(
        run,
        Fence::Lease(run.lease_token.clone().unwrap_or_default()),
    );
    rec.outcome = Outcome::AwaitApproval { deadline };
    rec.status_text = Some("awaiting approval".into());
    rec.message = Some(approval_message(
        &about,
        &run.args,
        deadline.map(ts).as_deref(),
    ));
    rec
}
