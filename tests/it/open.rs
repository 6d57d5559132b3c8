//! Opening the database file (issue 17, items 8 and 11): which commands may create it, read
//! commands on a missing or read-only file, and many processes opening a new file at once.

use std::process::{Command, Output, Stdio};

use crate::support::toolq;

fn cmd(db: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_toolq"));
    c.arg("--db")
        .arg(db)
        .args(args)
        .env_remove("TOOLQ_CONFIG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn processes_opening_a_new_file_at_once_all_succeed() {
    const ROUNDS: usize = 8;
    const PROCESSES: usize = 8;
    for round in 0..ROUNDS {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::support::TestDb::at(dir.path());
        let children: Vec<_> = (0..PROCESSES)
            .map(|i| {
                let args: &[&str] = match i % 4 {
                    0 => &["worker", "--drain"],
                    1 => &["enqueue", "echo", "--args", r#"{"message":"x"}"#],
                    2 => &["init"],
                    _ => &["schedule", "add", "--cron", "@hourly", "get_current_time"],
                };
                (args, cmd(&db, args).spawn().unwrap())
            })
            .collect();
        for (args, child) in children {
            let o = child.wait_with_output().unwrap();
            assert!(
                o.status.success(),
                "round {round}: {args:?} exited {}: {}",
                o.status,
                stderr(&o)
            );
        }
        let o = toolq(&db, &["--json", "stats"]);
        assert!(o.status.success(), "round {round}: {}", stderr(&o));
        if crate::support::ENGINE == crate::support::Engine::Sqlite {
            assert_eq!(
                db.text("PRAGMA journal_mode").as_deref(),
                Some("wal"),
                "round {round}"
            );
        }
        let runs = db.count("SELECT count(*) FROM runs");
        assert_eq!(runs as usize, PROCESSES / 4, "round {round}");
    }
}

sqlite_only! {
    /// Every command that must not create the file, with arguments that would otherwise work.
    fn non_creating_commands() -> Vec<Vec<&'static str>> {
        let id = "bg_01a20c6dd2ed72d48a2475a7a796b89c";
        let sched = "sc_01a20c6dd2ed72d48a2475a7a796b89c";
        [
            vec!["runs"],
            vec!["show", id],
            vec!["logs", id],
            vec!["result", id],
            vec!["inbox", "default"],
            vec!["stats"],
            vec!["status"],
            vec!["schedule", "list"],
            vec!["schedule", "show", sched],
            vec!["cancel", id],
            vec!["retry", id],
            vec!["approve", id],
            vec!["deny", id],
            vec!["signal", id, "go"],
            vec!["prune"],
            vec!["inbox", "default", "--ack"],
            vec!["schedule", "cancel", sched],
            vec!["schedule", "enable", sched],
            vec!["schedule", "disable", sched],
        ]
        .into_iter()
        .collect()
    }
}

sqlite_only! {
    #[test]
    fn sqlite_only_commands_that_do_not_add_work_refuse_a_missing_file_and_name_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("typo.db");
        for args in non_creating_commands() {
            let o = cmd(&db, &args).output().unwrap();
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.starts_with("toolq: ") && err.contains(&db.display().to_string()),
                "{args:?}: {err}"
            );
            assert!(!db.exists(), "{args:?} created {}", db.display());
        }
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(names.is_empty(), "{names:?}");
        // An empty file (`: > toolq.db`) is no database either: reading it must not write
        // a schema into it.
        std::fs::write(&db, b"").unwrap();
        for args in non_creating_commands() {
            let o = cmd(&db, &args).output().unwrap();
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains("does not exist or is empty"), "{args:?}: {err}");
            assert_eq!(std::fs::metadata(&db).unwrap().len(), 0, "{args:?} wrote");
        }
    }
}

sqlite_only! {
    #[test]
    fn sqlite_only_commands_that_need_no_database_do_not_create_one() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("none.db");
        for args in [
            &["tools"][..],
            &["tools", "echo"][..],
            &["schedule", "preview", "--cron", "@daily"][..],
        ] {
            let o = cmd(&db, args).output().unwrap();
            assert!(o.status.success(), "{args:?}: {}", stderr(&o));
            assert!(!o.stdout.is_empty(), "{args:?}");
        }
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(names.is_empty(), "{names:?}");
    }
}

sqlite_only! {
    #[test]
    fn sqlite_only_commands_that_add_work_create_the_file() {
        for args in [
            &["init"][..],
            &["worker", "--drain"][..],
            &["enqueue", "echo", "--args", r#"{"message":"x"}"#][..],
            &["schedule", "add", "--cron", "@hourly", "get_current_time"][..],
        ] {
            let dir = tempfile::tempdir().unwrap();
            let db = dir.path().join("new.db");
            let o = cmd(&db, args).output().unwrap();
            assert!(o.status.success(), "{args:?}: {}", stderr(&o));
            assert!(db.exists(), "{args:?}");
        }
    }
}

sqlite_only! {
    /// Runs `toolq` as a user that may not write `db`: as root (where chmod does not bite),
    /// as `nobody` (uid/gid 65534); as anyone else, as themselves.
    fn as_reader(db: &std::path::Path, args: &[&str]) -> Output {
        use std::os::unix::fs::MetadataExt;
        use std::os::unix::process::CommandExt;
        let mut c = cmd(db, args);
        // /proc/self belongs to the effective user.
        if std::fs::metadata("/proc/self").unwrap().uid() == 0 {
            c.uid(65534).gid(65534);
        }
        c.output().unwrap()
    }
}

sqlite_only! {
    /// A database with one run, then made read-only: the file 0444 in a directory 0555 (no
    /// -wal or -shm may be created next to it), so nothing of it can be written.
    fn read_only_db() -> (tempfile::TempDir, std::path::PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ro.db");
        let o = toolq(&db, &["enqueue", "echo", "--args", r#"{"message":"x"}"#]);
        assert!(o.status.success(), "{}", stderr(&o));
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o444)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
        (dir, db)
    }
}

sqlite_only! {
    fn restore(dir: &std::path::Path) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

sqlite_only! {
    #[test]
    fn sqlite_only_read_commands_work_on_a_read_only_file() {
        let (dir, db) = read_only_db();
        for args in [
            &["--json", "runs"][..],
            &["stats"][..],
            &["inbox", "default"][..],
            &["schedule", "list"][..],
        ] {
            let o = as_reader(&db, args);
            assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        }
        // The health check reads the file too: its queued run and no worker make it exit 1,
        // and it says so (not a read-only error).
        let o = as_reader(&db, &["status"]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("no live worker for 1 queued run"),
            "{}",
            stderr(&o)
        );
        let o = as_reader(&db, &["--json", "runs"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
        restore(dir.path());
    }
}

sqlite_only! {
    #[test]
    fn sqlite_only_a_write_to_a_read_only_file_names_it() {
        let (dir, db) = read_only_db();
        let before = std::fs::read(&db).unwrap();
        for args in [
            &["enqueue", "echo", "--args", r#"{"message":"x"}"#][..],
            &["prune"][..],
            &["worker", "--drain"][..],
        ] {
            let o = as_reader(&db, args);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
            assert!(
                err.starts_with("toolq: ")
                    && err.contains(&db.display().to_string())
                    && err.contains("read-only"),
                "{args:?}: {err}"
            );
        }
        assert_eq!(std::fs::read(&db).unwrap(), before);
        restore(dir.path());
    }
}
