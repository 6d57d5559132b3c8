//! Every ops view in schema.sql returns the right rows on a prepared database, and every
//! ```sql block in OPS.md runs.

use super::fixture;
use crate::support::{ENGINE, Engine, TestDb, TestEnv};

fn rows(c: &TestDb, sql: &str) -> Vec<Vec<String>> {
    c.rows(sql)
        .into_iter()
        .map(|r| {
            r.into_iter()
                .map(|v| v.unwrap_or_else(|| "NULL".to_string()))
                .collect()
        })
        .collect()
}

fn prepared() -> (TestEnv, TestDb) {
    let env = TestEnv::new();
    let c = env.db.clone();
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
    let fresh = c
        .text("SELECT run_at FROM runs WHERE id = 'bg_queued_fresh'")
        .unwrap();
    let overdue = c
        .text("SELECT run_at FROM runs WHERE id = 'bg_queued_overdue'")
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
             coalesce(CAST(progress AS TEXT), '-') FROM run_stages ORDER BY run_id, seq"
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

/// The blocks fenced as ````lang` of a markdown text.
fn blocks(md: &str, lang: &str) -> Vec<String> {
    let fence = format!("```{lang}");
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in md.lines() {
        match (&mut cur, line.trim_start()) {
            (None, l) if l == fence => cur = Some(String::new()),
            (Some(_), l) if l.starts_with("```") => out.extend(cur.take()),
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(cur.is_none(), "an unclosed {fence} block in OPS.md");
    out
}

/// Every query of OPS.md for this engine (```sql for SQLite, ```psql for Postgres) runs on a
/// prepared database, and most return rows: the queries are not vacuous.
#[test]
fn every_query_in_ops_md_runs_on_a_prepared_database() {
    let md = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/OPS.md")).unwrap();
    let (lang, run): (_, fn(&TestDb, usize, &str) -> bool) = match ENGINE {
        Engine::Sqlite => ("sql", sqlite_block_has_rows),
        Engine::Postgres => ("psql", psql_block_has_rows),
    };
    let blocks = blocks(&md, lang);
    assert!(
        blocks.len() >= 10,
        "OPS.md has {} {lang} blocks",
        blocks.len()
    );
    let (_env, c) = prepared();
    let with_rows = blocks
        .iter()
        .enumerate()
        .filter(|(i, block)| run(&c, *i, block))
        .count();
    assert!(
        with_rows * 3 >= blocks.len() * 2,
        "only {with_rows} of {} blocks returned rows",
        blocks.len()
    );
}

/// The psql variables a reader would `\\set`, pointing at the prepared rows.
const PARAMS: [(&str, &str); 3] = [
    ("run_id", "bg_completed"),
    ("schedule_id", "sch_daily"),
    ("session", "s2"),
];

/// Runs a ```psql block (several statements at once, as psql would) with its `:'name'`
/// variables set; whether any statement returned rows.
fn psql_block_has_rows(c: &TestDb, i: usize, block: &str) -> bool {
    let mut sql = block.to_string();
    for (name, value) in PARAMS {
        sql = sql.replace(&format!(":'{name}'"), &format!("'{value}'"));
    }
    let rows = c
        .try_rows(&sql)
        .unwrap_or_else(|e| panic!("OPS.md psql block {}: {e}\n{block}", i + 1));
    !rows.is_empty()
}

/// Runs each statement of a ```sql block with the `.param set` values bound; whether any
/// returned rows.
fn sqlite_block_has_rows(c: &TestDb, i: usize, block: &str) -> bool {
    let c = rusqlite::Connection::open(c.file()).unwrap();
    let mut with_rows = false;
    let mut rest = block.trim();
    while !rest.is_empty() {
        let tail_at = stmt_len(rest);
        let mut stmt = c
            .prepare(&rest[..tail_at])
            .unwrap_or_else(|e| panic!("OPS.md sql block {}: {e}\n{block}", i + 1));
        for (name, value) in PARAMS {
            if let Some(idx) = stmt.parameter_index(&format!(":{name}")).unwrap() {
                stmt.raw_bind_parameter(idx, value).unwrap();
            }
        }
        let n = stmt.column_count();
        let mut q = stmt.raw_query();
        while let Some(row) = q
            .next()
            .unwrap_or_else(|e| panic!("OPS.md sql block {}: {e}\n{block}", i + 1))
        {
            for col in 0..n {
                let _: rusqlite::types::Value = row.get(col).unwrap();
            }
            with_rows = true;
        }
        rest = rest[tail_at..].trim();
    }
    with_rows
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
