//! What the end-writer writes for each end, the same on every engine: the columns of its
//! fenced state change, and, for the ends that applied, the blobs (log, result, extras) and
//! the inbox message. Each engine's `finish.rs` binds these to its own statements.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::clock::ts;
use crate::error::StoreError;
use crate::inbox::NewMessage;
use crate::run::{FinishRecord, Outcome, RunState};

/// The path of a run's log blob.
pub(crate) fn log_path(id: &str) -> String {
    format!("/.background/{id}/output.log")
}

/// The state change of a running attempt's end, as the columns it sets (timestamps as
/// stored text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StateChange<'a> {
    /// The new state.
    pub state: &'static str,
    /// A retry's `run_at`; `None` keeps it.
    pub run_at: Option<String>,
    /// `finished_at`: now, for a final state.
    pub finished_at: Option<String>,
    /// `pending` when the run now awaits approval.
    pub approval: Option<&'static str>,
    /// The approval deadline, if any.
    pub deadline: Option<String>,
    /// A suspension: what the run waits for (`wait_kind`; every other end clears it). A
    /// suspended run, like one held for approval, gives its attempt back (attempt - 1), so
    /// its next claim resumes the same attempt.
    pub wait_kind: Option<&'static str>,
    /// The event an event wait waits for (`wait_event`).
    pub wait_event: Option<&'a str>,
    /// 1 when the end is a snooze (`snoozes` + 1), else 0.
    pub snoozed: i64,
    /// The result it stores ([`result_of`]); `None` keeps the one stored.
    pub result: Option<Cow<'a, [u8]>>,
}

impl<'a> StateChange<'a> {
    /// The change `r`'s outcome makes when it ends at `now`.
    pub fn of(r: &'a FinishRecord, now: DateTime<Utc>) -> StateChange<'a> {
        let (mut wait_kind, mut wait_event, mut snoozed) = (None, None, 0);
        let (state, run_at, finished_at, approval, deadline) = match &r.outcome {
            Outcome::Final(s) => (s.as_str(), None, Some(ts(now)), None, None),
            Outcome::Retry(at) => ("queued", Some(ts(*at)), None, None, None),
            Outcome::AwaitApproval { deadline } => (
                "awaiting_approval",
                None,
                None,
                Some("pending"),
                deadline.map(ts),
            ),
            Outcome::Suspend(s) => {
                wait_kind = Some(s.kind.as_str());
                wait_event = s.event.as_deref();
                snoozed = i64::from(s.kind == crate::run::WaitKind::Snooze);
                ("queued", Some(ts(s.until)), None, None, None)
            }
        };
        StateChange {
            state,
            run_at,
            finished_at,
            approval,
            deadline,
            wait_kind,
            wait_event,
            snoozed,
            result: result_of(r),
        }
    }
}

/// The result an end stores in `runs.result` (shown as the blob `/.background/{id}/result.json`):
/// the tool's, else, for a final state without one, `{"status", "error"}`; `None` keeps the
/// result stored so far (a retry that brought none).
pub(crate) fn result_of(r: &FinishRecord) -> Option<Cow<'_, [u8]>> {
    match (&r.outcome, &r.result) {
        (_, Some(res)) => Some(Cow::Borrowed(res.as_slice())),
        (Outcome::Final(s), None) => Some(Cow::Owned(
            serde_json::json!({"status": s.as_str(), "error": r.error})
                .to_string()
                .into_bytes(),
        )),
        _ => None,
    }
}

/// The run whose result `path` names, when it is `/.background/{run_id}/result.json`: that
/// blob is the run's `result` column, not a blob row.
pub(crate) fn result_run(path: &str) -> Option<&str> {
    let id = path
        .strip_prefix("/.background/")?
        .strip_suffix("/result.json")?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

/// The entry `r` adds to the run's `errors` history, as JSON text.
pub(crate) fn error_entry(r: &FinishRecord) -> Option<String> {
    r.error_entry.as_ref().map(Value::to_string)
}

/// The end of a run that is not running (fenced by id, `expected` state and attempt), as the
/// values its statement binds, in order: state, finished_at, error, internal_error, errors
/// entry, approval state, by, note (the three `None` unless the end records an approval
/// decision), id, expected state, attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WaitingEnd<'a> {
    /// The final state.
    pub state: &'static str,
    /// `finished_at` (now).
    pub at: String,
    /// Error shown to the session.
    pub error: Option<&'a str>,
    /// Ops-only detail.
    pub internal_error: Option<&'a str>,
    /// The `errors` entry, as JSON text.
    pub entry: Option<String>,
    /// `denied` or `expired`, with who and why.
    pub approval: Option<&'static str>,
    /// Who decided.
    pub by: Option<&'a str>,
    /// Their note.
    pub note: Option<&'a str>,
    /// Run id.
    pub id: &'a str,
    /// The state the run must still be in.
    pub expected: &'static str,
    /// The attempt it must still be at.
    pub attempt: i64,
    /// The result it stores ([`result_of`]: a final state always has one).
    pub result: Option<Cow<'a, [u8]>>,
}

