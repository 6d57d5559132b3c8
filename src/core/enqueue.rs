//! Validating and inserting runs: an [`EnqueueRequest`] becomes a row ([`NewRun`]) only when
//! every field is valid and the args match the tool's schema, with the approval this process's
//! rules decide; the insert is one transaction (a batch's too). Background runs (from
//! `spawn_background` and Background-mode tools) are inserted under the per-session limit.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::Core;
// Re-exported so `core::enqueue::{EnqueueRequest, Enqueued}` keeps naming them.
use crate::error::StoreError;
use crate::error::{Error, InputError, Result};
use crate::ids::{RunId, validate_session};
pub use crate::run::request::{EnqueueRequest, Enqueued};
use crate::run::{Inserted, NewRun, Unique, UniqueCheck, unique_key};
use crate::store::{LimitedInsert, RunApprove, RunInsertLimited};
use crate::tool::builtin::spawn_background::run_limit_message;

impl Core {
    /// Validates a request into a row to insert; writes nothing.
    pub fn prepare(&self, req: &EnqueueRequest) -> Result<NewRun, InputError> {
        self.prepare_owned(req.clone(), self.now())
    }

    /// [`Core::prepare`] taking the request: its args and strings move into the row instead
    /// of being copied (the copies were 6 % of a batch enqueue's instructions). `now` is the
    /// creation time (and the due time unless the request names one).
    fn prepare_owned(&self, req: EnqueueRequest, now: DateTime<Utc>) -> Result<NewRun, InputError> {
        validate_session(&req.session)?;
        let entry = self.registry().validate(&req.tool, &req.args)?;
        check_priority(req.priority)?;
        check_run_at(req.run_at)?;
        // The run's own count wins; else its tool's retry policy (`[limits.NAME]`/`[tools.NAME]`),
        // else `runs.max_attempts`. Resolved here, so a schedule keeps the count it was made with.
        let max_attempts = req
            .max_attempts
            .unwrap_or_else(|| self.config().retry_policy(&req.tool).max_attempts);
        check_max_attempts(max_attempts)?;
        let timeout_ms = timeout_ms(req.timeout)?;
        check_idempotency_key(req.idempotency_key.as_deref())?;
        if let Some(tp) = &req.traceparent {
            crate::trace::traceparent::check("traceparent", tp)?;
        }
        // Built by `--tag` parsing they are checked already; a library caller's or a
        // deserialized map is not.
        req.tags.validate()?;
        let title = title_of(req.title, &entry.def.display_name)?;
        let unique = req
            .unique
            .as_ref()
            .map(|u| unique_check(u, &req.tool, &req.args, now))
            .transpose()?;
        // Encoded here rather than in the store, so the write transaction only binds text
        // (a batch's encoding was ~5 % of its instructions inside the transaction).
        let args = crate::run::encode_args(&req.args)?;
        if (!req.after.is_empty() || !req.after_requests.is_empty()) && req.run_at.is_some() {
            return Err(InputError::new(
                "after",
                req.after
                    .first()
                    .map(|p| p.as_str())
                    .unwrap_or("an earlier request"),
                "a run that waits for parents starts when they end; it cannot also name a start time (--at, --in)",
            ));
        }
        let mut after = req.after;
        let mut seen = std::collections::HashSet::new();
        after.retain(|p| seen.insert(p.clone()));
        let mut row = NewRun {
            id: RunId::generate(),
            session_id: req.session,
            tool: req.tool,
            args,
            title,
            priority: req.priority,
            max_attempts,
            run_at: req.run_at.unwrap_or(now),
            created_at: now,
            idempotency_key: req.idempotency_key,
            timeout_ms,
            signal_on_completion: req.signal_on_completion,
            delivery: req.delivery,
            schedule_id: None,
            fire_at: None,
            ticks: 1,
            unique,
            approval: None,
            batch_id: req.batch,
            parent_run_id: req.parent,
            after,
            after_mode: if req.after_any {
                crate::run::DepMode::Any
            } else {
                crate::run::DepMode::All
            },
            tags: req.tags,
            traceparent: req.traceparent,
        };
        crate::run::composition::check_parents(&row.id, &row.after)?;
        block_until_resolved(&mut row);
        // This process's rules decide whether the run waits for approval from its creation.
        row.approval = crate::approval::pending_for(self.approval_rules(), &row, &req.args);
        drop(req.args);
        Ok(row)
    }

    /// Validates and inserts one run. Bad input writes nothing; a known idempotency key
    /// returns the existing run.
    pub async fn enqueue(&self, req: EnqueueRequest) -> Result<Enqueued> {
        let mut row = self.prepare_owned(req, self.now())?;
        let span = trace_enqueue(std::slice::from_mut(&mut row));
        let inserted = self
            .engine()
            .run_insert(vec![row])
            .await
            .map_err(|e| key_conflict(e, ""))?;
        span.end();
        self.wake_workers();
        inserted.into_iter().map(to_enqueued).next().ok_or_else(|| {
            Error::Store(StoreError::Invalid(
                "an insert of one run returned none".into(),
            ))
        })
    }

