//! Approvals: a run of a tool that requires approval waits in `awaiting_approval` with an
//! `approval_request` inbox message from its creation (enqueue, batch, `spawn_background`, a
//! schedule's fire: [`pending_for`]; a worker still holds a queued run that its own rules gate,
//! [`gate_of`]); an operator approves it (queued again, then executed),
//! denies it (cancelled with a message), or its deadline passes (cancelled as expired).
//! Decision, actor, time and note stay on the run. Everything is in the database, so it
//! survives restarts.

use chrono::{DateTime, Utc};

use crate::clock::ts;
use crate::config::Config;
use crate::inbox::{About, approval_message};
use crate::run::ending::blank;
use crate::run::{Fence, FinishRecord, Outcome};
use crate::run::{NewRun, PendingApproval, Run};
use crate::tool::{Registry, ToolPolicy};
use serde_json::Value;

/// Whether runs of `tool` need an operator's approval under `rules` (the tool's
/// policy, a command tool's `requires_approval`, `[approvals] require`), and then how long
/// an approval may take (`None`: no deadline). `None` for a tool `rules` do not know.
/// One process's approval rules: its tools' policies and its `[approvals]` section. Approval
/// is decided by the process that creates, retries or claims a run.
#[derive(Clone, Copy)]
pub struct Rules<'a> {
    /// The process's tools.
    pub registry: &'a Registry,
    /// Its configuration (`[approvals]`).
    pub config: &'a Config,
}

fn requirement(rules: Rules<'_>, tool: &str) -> Option<Option<std::time::Duration>> {
    let entry = rules.registry.get(tool)?;
    let cfg = &rules.config.approvals;
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
pub fn gate_of(rules: Rules<'_>, run: &Run, now: DateTime<Utc>) -> Option<Option<DateTime<Utc>>> {
    if run.approval_state.as_deref() == Some("approved") {
        return None;
    }
    requirement(rules, &run.tool).map(|after| deadline_from(after, now))
}

/// Whether a run about to be created must wait for approval under the creating process's
/// rules (`rules`: configuration and registry), and then what it is stored with: its
/// deadline, counted from its creation, and its `approval_request` message (attempt 0),
/// shaped by the tool's formatter. `args` are the run's arguments as given.
pub fn pending_for(rules: Rules<'_>, run: &NewRun, args: &Value) -> Option<PendingApproval> {
    let after = requirement(rules, &run.tool)?;
    let deadline = deadline_from(after, run.created_at);
    let about = About {
        run_id: &run.id,
        session_id: &run.session_id,
        title: &run.title,
        tool: &run.tool,
        attempt: 0,
        delivery: run.delivery,
    };
    Some(pending(rules, &about, args, deadline))
}

/// Whether a failed or cancelled run that is being retried must wait for approval again
/// under `rules`, and then what it is stored with (deadline counted from `now`, a
/// new `approval_request` message for its current attempt). A run approved once is not
/// asked again.
pub fn pending_for_retry(
    rules: Rules<'_>,
    run: &Run,
    now: DateTime<Utc>,
) -> Option<PendingApproval> {
    if run.approval_state.as_deref() == Some("approved") {
        return None;
    }
    let deadline = deadline_from(requirement(rules, &run.tool)?, now);
    Some(pending(rules, &run.about(), &run.args, deadline))
}

/// A pending approval with its `approval_request` message, shaped by the tool's formatter.
fn pending(
    rules: Rules<'_>,
    about: &About<'_>,
    args: &Value,
    deadline: Option<DateTime<Utc>>,
) -> PendingApproval {
    let mut message = approval_message(about, args, deadline.map(ts).as_deref());
    if let Some(entry) = rules.registry.get(about.tool) {
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
    let about = run.about();
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
