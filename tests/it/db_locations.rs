//! Database locations that are neither a SQLite path nor a Postgres URL (issue 40, item 4):
//! a misspelt or foreign `scheme://` URL and a libpq keyword string are refused with exit 2
//! and a hint, wherever they are given (`--db`, `TOOLQ_DB`, `TOOLQ_DATABASE__URL`,
//! `database.url` or `database.path` in a config file), no file is created for them, and no
//! message shows their password. Engine-independent: nothing here reaches a server.

use std::path::Path;
use std::process::Output;

use crate::support::toolq_command;

const SECRET: &str = "Secret-9x";
const KV_SECRET: &str = "KVSECRET";

/// Where a location is given: its name in messages, flags, an environment variable.
type Way<'a> = (
    &'a str,
    Vec<&'a std::ffi::OsStr>,
    Option<(&'a str, &'a str)>,
);

/// The locations that must be refused, each with what its hint must mention.
fn bad_locations() -> Vec<(String, &'static str)> {
    vec![
        (format!("postgress://u:{SECRET}@h/db"), "postgres://"),
        (format!("mysql://u:{SECRET}@h/db"), "postgres://"),
        (format!("sqlite://u:{SECRET}@h/db"), "path"),
        (
            format!("host=localhost port=5432 password={KV_SECRET} dbname=x"),
            "keyword",
        ),
        (
            format!("dbname = x password = '{KV_SECRET} two' host=h"),
            "keyword",
        ),
    ]
}

/// Checks a refusal: exit 2, one `toolq:` message with `hint`, neither secret shown, and
/// nothing created in `dir` but what the test wrote there.
fn assert_refused(o: &Output, what: &str, hint: &str, dir: &Path, before: usize) {
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(2), "{what}: {out}{err}");
    assert!(err.starts_with("toolq: "), "{what}: {err}");
    assert!(
        err.contains(hint),
        "{what}: the hint mentions {hint:?}: {err}"
    );
    for secret in [SECRET, KV_SECRET] {
        assert!(
            !err.contains(secret) && !out.contains(secret),
            "{what} showed the password: {out}{err}"
        );
    }
    assert!(
        err.contains("***"),
        "{what}: the redacted value is named: {err}"
    );
    let now = std::fs::read_dir(dir).unwrap().count();
    assert_eq!(now, before, "{what}: no file was created for the location");
}

#[test]
fn a_location_that_is_not_a_path_or_postgres_url_is_refused_without_its_password() {
    let dir = tempfile::tempdir().unwrap();
    for (location, hint) in bad_locations() {
        for args in [
            &["init"][..],
            &["runs"],
            &["enqueue", "echo", "--args", r#"{"message":"x"}"#],
        ] {
            let config = dir.path().join("c.toml");
            std::fs::write(
                &config,
                format!(
                    "[database]\nurl = {}\n",
                    toml::Value::from(location.as_str())
                ),
            )
            .unwrap();
            let config_path = dir.path().join("p.toml");
            std::fs::write(
                &config_path,
                format!(
                    "[database]\npath = {}\n",
                    toml::Value::from(location.as_str())
                ),
            )
            .unwrap();
            let before = std::fs::read_dir(dir.path()).unwrap().count();
            let loc = location.as_str();
            // (where it is given, flags, environment)
            let ways: [Way; 5] = [
                ("--db", vec!["--db".as_ref(), loc.as_ref()], None),
                ("TOOLQ_DB", vec![], Some(("TOOLQ_DB", loc))),
                (
                    "TOOLQ_DATABASE__URL",
                    vec![],
                    Some(("TOOLQ_DATABASE__URL", loc)),
                ),
                (
                    "database.url",
                    vec!["--config".as_ref(), config.as_os_str()],
                    None,
                ),
                (
                    "database.path",
                    vec!["--config".as_ref(), config_path.as_os_str()],
                    None,
                ),
            ];
            for (way, flags, env) in ways {
                let mut cmd = toolq_command();
                cmd.current_dir(dir.path()).args(flags);
                if let Some((k, v)) = env {
                    cmd.env(k, v);
                }
                let o = cmd.args(args).output().unwrap();
                let what = format!("{location:?} as {way}, {args:?}");
                assert_refused(&o, &what, hint, dir.path(), before);
                let err = String::from_utf8_lossy(&o.stderr);
                assert!(err.contains(way), "{what}: names where it was given: {err}");
            }
        }
    }
}

#[test]
fn a_toml_syntax_error_on_the_url_line_does_not_show_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    for text in [
        format!("[database]\nurl = \"postgres://u:{SECRET}@h/db\n"),
        format!("[database]\nurl = \"postgres://u:{SECRET}@h/db\" x\n"),
        format!("[database]\nurl = 'host=h password={KV_SECRET}\n"),
    ] {
        std::fs::write(&config, &text).unwrap();
        let o = toolq_command()
            .current_dir(dir.path())
            .arg("--config")
            .arg(&config)
            .arg("runs")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{text}: {err}");
        assert!(err.contains("line 2"), "{text}: {err}");
        assert!(err.contains("***"), "the line is shown, redacted: {err}");
        assert!(
            !err.contains(SECRET) && !err.contains(KV_SECRET),
            "{text}: showed the password: {err}"
        );
    }
}

#[test]
fn a_sqlite_path_that_merely_contains_an_equals_sign_or_colon_still_works() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["./host=x.db", "a:b@c.db", "user name.db"] {
        let o = toolq_command()
            .current_dir(dir.path())
            .args(["--db", name, "init"])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(dir.path().join(name).exists(), "{name}");
    }
}

#[test]
fn a_library_config_with_such_a_location_is_refused_too() {
    let dir = tempfile::tempdir().unwrap();
    let location = dir
        .path()
        .join(format!("mysql://u:{SECRET}@h/db"))
        .display()
        .to_string();
    // A path that starts with `/` is a path: only a bare URL is refused.
    for (db_path, refused) in [
        (format!("mysql://u:{SECRET}@h/db"), true),
        (format!("host=h password={KV_SECRET}"), true),
        (location, false),
    ] {
        let config = toolq::Config {
            db_path: db_path.clone(),
            ..toolq::Config::default()
        };
        let registry = toolq::RegistryBuilder::new()
            .with_builtins()
            .build()
            .unwrap();
        let opened = toolq::Client::open(config, registry).map(|_| ());
        if refused {
            let e = opened.unwrap_err();
            let text = e.to_string();
            assert_eq!(e.exit_code(), 2, "{db_path}: {text}");
            assert!(text.contains("db_path") && text.contains("***"), "{text}");
            assert!(
                !text.contains(SECRET) && !text.contains(KV_SECRET),
                "{text}"
            );
        } else {
            // `/tmp/.../mysql:/u:...` has no such directory: an open error, not a refusal.
            assert!(opened.is_err_and(|e| e.exit_code() != 2), "{db_path}");
        }
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