    /// Validates every request first, then inserts all of them in one transaction, or none.
    /// An error names the request's index (`request 3: ...`). The runs of a batch share one
    /// creation time, the instant of the call, as they share its transaction; their ids keep
    /// the order of `reqs`.
    pub async fn enqueue_batch(&self, reqs: Vec<EnqueueRequest>) -> Result<Vec<Enqueued>> {
        let mut rows = self.prepare_many(reqs, self.now())?;
        let span = trace_enqueue(&mut rows);
        let inserted = self
            .engine()
            .run_insert(rows)
            .await
            .map_err(|e| key_conflict(e, "batch"))?;
        span.end();
        self.wake_workers();
        Ok(inserted.into_iter().map(to_enqueued).collect())
    }

    /// Validates every request of one call at `now` (one instant also lets the insert bind
    /// it once for many rows, `runs::Shared`); an error names the request's index. Each
    /// request's `after_requests` become its rows' parents, and a cycle among them is
    /// refused, naming the requests on it.
    pub(crate) fn prepare_many(
        &self,
        reqs: Vec<EnqueueRequest>,
        now: DateTime<Utc>,
    ) -> Result<Vec<NewRun>, InputError> {
        let links: Vec<Vec<usize>> = reqs.iter().map(|r| r.after_requests.clone()).collect();
        let mut rows = reqs
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                self.prepare_owned(r, now)
                    .map_err(|e| e.within(&format!("request {}: ", i + 1)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if links.iter().all(Vec::is_empty) {
            return Ok(rows);
        }
        crate::run::composition::check_request_links(&links)?;
        for (i, parents) in links.iter().enumerate() {
            for &j in parents {
                let id = rows[j].id.clone();
                if !rows[i].after.contains(&id) {
                    rows[i].after.push(id);
                }
            }
            let (id, after) = (&rows[i].id, &rows[i].after);
            crate::run::composition::check_parents(id, after)
                .map_err(|e| e.within(&format!("request {}: ", i + 1)))?;
            block_until_resolved(&mut rows[i]);
        }
        Ok(rows)
    }

    /// Inserts `row` as a background run of its session under the per-session limit (unless
    /// `[sessions] queue_beyond_limit`): the id, the seed's message when the session is at its
    /// limit, or the storage error. Count and insert are one write transaction, so two calls
    /// cannot both take the last slot. `except` is the calling run (not counted); `approval` a
    /// host's approval, recorded before the run is queued. spawn_background and
    /// Background-mode tools called through the executor both insert through this, so they
    /// meet the same limits; the per-worker limit is the claim's (a worker runs at most that
    /// many background runs at once). Wakes this process's workers when it inserted.
    pub async fn insert_background(
        &self,
        mut row: NewRun,
        except: Option<String>,
        approval: Option<RunApprove>,
    ) -> Result<Result<RunId, String>, StoreError> {
        let limits = &self.config().sessions;
        let limit = (!limits.queue_beyond_limit).then_some(limits.max_active_runs);
        // Under the calling tool's execute span, when a tool enqueues.
        let span = trace_enqueue(std::slice::from_mut(&mut row));
        let done = self
            .engine()
            .run_insert_within_limit(RunInsertLimited {
                run: row,
                except,
                limit,
                now: self.now(),
                approval,
            })
            .await?;
        span.end();
        Ok(match done {
            LimitedInsert::Inserted(i) => {
                self.wake_workers();
                Ok(i.id().clone())
            }
            LimitedInsert::OverSession(max) => Err(run_limit_message(max)),
        })
    }
}

/// Starts the `toolq.enqueue` span of `rows` (one span per call, also for a batch) under the
/// caller's context: the first row's traceparent, else the current OpenTelemetry context (a
/// library caller's span, or the execute span of a tool that enqueues). Each row that named
/// the same parent (or none) stores the span's own context, so its worker spans hang under
/// it. Tracing off: returns at once, and rows keep the traceparent they were given.
fn trace_enqueue(rows: &mut [NewRun]) -> crate::trace::Span {
    use crate::trace::{Parent, Span, names};
    use opentelemetry::KeyValue;
    let view: &[NewRun] = rows;
    let given = view.first().and_then(|r| r.traceparent.as_deref());
    let parent = match given {
        Some(tp) => Parent::Traceparent(Some(tp)),
        None => Parent::Current,
    };
    let span = Span::start(names::ENQUEUE, parent, None, || match view {
        [one] => vec![
            KeyValue::new("run.id", one.id.to_string()),
            KeyValue::new("tool", one.tool.clone()),
            KeyValue::new("session", one.session_id.clone()),
        ],
        many => vec![KeyValue::new("runs", many.len() as i64)],
    });
    let Some(own) = span.traceparent() else {
        return span;
    };
    let given = rows.first().and_then(|r| r.traceparent.clone());
    for r in rows.iter_mut().filter(|r| r.traceparent == given) {
        r.traceparent = Some(own.clone());
    }
    span
}

fn check_priority(priority: i64) -> Result<(), InputError> {
    if !(-1_000_000..=1_000_000).contains(&priority) {
        return Err(InputError::new(
            "priority",
            priority.to_string(),
            "must be between -1000000 and 1000000",
        ));
    }
    Ok(())
}

fn check_run_at(run_at: Option<DateTime<Utc>>) -> Result<(), InputError> {
    if let Some(at) = run_at
        && !(crate::clock::earliest()..=crate::clock::latest()).contains(&at)
    {
        return Err(InputError::new(
            "run_at",
            at.to_rfc3339(),
            "must be between the years 1 and 9999",
        ));
    }
    Ok(())
}

fn check_max_attempts(max_attempts: i64) -> Result<(), InputError> {
    if !(1..=1000).contains(&max_attempts) {
        return Err(InputError::new(
            "max_attempts",
            max_attempts.to_string(),
            "must be between 1 and 1000",
        ));
    }
    Ok(())
}

/// A run's own timeout as stored: whole milliseconds, from 1ms to 7 days.
fn timeout_ms(timeout: Option<Duration>) -> Result<Option<i64>, InputError> {
    match timeout {
        Some(t) if t.is_zero() => Err(InputError::new(
            "timeout",
            "0s",
            "must be greater than zero",
        )),
        // Stored in whole milliseconds: less would be stored as no time at all.
        Some(t) if t < Duration::from_millis(1) => Err(InputError::new(
            "timeout",
            crate::clock::format_duration(t),
            "must be at least 1ms",
        )),
        Some(t) if t > Duration::from_secs(7 * 86_400) => Err(InputError::new(
            "timeout",
            crate::clock::format_duration(t),
            "must be at most 7 days",
        )),
        Some(t) => Ok(Some(t.as_millis() as i64)),
        None => Ok(None),
    }
}

fn check_idempotency_key(key: Option<&str>) -> Result<(), InputError> {
    if let Some(key) = key
        && (key.is_empty() || key.chars().count() > 200)
    {
        return Err(InputError::new(
            "idempotency_key",
            key,
            "must be 1 to 200 characters",
        ));
    }
    Ok(())
}

/// The run's title: the request's (not blank, at most 500 characters), else the tool's name.
fn title_of(title: Option<String>, display_name: &str) -> Result<String, InputError> {
    match title {
        Some(t) if t.trim().is_empty() => Err(InputError::new("title", t, "must not be blank")),
        Some(t) if t.chars().count() > 500 => {
            Err(InputError::new("title", t, "is longer than 500 characters"))
        }
        Some(t) => Ok(t),
        None => Ok(display_name.to_string()),
    }
}

/// The store's check for a unique enqueue; the states must be given and the period positive.
fn unique_check(
    u: &Unique,
    tool: &str,
    args: &Value,
    now: DateTime<Utc>,
) -> Result<UniqueCheck, InputError> {
    if u.states.is_empty() {
        return Err(InputError::about(
            "unique_states",
            "must name at least one state",
        ));
    }
    let since = match u.within {
        None => None,
        Some(d) if d.is_zero() => {
            return Err(InputError::new(
                "unique_for",
                "0s",
                "must be greater than zero",
            ));
        }
        Some(d) => Some(
            chrono::Duration::from_std(d)
                .ok()
                .and_then(|d| now.checked_sub_signed(d))
                .ok_or_else(|| {
                    InputError::new(
                        "unique_for",
                        crate::clock::format_duration(d),
                        "is too long",
                    )
                })?,
        ),
    };
    let mut states = u.states.clone();
    states.sort_by_key(|s| s.as_str());
    states.dedup();
    Ok(UniqueCheck {
        key: match u.by {
            crate::run::UniqueBy::Args => unique_key(tool, args),
        },
        states,
        since,
    })
}

/// An idempotency key naming a run with other args is the caller's input error; in a batch
/// it names the request (`request 3: `), like the other input errors of a batch.
fn key_conflict(e: StoreError, batch: &str) -> Error {
    match e {
        StoreError::KeyConflict {
            index,
            key,
            run,
            what,
        } => {
            let field = if batch.is_empty() {
                "idempotency key".to_string()
            } else {
                format!("request {}: idempotency key", index + 1)
            };
            Error::Input(InputError::new(
                field,
                key,
                format!("already names run {run} with {what}"),
            ))
        }
        e => Error::Store(e),
    }
}

/// A run with parents is inserted at the far-future `run_at`: no claim can take it before the
/// insert's transaction has read its parents (which releases it at once when they completed).
/// Inserted due and then blocked, its first version would leave Postgres a dead index entry
/// among the runnable runs until vacuum, which every claim walked past (a drain beside 100,000
/// blocked runs ran at 0.06x).
fn block_until_resolved(row: &mut NewRun) {
    if !row.after.is_empty() {
        row.run_at = crate::run::steps::far_future();
    }
}

pub(crate) fn to_enqueued(i: Inserted) -> Enqueued {
    match i {
        Inserted::New(run_id) => Enqueued {
            run_id,
            created: true,
        },
        Inserted::Existing(run_id) => Enqueued {
            run_id,
            created: false,
        },
    }
}
