//! Every ops view in schema.sql returns the right rows on a prepared database, and every
//! ```sql block in OPS.md runs.

use rusqlite::Connection;

use super::fixture;
use crate::support::TestEnv;

fn rows(c: &Connection, sql: &str) -> Vec<Vec<String>> {
    let mut stmt = c.prepare(sql).unwrap();
    let n = stmt.column_count();
    stmt.query_map([], |r| {
        (0..n)
            .map(|i| {
                let v: rusqlite::types::Value = r.get(i)?;
                Ok(match v {
                    rusqlite::types::Value::Null => "NULL".to_string(),
                    rusqlite::types::Value::Integer(i) => i.to_string(),
                    rusqlite::types::Value::Real(f) => f.to_string(),
                    rusqlite::types::Value::Text(t) => t,
                    rusqlite::types::Value::Blob(b) => format!("<{} bytes>", b.len()),
                })
            })
            .collect()
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

fn prepared() -> (TestEnv, Connection) {
    let env = TestEnv::new();
    let c = Connection::open(env.db_path()).unwrap();
    fixture::prepare(&c);
    (env, c)
}

#[test]
fn stuck_runs_lists_expired_leases_and_overdue_queued_runs() {
    let (_env, c) = prepared();
    assert_eq!(
        rows(&c, "SELECT id, reason FROM stuck_runs ORDER BY id"),
        vec![
            vec!["bg_queued_overdue", "queued past due"],
            vec!["bg_stuck_running", "lease expired"],
        ]
    );
}

#[test]
fn failures_24h_lists_only_the_last_day() {
    let (_env, c) = prepared();
    assert_eq!(
        rows(&c, "SELECT id, error, internal_error FROM failures_24h"),
        vec![vec![
            "bg_failed_recent",
            "An internal error occurred while executing the tool",
            "connection refused"
        ]]
    );
}

#[test]
fn queue_depth_groups_unfinished_runs_by_session_and_tool() {
    let (_env, c) = prepared();
    let fresh: String = c
        .query_row(
            "SELECT run_at FROM runs WHERE id = 'bg_queued_fresh'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let overdue: String = c
        .query_row(
            "SELECT run_at FROM runs WHERE id = 'bg_queued_overdue'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        rows(
            &c,
            "SELECT session_id, tool, queued, awaiting_approval, running, \
             coalesce(oldest_queued_run_at, '-') FROM queue_depth ORDER BY session_id, tool"
        ),
        vec![
            vec!["s1", "echo", "1", "0", "0", overdue.as_str()],
            vec!["s1", "http_request", "0", "0", "2", "-"],
            vec!["s2", "echo", "2", "0", "0", fresh.as_str()],
            vec!["s2", "shell", "0", "1", "0", "-"],
        ]
    );
}

#[test]
fn next_fires_lists_enabled_schedules_in_fire_order() {
    let (_env, c) = prepared();
    assert_eq!(
        rows(&c, "SELECT id, timezone FROM next_fires"),
        vec![
            vec!["sch_hourly", "America/Chicago"],
            vec!["sch_daily", "America/Chicago"],
        ]
    );
}

#[test]
fn recent_occurrences_shows_the_last_week_with_run_states() {
    let (_env, c) = prepared();
    assert_eq!(
        rows(
            &c,
            "SELECT schedule_id, outcome, coalesce(run_id, '-'), coalesce(run_state, '-') \
             FROM recent_occurrences"
        ),
        vec![
            vec!["sch_daily", "fired", "bg_completed", "completed"],
            vec!["sch_daily", "skipped_overlap", "-", "-"],
            vec!["sch_hourly", "coalesced", "-", "-"],
        ]
    );
}

#[test]
fn run_stages_lists_each_stage_of_an_operation_in_order() {
    let (_env, c) = prepared();
    assert_eq!(
        rows(
            &c,
            "SELECT run_id, operation_id, attempt, seq, stage, coalesce(message, '-'), \
             coalesce(progress, '-') FROM run_stages ORDER BY run_id, seq"
        ),
        vec![
            vec![
                "bg_completed",
                "op_1",
                "1",
                "1",
                "started",
                "transfer of 5 started",
                "-"
            ],
            vec![
                "bg_completed",
                "op_1",
                "1",
                "2",
                "transferring",
                "sending",
                "0.5"
            ],
            vec!["bg_completed", "op_1", "2", "3", "resumed", "-", "-"],
            vec!["bg_completed", "op_1", "2", "4", "completed", "-", "-"],
        ]
    );
}

/// The ```sql blocks of a markdown text.
fn sql_blocks(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in md.lines() {
        match (&mut cur, line.trim_start()) {
            (None, l) if l.starts_with("```sql") => cur = Some(String::new()),
            (Some(_), l) if l.starts_with("```") => out.extend(cur.take()),
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(cur.is_none(), "an unclosed ```sql block in OPS.md");
    out
}

#[test]
fn every_query_in_ops_md_runs_on_a_prepared_database() {
    let md = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/OPS.md")).unwrap();
    let blocks = sql_blocks(&md);
    assert!(blocks.len() >= 10, "OPS.md has {} sql blocks", blocks.len());
    let (_env, c) = prepared();
    let mut with_rows = 0;
    for (i, block) in blocks.iter().enumerate() {
        // A block may hold several statements; run each and read every row.
        let mut rest = block.trim();
        while !rest.is_empty() {
            let tail_at = stmt_len(rest);
            let mut stmt = c
                .prepare(&rest[..tail_at])
                .unwrap_or_else(|e| panic!("OPS.md sql block {}: {e}\n{block}", i + 1));
            // The `.param set` values a reader would use, pointing at the prepared rows.
            for (name, value) in [
                (":run_id", "bg_completed"),
                (":schedule_id", "sch_daily"),
                (":session", "s2"),
            ] {
                if let Some(idx) = stmt.parameter_index(name).unwrap() {
                    stmt.raw_bind_parameter(idx, value).unwrap();
                }
            }
            let n = stmt.column_count();
            let mut q = stmt.raw_query();
            let mut got = 0;
            while let Some(row) = q
                .next()
                .unwrap_or_else(|e| panic!("OPS.md sql block {}: {e}\n{block}", i + 1))
            {
                for col in 0..n {
                    let _: rusqlite::types::Value = row.get(col).unwrap();
                }
                got += 1;
            }
            if got > 0 {
                with_rows += 1;
            }
            rest = rest[tail_at..].trim();
        }
    }
    // The prepared database has a row for most questions: the queries are not vacuous.
    assert!(
        with_rows * 3 >= blocks.len() * 2,
        "only {with_rows} of {} blocks returned rows",
        blocks.len()
    );
}

/// Length of the first statement of `sql` (through its `;`), skipping quoted text and `--` comments.
fn stmt_len(sql: &str) -> usize {
    let mut end = 0;
    let mut in_str: Option<char> = None;
    let mut chars = sql.char_indices().peekable();
    while let Some((i, ch)) = chars.next() {
        end = i + ch.len_utf8();
        match (in_str, ch) {
            (Some(q), c) if c == q => in_str = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => in_str = Some(ch),
            (None, '-') if chars.peek().map(|x| x.1) == Some('-') => {
                for (j, c2) in chars.by_ref() {
                    end = j + c2.len_utf8();
                    if c2 == '\n' {
                        break;
                    }
                }
            }
            (None, ';') => return end,
            _ => {}
        }
    }
    end
}
