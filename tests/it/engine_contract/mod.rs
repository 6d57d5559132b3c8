//! The engine contract suite (issue 34, like River's `riverdrivertest`): every `Engine`
//! operation called directly, each test asserting the guarantee that docs/architecture.md's
//! operation tables give it (not only that it returns). `tests/postgres` re-runs this module,
//! so both engines are held to the same contract. Time comes from the test's `ManualClock`.
//!
//! `COVERED` names the test of every operation; `every_engine_operation_has_a_contract_test`
//! fails when `trait Engine` gains an operation without one.

mod attempts;
mod compose;
mod durable;
mod flow;
mod observe;
mod runs;
mod schedules;
mod workers;

use std::collections::BTreeSet;

use chrono::{DateTime, Duration, Utc};
use serde_json::json;
use toolq::inbox::{InboxFilter, Message, NewMessage};
use toolq::run::{Fence, FinishRecord, NewRun, Outcome};
use toolq::store::{Claim, Engine, WorkerRow};
use toolq::{Delivery, Run, RunId, RunState};

use crate::support::TestEnv;

/// Each operation of `trait Engine` and the test (`file::name`) that holds it to its contract.
#[rustfmt::skip]
const COVERED: &[(&str, &str)] = &[
    // runs
    ("run_insert", "runs::run_insert_is_all_or_none_and_a_known_key_returns_its_run"),
    ("run_insert", "runs::run_insert_with_approval_stores_it_awaiting_with_its_request"),
    ("run_insert", "runs::run_insert_with_unique_returns_the_matching_run"),
    ("run_insert_within_limit", "runs::run_insert_within_limit_counts_active_background_runs"),
    ("run_insert_preapproved", "runs::run_insert_preapproved_queues_it_approved"),
    ("run_get", "runs::run_get_and_run_list_read_newest_first_with_filters"),
    ("run_list", "runs::run_get_and_run_list_read_newest_first_with_filters"),
    ("run_cancel_request", "runs::run_cancel_request_sets_the_time_once_and_only_on_a_running_run"),
    ("run_retry", "runs::run_retry_only_from_the_expected_final_state"),
    ("run_select", "runs::run_select_pages_in_id_order_after_a_key"),
    ("run_count_where", "runs::run_count_where_counts_the_matches"),
    ("run_page", "runs::run_page_pages_newest_first_before_a_key"),
    ("run_finished_buckets", "runs::run_finished_buckets_counts_per_state_and_bucket"),
    ("run_cancel_many", "runs::run_cancel_many_ends_waiting_runs_and_asks_running_ones_to_stop"),
    ("run_retry_many", "runs::run_retry_many_applies_only_to_runs_still_in_their_read_state"),
    ("run_approve", "runs::run_approve_only_from_awaiting_and_keeps_a_delay"),
    ("run_list_overdue_approvals", "runs::run_list_overdue_approvals_oldest_deadline_first"),
    ("run_end", "runs::run_end_writes_state_blobs_and_one_message_once"),
    ("run_end", "runs::run_end_judges_each_record_by_its_own_fence"),
    ("run_end", "runs::run_end_with_an_empty_log_writes_no_log_row"),
    ("run_pending", "runs::run_pending_counts_due_runs_and_queued_retries_of_the_tools"),
    ("run_next_due", "runs::run_next_due_is_the_earliest_later_run_at_of_the_tools"),
    ("run_count_unfinished", "runs::run_count_unfinished_counts_queued_awaiting_and_running"),
    ("run_end", "durable::run_end_suspends_without_an_attempt_or_a_message_and_resumes_the_same_attempt"),
    ("run_end", "durable::run_end_suspending_for_an_event_already_sent_is_due_at_once"),
    // durable runs
    ("run_journal", "durable::run_journal_reads_steps_by_seq_and_events_oldest_first"),
    ("event_send", "durable::event_send_stores_the_first_delivery_and_wakes_a_run_waiting_for_it"),
    // composition
    ("batch_insert", "compose::batch_insert_is_all_or_none_and_the_last_end_completes_the_batch_once"),
    ("batch_get", "compose::batch_insert_is_all_or_none_and_the_last_end_completes_the_batch_once"),
    ("batch_list", "compose::batch_list_reads_newest_first_with_filters"),
    ("run_insert", "compose::run_insert_after_blocks_until_the_parent_completes_in_its_end_transaction"),
    ("run_end", "compose::run_end_of_a_failed_parent_cancels_its_dependents_with_one_message_each"),
    ("run_links", "compose::run_links_and_run_linked_results_read_a_spawning_run_and_its_children"),
    ("run_linked_results", "compose::run_links_and_run_linked_results_read_a_spawning_run_and_its_children"),
    ("prune_batch", "compose::prune_batch_removes_a_completed_batch_once_its_runs_are_gone"),
    // attempts (a worker's leases)
    ("attempt_claim", "attempts::attempt_claim_never_claims_a_run_twice"),
    ("attempt_claim", "attempts::attempt_claim_never_claims_a_run_twice_when_workers_race"),
    (
        "attempt_claim",
        "attempts::attempt_claims_at_once_over_many_sessions_each_fill_their_slots",
    ),
    ("attempt_claim", "attempts::attempt_claim_honours_per_session_over_all_workers"),
    ("attempt_claim", "attempts::attempt_claim_over_many_sessions_takes_priority_then_each_sessions_first"),
    ("attempt_claim", "attempts::attempt_claim_after_a_session_visits_the_later_ones_then_wraps_round_once"),
    ("attempt_claim", "attempts::attempt_claim_takes_priority_first_and_honours_max_running"),
    ("attempt_settle", "attempts::attempt_settle_ends_releases_and_claims_fenced"),
    ("attempt_settle", "durable::attempt_settle_saves_steps_only_under_the_lease"),
    ("attempt_settle", "durable::attempt_settle_writes_steps_before_a_release_of_the_same_attempt"),
    ("attempt_heartbeat", "attempts::attempt_heartbeat_extends_only_held_leases"),
    ("attempt_flush", "attempts::attempt_flush_writes_only_under_the_lease"),
    ("attempt_rescue", "attempts::attempt_rescue_takes_back_runs_of_dead_owners_once"),
    ("attempt_rescue", "attempts::attempt_rescue_takes_back_expired_leases_unless_told_not_to"),
    // flow control
    ("pause_set", "flow::pause_set_keeps_an_existing_pause_and_claims_skip_it"),
    ("pause_clear", "flow::pause_clear_returns_the_pause_it_lifted"),
    ("pause_list", "flow::pause_list_is_oldest_first"),
    ("limit_room", "flow::a_rate_limits_claims_and_the_limit_reads_agree"),
    ("limit_next_open", "flow::a_rate_limits_claims_and_the_limit_reads_agree"),
    ("limit_running", "flow::a_rate_limits_claims_and_the_limit_reads_agree"),
    // workers, inbox, blobs
    ("worker_register", "workers::worker_rows_register_list_and_deregister"),
    ("worker_deregister", "workers::worker_rows_register_list_and_deregister"),
    ("worker_deregister", "workers::worker_deregister_keeps_a_reason_already_set"),
    ("worker_list", "workers::worker_rows_register_list_and_deregister"),
    ("worker_overview", "workers::worker_overview_reads_workers_queue_and_schedules"),
    ("inbox_list", "workers::inbox_list_filters_after_an_id_and_unacked"),
    ("inbox_page", "workers::inbox_page_is_newest_first_before_or_after_an_id"),
    ("inbox_newest_id", "workers::inbox_newest_id_is_the_largest_id_of_any_session"),
    ("inbox_ids_in_commit_order", "workers::inbox_ids_are_in_commit_order_within_a_session_and_the_engine_says_if_across"),
    ("inbox_of_run", "workers::inbox_of_run_is_oldest_first"),
    ("inbox_deliverable", "workers::inbox_deliverable_returns_the_sessions_unacked_of_the_modes"),
    ("inbox_mark", "workers::inbox_mark_touches_only_the_sessions_own_messages"),
    ("blob_get", "workers::blob_get_returns_the_bytes_and_truncated_flag_of_the_session"),
    // schedules
    ("schedule_insert_within_limit", "schedules::schedule_insert_within_limit_holds_the_session_limit"),
    ("schedule_get", "schedules::schedule_reads_get_list_and_occurrences"),
    ("schedule_list", "schedules::schedule_reads_get_list_and_occurrences"),
    ("schedule_occurrences", "schedules::schedule_reads_get_list_and_occurrences"),
    ("schedule_cancel", "schedules::schedule_cancel_only_an_enabled_schedule"),
    ("schedule_disable", "schedules::schedule_disable_only_an_enabled_schedule_and_does_not_mark_it_cancelled"),
    ("schedule_enable_within_limit", "schedules::schedule_enable_within_limit_holds_the_session_limit"),
    ("schedule_next_due", "schedules::schedule_next_due_is_the_earliest_enabled_tick"),
    ("schedule_claim_due", "schedules::schedule_claim_due_fires_a_tick_once"),
    ("schedule_claim_due", "schedules::schedule_claim_due_records_a_paused_tick_and_gates_runs"),
    // retention, observation, upkeep
    ("prune_count", "observe::prune_removes_only_old_finished_runs_and_what_belongs_to_them"),
    ("prune_batch", "observe::prune_removes_only_old_finished_runs_and_what_belongs_to_them"),
    ("stats_read", "observe::stats_and_gauges_count_runs_by_state"),
    ("gauges_read", "observe::stats_and_gauges_count_runs_by_state"),
    ("check", "observe::check_finds_nothing_on_healthy_data"),
    ("info", "observe::info_and_process_counters_describe_the_engine"),
    ("location", "observe::info_and_process_counters_describe_the_engine"),
    ("size_bytes", "observe::info_and_process_counters_describe_the_engine"),
    ("busy_retries", "observe::info_and_process_counters_describe_the_engine"),
    ("write_stats", "observe::info_and_process_counters_describe_the_engine"),
    ("wal_health", "observe::upkeep_reports_the_log_or_zeros"),
    ("wal_bytes", "observe::upkeep_reports_the_log_or_zeros"),
    ("checkpoint", "observe::upkeep_reports_the_log_or_zeros"),
    ("change_feed", "observe::change_feed_calls_back_after_another_connection_commits"),
    ("message_feed", "observe::message_feed_calls_back_after_an_inbox_message_commits"),
];