impl<'a> WaitingEnd<'a> {
    /// `r`'s end at `now`, fenced by `expected`: an error unless it ends in a final state
    /// (a run that is not running can end in no other).
    pub fn of(
        r: &'a FinishRecord,
        expected: RunState,
        now: DateTime<Utc>,
    ) -> Result<WaitingEnd<'a>, StoreError> {
        let Outcome::Final(state) = r.outcome else {
            return Err(StoreError::Invalid(format!(
                "run {}: a run that is not running can only end in a final state",
                r.id
            )));
        };
        let mark = r.approval.as_ref();
        Ok(WaitingEnd {
            state: state.as_str(),
            at: ts(now),
            error: r.error.as_deref(),
            internal_error: r.internal_error.as_deref(),
            entry: error_entry(r),
            approval: mark.map(|m| m.state),
            by: mark.map(|m| m.by.as_str()),
            note: mark.and_then(|m| m.note.as_deref()),
            id: r.id.as_str(),
            expected: expected.as_str(),
            attempt: r.attempt,
            result: result_of(r),
        })
    }
}

/// An event wait that suspends: the run is due at once if its event was stored before the
/// suspension committed (the signal found the run still running, so it could not wake it).
/// (run id, event name) for each such record.
pub(crate) fn event_waits<'a>(records: &[&'a FinishRecord]) -> Vec<(&'a str, &'a str)> {
    records
        .iter()
        .filter_map(|r| match &r.outcome {
            Outcome::Suspend(s) if s.kind == crate::run::WaitKind::Event => {
                Some((r.id.as_str(), s.event.as_deref()?))
            }
            _ => None,
        })
        .collect()
}

/// The records whose state change applied, in order.
pub(crate) fn applied_only<'a>(
    records: &[&'a FinishRecord],
    applied: &[bool],
) -> Vec<&'a FinishRecord> {
    records
        .iter()
        .zip(applied)
        .filter_map(|(r, &ok)| ok.then_some(*r))
        .collect()
}

/// A blob an end writes (or replaces).
#[derive(Debug, Clone)]
pub(crate) struct BlobRow<'a> {
    /// Owner session.
    pub session_id: &'a str,
    /// Its path.
    pub path: String,
    /// The run it belongs to.
    pub run_id: &'a str,
    /// The bytes.
    pub content: Cow<'a, [u8]>,
    /// Whether the content was cut at its cap.
    pub truncated: bool,
}

/// A final end's log that is empty (and not cut): no row is written for it, and a log an
/// earlier attempt (or an earlier part of this one) left is deleted, so that readers find no
/// row and show the finished run's log as empty (see `Client::log`).
#[derive(Debug, Clone)]
pub(crate) struct ClearedLog<'a> {
    /// Owner session.
    pub session_id: &'a str,
    /// The log's path.
    pub path: String,
    /// The attempt that ended.
    pub attempt: i64,
}

impl ClearedLog<'_> {
    /// Whether a row of a log that is not empty may be there: an earlier attempt's. A first
    /// attempt's log only grows (its progress flushes write the log so far; a suspension's
    /// log comes back on resume), so it left none.
    pub fn may_have_a_row(&self) -> bool {
        self.attempt > 1
    }
}

/// The blob rows and messages of the ends that applied, in record order: per record its log
/// (none for a final state whose log is empty: see [`ClearedLog`]; a final state that brought
/// no log keeps the log written so far, if any) and its extra blobs (its result goes in the
/// state change: [`result_of`]); and its message, with its `data` as JSON text
/// (encoded here when the record did not bring it encoded).
#[derive(Debug, Clone, Default)]
pub(crate) struct Artifacts<'a> {
    /// Blobs to write, in order (a path given twice keeps its last content).
    pub blobs: Vec<BlobRow<'a>>,
    /// Logs to delete if present: final ends whose log is empty.
    pub cleared_logs: Vec<ClearedLog<'a>>,
    /// Messages with their encoded `data`, in order (their ids follow it).
    pub messages: Vec<(&'a NewMessage, Cow<'a, str>)>,
}

