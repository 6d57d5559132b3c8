//! `stats` reports the database's size where it is known (a SQLite file) and `null` where
//! it is not (a Postgres server), never a made-up 0 (issue 40, item 5).

use crate::support::{Engine, TestDb, toolq};

#[test]
fn stats_reports_the_size_only_where_it_is_known() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    assert!(toolq(&db.url, &["init"]).status.success());
    let o = toolq(&db.url, &["--json", "stats"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let text = String::from_utf8_lossy(&toolq(&db.url, &["stats"]).stdout).into_owned();
    match crate::ENGINE {
        Engine::Sqlite => {
            let n = v["db_bytes"].as_u64().unwrap_or(0);
            assert!(n > 0, "{v}");
            assert!(text.contains(&format!("({n} bytes,")), "{text}");
        }
        Engine::Postgres => {
            assert!(v["db_bytes"].is_null(), "{v}");
            assert!(!text.contains(" bytes"), "{text}");
        }
    }
}