#[test]
fn every_engine_operation_has_a_contract_test() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let trait_file = root.join("src/store/engine.rs");
    let text = std::fs::read_to_string(&trait_file).unwrap();
    let operations = trait_operations(&text);
    assert!(
        operations.len() > 50,
        "read only {operations:?} from {trait_file:?}"
    );
    let covered: BTreeSet<&str> = COVERED.iter().map(|(op, _)| *op).collect();
    let missing: Vec<&String> = operations
        .iter()
        .filter(|op| !covered.contains(op.as_str()))
        .collect();
    let stale: Vec<&&str> = covered
        .iter()
        .filter(|op| !operations.contains(**op))
        .collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "Engine operations without a contract test: {missing:?}; entries of COVERED that are \
         no operation any more: {stale:?}. Add a test to tests/it/engine_contract/ asserting the \
         operation's guarantee (docs/architecture.md, Operations) and list it in COVERED."
    );
    // Every test named exists in its file.
    let dir = root.join("tests/it/engine_contract");
    for (op, test) in COVERED {
        let (file, name) = test.split_once("::").unwrap();
        let source = std::fs::read_to_string(dir.join(format!("{file}.rs"))).unwrap();
        assert!(
            source.contains(&format!("async fn {name}(")),
            "COVERED names {test} for {op}, but {file}.rs has no such test"
        );
    }
    // ... and every test of the suite is listed, so the table stays the suite's index.
    let listed: BTreeSet<&str> = COVERED.iter().map(|(_, test)| *test).collect();
    for file in [
        "runs",
        "attempts",
        "flow",
        "workers",
        "schedules",
        "observe",
        "durable",
        "compose",
    ] {
        let source = std::fs::read_to_string(dir.join(format!("{file}.rs"))).unwrap();
        for test in source.split("#[tokio::test]\nasync fn ").skip(1) {
            let name: String = test
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let full = format!("{file}::{name}");
            assert!(listed.contains(full.as_str()), "{full} is not in COVERED");
        }
    }
}