impl<'a> Artifacts<'a> {
    /// What `records` (ends that applied) write besides their state change.
    pub fn of(records: &[&'a FinishRecord]) -> Artifacts<'a> {
        let mut out = Artifacts::default();
        for r in records {
            out.add(r);
        }
        out
    }

    fn add(&mut self, r: &'a FinishRecord) {
        let blob = |path: String, content: Cow<'a, [u8]>, truncated: bool| BlobRow {
            session_id: &r.session_id,
            path,
            run_id: r.id.as_str(),
            content,
            truncated,
        };
        let is_final = matches!(r.outcome, Outcome::Final(_));
        match &r.log {
            // An empty log costs no row: readers show a finished run without one as empty.
            Some((log, false)) if is_final && log.is_empty() => {
                self.cleared_logs.push(ClearedLog {
                    session_id: &r.session_id,
                    path: log_path(r.id.as_str()),
                    attempt: r.attempt,
                });
            }
            Some((log, cut)) => {
                self.blobs
                    .push(blob(log_path(r.id.as_str()), Cow::Borrowed(log), *cut));
            }
            None => {}
        }
        for (path, content) in &r.extra_blobs {
            self.blobs
                .push(blob(path.clone(), Cow::Borrowed(content.as_slice()), false));
        }
        if let Some(m) = &r.message {
            let data = match &r.message_data {
                Some(d) => Cow::Borrowed(d.as_str()),
                None => Cow::Owned(m.data.to_string()),
            };
            self.messages.push((m, data));
        }
    }

    /// The messages as the inbox writers take them.
    pub fn message_refs(&self) -> Vec<(&NewMessage, &str)> {
        self.messages
            .iter()
            .map(|(m, d)| (*m, d.as_ref()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn record(outcome: Outcome) -> FinishRecord {
        FinishRecord {
            id: crate::ids::RunId::from_db("r1".into()),
            session_id: "s".into(),
            attempt: 1,
            fence: crate::run::Fence::Lease("t".into()),
            outcome,
            error: Some("boom".into()),
            internal_error: None,
            error_entry: None,
            status_text: None,
            progress: None,
            output_tail: None,
            log: None,
            result: None,
            extra_blobs: vec![("/x".into(), b"x".to_vec())],
            message: None,
            message_data: None,
            approval: None,
            steps: Vec::new(),
            batch_id: None,
            parent_run_id: None,
        }
    }

    #[test]
    fn a_final_end_without_log_or_result_keeps_the_log_and_gets_a_status_result() {
        let r = record(Outcome::Final(RunState::Failed));
        let a = Artifacts::of(&[&r]);
        assert!(a.cleared_logs.is_empty());
        let paths: Vec<&str> = a.blobs.iter().map(|b| b.path.as_str()).collect();
        assert_eq!(paths, ["/x"]);
        let at = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        let change = StateChange::of(&r, at);
        assert_eq!(
            change.result.as_deref(),
            Some(&br#"{"error":"boom","status":"failed"}"#[..])
        );
        let waiting = WaitingEnd::of(&r, RunState::Queued, at).unwrap();
        assert_eq!(waiting.result, change.result);
    }

    #[test]
    fn a_final_end_with_an_empty_log_writes_no_log_row_and_clears_an_earlier_one() {
        let mut r = record(Outcome::Final(RunState::Completed));
        r.log = Some((Vec::new(), false));
        let a = Artifacts::of(&[&r]);
        assert_eq!(a.cleared_logs.len(), 1);
        assert_eq!(a.cleared_logs[0].path, "/.background/r1/output.log");
        // Only an earlier attempt can have left a log that is not empty.
        assert_eq!(a.cleared_logs[0].may_have_a_row(), r.attempt > 1);
        let mut again = r.clone();
        again.attempt = 2;
        assert!(Artifacts::of(&[&again]).cleared_logs[0].may_have_a_row());
        let paths: Vec<&str> = a.blobs.iter().map(|b| b.path.as_str()).collect();
        assert_eq!(paths, ["/x"]);
        // Cut at its cap, or not empty: written as before.
        for log in [(Vec::new(), true), (b"x".to_vec(), false)] {
            r.log = Some(log);
            let a = Artifacts::of(&[&r]);
            assert!(a.cleared_logs.is_empty());
            assert_eq!(a.blobs[0].path, "/.background/r1/output.log");
        }
    }

    #[test]
    fn only_a_result_path_names_a_run() {
        assert_eq!(result_run("/.background/bg_1/result.json"), Some("bg_1"));
        for other in [
            "/.background/bg_1/output.log",
            "/.background//result.json",
            "/.background/a/b/result.json",
            "/x/bg_1/result.json",
        ] {
            assert_eq!(result_run(other), None, "{other}");
        }
    }

    #[test]
    fn a_retry_writes_only_what_it_brought() {
        let at = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        let mut r = record(Outcome::Retry(at));
        r.log = Some((b"log".to_vec(), true));
        let a = Artifacts::of(&[&r]);
        assert!(a.cleared_logs.is_empty());
        assert_eq!(a.blobs.len(), 2);
        assert!(a.blobs[0].truncated);
        let s = StateChange::of(&r, at);
        assert_eq!((s.state, s.finished_at), ("queued", None));
        assert_eq!(
            s.result, None,
            "a retry without a result keeps the stored one"
        );
        assert_eq!(s.run_at.as_deref(), Some("2026-01-02T03:04:05.000Z"));
        assert!(WaitingEnd::of(&r, RunState::Queued, at).is_err());
    }
}
