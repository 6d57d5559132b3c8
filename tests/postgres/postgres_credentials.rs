//! Credentials from where libpq takes them (issue 40, item 3): `PGPASSWORD`, the password file
//! (`PGPASSFILE`, else `~/.pgpass`) and `PGUSER`, `PGHOST`, `PGPORT`, `PGDATABASE` for what
//! the URL leaves out, through the real binary on the test server's password role. The
//! password never shows, and a password file others can read is ignored with a warning.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use crate::support::{TestDb, pg, toolq_command};

/// A fresh database the password role may create the schema in; its name.
fn database(dir: &Path) -> (TestDb, String) {
    let db = TestDb::at(dir);
    db.exec(&format!(
        "GRANT ALL ON SCHEMA public TO {}",
        pg::PASSWORD_ROLE
    ));
    let name = db.url.rsplit('/').next().unwrap().to_string();
    (db, name)
}

/// `toolq --db url init` with `env` set (and nothing else of the test's libpq environment).
fn init(url: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = toolq_command();
    cmd.args(["--db", url, "init"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn assert_ok(o: &Output, what: &str, db: &TestDb) {
    let out = text(o);
    assert!(o.status.success(), "{what}: {out}");
    assert!(
        !out.contains(pg::PASSWORD),
        "{what} showed the password: {out}"
    );
    // One row per schema step (001_schema, 002_background_runs, ...), each applied once.
    assert_eq!(
        db.count("SELECT count(*) FROM schema_version"),
        toolq::store::postgres::SCHEMA_VERSION,
        "{what}"
    );
}

fn write_private(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn pgpassword_gives_the_password_a_url_leaves_out() {
    let dir = tempfile::tempdir().unwrap();
    let (db, name) = database(dir.path());
    let port = pg::server().port;
    let url = format!("postgres://{}@127.0.0.1:{port}/{name}", pg::PASSWORD_ROLE);
    let o = init(&url, &[("PGPASSWORD", pg::PASSWORD)]);
    assert_ok(&o, "PGPASSWORD", &db);
    // Without it the message says where a password may come from, and shows none.
    let o = init(&url, &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("password missing") && out.contains("PGPASSWORD"),
        "{out}"
    );
}

#[test]
fn pguser_pghost_pgport_and_pgdatabase_fill_what_the_url_leaves_out() {
    let dir = tempfile::tempdir().unwrap();
    let (db, name) = database(dir.path());
    let port = pg::server().port.to_string();
    let env = [
        ("PGHOST", "127.0.0.1"),
        ("PGPORT", port.as_str()),
        ("PGUSER", pg::PASSWORD_ROLE),
        ("PGDATABASE", name.as_str()),
        ("PGPASSWORD", pg::PASSWORD),
    ];
    let o = init("postgres://", &env);
    assert_ok(&o, "all from the environment", &db);
    // The URL's host without a port takes PGPORT's.
    let o = init("postgresql://127.0.0.1", &env);
    assert_ok(&o, "PGPORT for a host without a port", &db);
    // The URL wins over the environment: its user (trusted) is the one that logs in.
    let o = init(
        &format!("postgres://postgres@127.0.0.1:{port}/{name}"),
        &env,
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = init(
        &format!("postgres://{}@127.0.0.1:{port}/{name}", pg::PASSWORD_ROLE),
        &[("PGPASSWORD", "wrong-Pa55")],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("password authentication failed"));
    assert!(!text(&o).contains("wrong-Pa55"));
    let o = init(
        "postgres://",
        &[("PGPORT", "nope"), ("PGPASSWORD", pg::PASSWORD)],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("PGPORT"), "{}", text(&o));
    assert!(!text(&o).contains(pg::PASSWORD));
}

#[test]
fn the_password_file_is_read_as_libpq_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let (db, name) = database(dir.path());
    let port = pg::server().port;
    let url = format!("postgres://{}@127.0.0.1:{port}/{name}", pg::PASSWORD_ROLE);
    let file = dir.path().join("pgpass");
    let file_env = file.display().to_string();
    // A comment, a line for another user, an escaped colon in another host's line, then a
    // wildcard line that matches.
    let lines = format!(
        "# toolq\n\
         127.0.0.1:{port}:*:someone_else:not-this\n\
         db\\:host:*:*:*:nor-this\n\
         127.0.0.1:*:{name}:{role}:{pw}\n",
        role = pg::PASSWORD_ROLE,
        pw = pg::PASSWORD
    );
    write_private(&file, &lines, 0o600);
    let o = init(&url, &[("PGPASSFILE", &file_env)]);
    assert_ok(&o, "PGPASSFILE", &db);
    // ~/.pgpass when PGPASSFILE is not set.
    let home = tempfile::tempdir().unwrap();
    write_private(&home.path().join(".pgpass"), &lines, 0o600);
    let mut cmd = toolq_command();
    cmd.env_remove("PGPASSFILE")
        .env("HOME", home.path())
        .args(["--db", &url, "init"]);
    assert_ok(&cmd.output().unwrap(), "~/.pgpass", &db);
    // Readable by others: ignored with libpq's warning, so the password is missing.
    write_private(&file, &lines, 0o644);
    let o = init(&url, &[("PGPASSFILE", &file_env)]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("group or world access"), "{out}");
    assert!(out.contains("password missing"), "{out}");
    assert!(!out.contains(pg::PASSWORD), "{out}");
}