/// The names of the `fn`s declared inside `trait Engine { … }`.
fn trait_operations(text: &str) -> BTreeSet<String> {
    let start = text
        .find("pub trait Engine")
        .expect("src/store/engine.rs declares trait Engine");
    let open = start + text[start..].find('{').expect("the trait has a body");
    let mut depth = 0;
    let mut end = text.len();
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    end = open + i;
                    break;
                }
            }
            _ => {}
        }
    }
    text[open..end]
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .filter_map(|line| {
            let after = line.split("fn ").nth(1)?;
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            (!name.is_empty() && after[name.len()..].starts_with(['(', '<'])).then_some(name)
        })
        .collect()
}

/// The tool the suite's runs use (a built-in; nothing here executes it).
pub(crate) const TOOL: &str = "echo";

/// The engine under test.
pub(crate) fn engine(env: &TestEnv) -> &dyn Engine {
    env.client.engine()
}

/// The test's (manual) time.
pub(crate) fn now(env: &TestEnv) -> DateTime<Utc> {
    env.client.now()
}

pub(crate) fn secs(n: i64) -> Duration {
    Duration::seconds(n)
}

/// A queued run of `TOOL` in `session`, due now, that posts a message when it ends.
pub(crate) fn new_run(env: &TestEnv, session: &str) -> NewRun {
    let now = now(env);
    NewRun {
        tags: Default::default(),
        traceparent: None,
        id: RunId::generate(),
        session_id: session.into(),
        tool: TOOL.into(),
        args: r#"{"message":"hi"}"#.into(),
        title: "contract".into(),
        priority: 0,
        max_attempts: 3,
        run_at: now,
        created_at: now,
        idempotency_key: None,
        timeout_ms: None,
        signal_on_completion: true,
        delivery: Delivery::WhenIdle,
        schedule_id: None,
        fire_at: None,
        ticks: 1,
        unique: None,
        approval: None,
        batch_id: None,
        parent_run_id: None,
        after: Vec::new(),
        after_mode: toolq::run::DepMode::All,
    }
}

