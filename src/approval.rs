//! Approvals: a run of a tool that requires approval waits in `awaiting_approval` with an
//! `approval_request` inbox message from its creation (enqueue, batch, `spawn_background`, a
//! schedule's fire: [`pending_for`]; a worker still holds a queued run that its own rules gate,
//! [`gate_of`]); an operator approves it (queued again, then executed),
//! denies it (cancelled with a message), or its deadline passes (cancelled as expired).
//! Decision, actor, time and note stay on the run. Everything is in the database, so it
//! survives restarts.

use chrono::{DateTime, Utc};

use crate::client::{Client, about_of};
use crate::clock::ts;
use crate::inbox::{About, approval_message};
use crate::run::{Fence, FinishRecord, Outcome};
use crate::run::{NewRun, PendingApproval, Run};
use crate::tool::ToolPolicy;
use crate::worker::finish::blank;
use serde_json::Value;

/// Whether runs of `tool` need an operator's approval under `client`'s rules (the tool's
/// policy, a command tool's `requires_approval`, `[approvals] require`), and then how long
/// an approval may take (`None`: no deadline). `None` for a tool `client` does not know.
fn requirement(client: &Client, tool: &str) -> Option<Option<std::time::Duration>> {
    let entry = client.registry().get(tool)?;
    let cfg = &client.config().approvals;
    let required =
        entry.def.policy == ToolPolicy::RequiresApproval || cfg.require.iter().any(|t| t == tool);
    required.then(|| entry.def.approval_deadline.or(cfg.deadline))
}

/// The instant an approval asked for at `from` expires. A deadline past the last storable
/// instant is no deadline.
fn deadline_from(after: Option<std::time::Duration>, from: DateTime<Utc>) -> Option<DateTime<Utc>> {
    after
        .and_then(|d| chrono::Duration::from_std(d).ok())
        .and_then(|d| from.checked_add_signed(d))
        .filter(|t| *t <= crate::clock::latest())
}

/// Whether a claimed run must first wait for approval, and until when. `None`: run it.
/// A run approved once is not asked again (e.g. on retry); a denied one that is retried is.
///
/// Runs are gated when they are created ([`pending_for`]); this is the worker's safety net
/// for a run stored `queued` without that decision: one enqueued by an older toolq, or by a
/// process whose rules did not require approval while this worker's do (the stricter of
/// the two configurations wins).
pub fn gate_of(client: &Client, run: &Run, now: DateTime<Utc>) -> Option<Option<DateTime<Utc>>> {
    if run.approval_state.as_deref() == Some("approved") {
        return None;
    }
    requirement(client, &run.tool).map(|after| deadline_from(after, now))
}

/// Whether a run about to be created must wait for approval under the creating process's
/// rules (`client`'s configuration and registry), and then what it is stored with: its
/// deadline, counted from its creation, and its `approval_request` message (attempt 0),
/// shaped by the tool's formatter. `args` are the run's arguments as given.
pub fn pending_for(client: &Client, run: &NewRun, args: &Value) -> Option<PendingApproval> {
    let after = requirement(client, &run.tool)?;
    let deadline = deadline_from(after, run.created_at);
    let about = About {
        run_id: &run.id,
        session_id: &run.session_id,
        title: &run.title,
        tool: &run.tool,
        attempt: 0,
        delivery: run.delivery,
    };
    Some(pending(client, &about, args, deadline))
}

/// Whether a failed or cancelled run that is being retried must wait for approval again
/// under `client`'s rules, and then what it is stored with (deadline counted from `now`, a
/// new `approval_request` message for its current attempt). A run approved once is not
/// asked again.
pub fn pending_for_retry(
    client: &Client,
    run: &Run,
    now: DateTime<Utc>,
) -> Option<PendingApproval> {
    if run.approval_state.as_deref() == Some("approved") {
        return None;
    }
    let deadline = deadline_from(requirement(client, &run.tool)?, now);
    Some(pending(client, &about_of(run), &run.args, deadline))
}

/// A pending approval with its `approval_request` message, shaped by the tool's formatter.
fn pending(
    client: &Client,
    about: &About<'_>,
    args: &Value,
    deadline: Option<DateTime<Utc>>,
) -> PendingApproval {
    let mut message = approval_message(about, args, deadline.map(ts).as_deref());
    if let Some(entry) = client.registry().get(about.tool) {
        entry.format_message(&mut message);
    }
    let message_data = message.data.to_string();
    PendingApproval {
        deadline,
        message,
        message_data,
    }
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