/// Inserts one run; its id.
pub(crate) async fn insert(env: &TestEnv, run: NewRun) -> RunId {
    let inserted = engine(env).run_insert(vec![run]).await.unwrap();
    inserted[0].id().clone()
}

/// Inserts a queued run in `session`.
pub(crate) async fn queued(env: &TestEnv, session: &str) -> RunId {
    insert(env, new_run(env, session)).await
}

/// Reads a run that exists.
pub(crate) async fn get(env: &TestEnv, id: &RunId) -> Run {
    engine(env)
        .run_get(id.clone())
        .await
        .unwrap()
        .expect("the run exists")
}

/// A claim by `worker` of at most `max` runs of `TOOL`, no other limit.
pub(crate) fn claim_of(env: &TestEnv, worker: &str, max: usize) -> Claim {
    let now = now(env);
    Claim {
        worker: worker.into(),
        now,
        lease_until: now + secs(30),
        max,
        per_session: 100,
        after_session: None,
        tools: vec![TOOL.to_string()].into(),
        limits: Default::default(),
        background_room: None,
    }
}

pub(crate) async fn claim(env: &TestEnv, worker: &str, max: usize) -> Vec<Run> {
    engine(env)
        .attempt_claim(claim_of(env, worker, max))
        .await
        .unwrap()
}

/// A run of `session` claimed by `worker` (the only due run when called).
pub(crate) async fn running(env: &TestEnv, session: &str, worker: &str) -> Run {
    let id = queued(env, session).await;
    let runs = claim(env, worker, 1).await;
    assert_eq!(runs.iter().map(|r| &r.id).collect::<Vec<_>>(), [&id]);
    runs.into_iter().next().unwrap()
}

/// The message an end of `run` posts.
pub(crate) fn message(run: &Run, attempt: i64, kind: &'static str) -> NewMessage {
    NewMessage {
        session_id: run.session_id.clone(),
        run_id: run.id.to_string(),
        attempt,
        kind,
        body: format!("{kind}: {}", run.id),
        data: json!({ "kind": kind }),
        delivery: Delivery::WhenIdle,
    }
}

/// The end of a running attempt, fenced by its lease: a final state with a result, a log and
/// a message.
pub(crate) fn lease_end(run: &Run, state: RunState) -> FinishRecord {
    let token = run
        .lease_token
        .clone()
        .expect("a running run has a lease token");
    record(run, Fence::Lease(token), Outcome::Final(state), run.attempt)
}

/// The end of a run that is not running (queued or awaiting), fenced by the state it was
/// read in; it counts as the next attempt.
pub(crate) fn waiting_end(run: &Run, state: RunState) -> FinishRecord {
    record(
        run,
        Fence::Waiting(run.state),
        Outcome::Final(state),
        run.attempt + 1,
    )
}

fn record(run: &Run, fence: Fence, outcome: Outcome, message_attempt: i64) -> FinishRecord {
    let kind = match &outcome {
        Outcome::Final(state) => state.as_str(),
        _ => "failed",
    };
    FinishRecord {
        id: run.id.clone(),
        session_id: run.session_id.clone(),
        attempt: run.attempt,
        fence,
        outcome,
        error: (kind != "completed").then(|| format!("{kind} by the contract suite")),
        internal_error: None,
        error_entry: None,
        status_text: None,
        progress: None,
        output_tail: None,
        log: Some((b"the log".to_vec(), false)),
        result: Some(br#"{"ok":true}"#.to_vec()),
        extra_blobs: Vec::new(),
        message: Some(message(run, message_attempt, kind)),
        message_data: None,
        approval: None,
        steps: Vec::new(),
        batch_id: run.batch_id.clone(),
        parent_run_id: run.parent_run_id.clone(),
    }
}

/// Records ends at the test's now; per end, whether it applied.
pub(crate) async fn end(env: &TestEnv, ends: Vec<FinishRecord>) -> Vec<bool> {
    engine(env).run_end(ends, now(env)).await.unwrap()
}

/// A worker row on `host` (a made-up boot and pid namespace, so only a rescue that names
/// them judges its pid).
pub(crate) fn worker_row(env: &TestEnv, id: &str, host: &str) -> WorkerRow {
    let now = toolq::clock::ts(now(env));
    WorkerRow {
        id: id.into(),
        host: host.into(),
        boot_id: "contract-boot".into(),
        pid_namespace: "contract-ns".into(),
        pid: 1,
        process_start_time: "1".into(),
        started_at: now.clone(),
        heartbeat_at: now,
        last_poll_at: None,
        stopped_at: None,
        stop_reason: None,
        concurrency: 4,
        poll_interval_ms: 20,
        heartbeat_interval_ms: 200,
        lease_ms: 30_000,
        busy_retries: 0,
        version: "test".into(),
        tools: vec![TOOL.to_string()],
    }
}

/// How many runs `claim` took.
pub(crate) async fn claimed(env: &TestEnv, claim: Claim) -> usize {
    engine(env).attempt_claim(claim).await.unwrap().len()
}

/// Per-tool limits with `limit` for the suite's tool.
pub(crate) fn one_limit(limit: toolq::flow::ToolLimit) -> std::sync::Arc<toolq::flow::ToolLimits> {
    std::sync::Arc::new([(TOOL.to_string(), limit)].into())
}

/// How many messages the inbox holds about `run`.
pub(crate) async fn messages_of(env: &TestEnv, run: &RunId) -> usize {
    engine(env)
        .inbox_of_run(run.clone(), 10)
        .await
        .unwrap()
        .len()
}

/// Registers a live worker row `id` on `host`.
pub(crate) async fn register(env: &TestEnv, id: &str, host: &str) {
    engine(env)
        .worker_register(worker_row(env, id, host))
        .await
        .unwrap();
}

/// A session's messages, oldest first.
pub(crate) async fn messages(env: &TestEnv, session: &str) -> Vec<Message> {
    let filter = InboxFilter {
        limit: 100,
        ..Default::default()
    };
    engine(env)
        .inbox_list(session.into(), filter)
        .await
        .unwrap()
}

/// A queued run of `session` ended cancelled (one message); the run id.
pub(crate) async fn cancelled(env: &TestEnv, session: &str) -> RunId {
    let id = queued(env, session).await;
    let run = get(env, &id).await;
    assert_eq!(
        end(env, vec![waiting_end(&run, RunState::Cancelled)]).await,
        [true]
    );
    id
}
