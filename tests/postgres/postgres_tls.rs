//! TLS to Postgres through the real binary, on the harness's TLS server (`pg::tls_server`: a
//! certificate signed by a CA of its own; TCP without TLS is refused there, so every toolq
//! session that works on it is encrypted) and on the plain one: `sslmode=require` encrypts
//! every session and a worker drains over it, `verify-full` with `sslrootcert` connects and
//! without it fails naming the certificate, `require` against a server without TLS fails
//! saying so, and a bad `sslrootcert` is a usage error. A role whose `pg_hba.conf` line is
//! `cert` logs in with `sslcert` and `sslkey` (or `PGSSLCERT` and `PGSSLKEY`) and is refused
//! without them. `prefer` (the default) against the plain server is the rest of the suite.

use std::process::Output;

use crate::support::{Killed, pg, toolq, toolq_command, wait_until};

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn ok(url: &str, args: &[&str]) -> String {
    let o = toolq(url, args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{args:?} on {url}: {out}{err}");
    out
}

/// Exit `code`, one `toolq:` line on stderr, no password; returns stderr.
fn refused(o: &Output, code: i32) -> String {
    let (out, err) = text(o);
    assert_eq!(o.status.code(), Some(code), "{out}{err}");
    assert!(err.starts_with("toolq: "), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        !err.contains(pg::PASSWORD) && !out.contains(pg::PASSWORD),
        "the password shows: {out}{err}"
    );
    err
}

/// `db`'s URL as the password role (trust on the TLS server: the password only has to stay
/// hidden) with `query` appended.
fn with_password(db: &pg::Database, query: &str) -> String {
    db.url.replacen(
        "postgres@",
        &format!("{}:{}@", pg::PASSWORD_ROLE, pg::PASSWORD),
        1,
    ) + query
}

/// How many tables `db`'s public schema holds: 0 when a refused command wrote nothing.
fn tables(db: &pg::Database) -> usize {
    count(
        db,
        "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
    )
    .expect("count the public tables")
}

fn enqueue(url: &str, n: usize) {
    for i in 0..n {
        ok(
            url,
            &[
                "enqueue",
                "echo",
                "--args",
                &format!(r#"{{"message":"m{i}"}}"#),
            ],
        );
    }
}

/// A worker on `url`, running once `db` holds `n` completed runs (its connections still open).
fn worker_finishing(url: &str, db: &pg::Database, n: usize) -> Killed {
    let worker = Killed(
        toolq_command()
            .args(["--db", url, "worker"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until(&format!("the worker finishes {n} runs"), || {
        completed(db) == n
    });
    worker
}

/// The one number `sql` (a count) returns; none while it cannot be read (no table yet).
fn count(db: &pg::Database, sql: &str) -> Option<usize> {
    db.rows(sql)
        .ok()
        .and_then(|r| r.into_iter().next()?.into_iter().next()??.parse().ok())
}

fn completed(db: &pg::Database) -> usize {
    count(db, "SELECT count(*) FROM runs WHERE state = 'completed'").unwrap_or(0)
}

#[test]
fn postgres_tls_require_encrypts_every_session_and_a_worker_drains_runs() {
    let db = pg::Database::create_on(pg::tls_server());
    let url = format!("{}?sslmode=require", db.url);
    ok(&url, &["init"]);
    enqueue(&url, 3);

    // A running worker: its pooled and listening connections are all TLS sessions.
    let worker = worker_finishing(&url, &db, 3);
    let sessions = db
        .rows(
            "SELECT s.ssl::text, s.version FROM pg_stat_ssl s JOIN pg_stat_activity a \
             USING (pid) WHERE a.datname = current_database() AND a.application_name = 'toolq'",
        )
        .unwrap();
    assert!(!sessions.is_empty(), "the worker holds connections");
    for s in &sessions {
        assert_eq!(s[0].as_deref(), Some("true"), "{sessions:?}");
        assert!(
            s[1].as_deref().is_some_and(|v| v.starts_with("TLSv1.")),
            "{sessions:?}"
        );
    }
    drop(worker);

    // TOOLQ_DB carries the options as --db does.
    enqueue(&url, 3);
    let dir = tempfile::tempdir().unwrap();
    let o = toolq_command()
        .args(["worker", "--drain"])
        .current_dir(dir.path())
        .env("TOOLQ_DB", &url)
        .output()
        .unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
    assert_eq!(completed(&db), 6);
}

#[test]
fn postgres_tls_verify_full_with_the_test_ca_connects_and_drains() {
    let s = pg::tls_server();
    let db = pg::Database::create_on(s);
    // The password role creates the schema: the database must be its own.
    pg::admin(
        s,
        &format!("ALTER DATABASE {} OWNER TO {}", db.name, pg::PASSWORD_ROLE),
    )
    .unwrap();
    let ca = s.ca_file.as_ref().unwrap();
    for mode in ["verify-full", "verify-ca"] {
        let url = with_password(
            &db,
            &format!("?sslmode={mode}&sslrootcert={}", ca.display()),
        );
        let all = ok(&url, &["init"]) + &ok(&url, &["config"]);
        assert!(!all.contains(pg::PASSWORD), "{all}");
        enqueue(&url, 2);
        ok(&url, &["worker", "--drain"]);
    }
    assert_eq!(completed(&db), 4);
}

#[test]
fn postgres_tls_verify_full_without_the_ca_fails_naming_the_certificate() {
    let s = pg::tls_server();
    let db = pg::Database::create_on(s);
    let url = with_password(&db, "?sslmode=verify-full");
    // The "system" roots: a store that lacks the test CA, with an unrelated CA in it
    // (SSL_CERT_FILE chooses the store, as for OpenSSL).
    let dir = tempfile::tempdir().unwrap();
    let roots = dir.path().join("system-roots.pem");
    let other = rcgen::generate_simple_self_signed(vec!["other.example".to_string()]).unwrap();
    std::fs::write(&roots, other.cert.pem()).unwrap();
    for args in [&["init"][..], &["worker", "--drain"]] {
        let o = toolq_command()
            .arg("--db")
            .arg(&url)
            .args(args)
            .env("SSL_CERT_FILE", &roots)
            .env_remove("SSL_CERT_DIR")
            .output()
            .unwrap();
        let err = refused(&o, 1);
        assert!(
            err.contains("certificate failed verification (sslmode=verify-full)"),
            "{err}"
        );
        assert!(err.contains("sslrootcert=FILE"), "says what to give: {err}");
    }
    assert_eq!(tables(&db), 0, "nothing was written");
}

#[test]
fn postgres_tls_require_against_a_server_without_tls_fails_saying_so() {
    let db = pg::Database::create();
    for mode in ["require", "verify-full"] {
        let url = format!(
            "postgres://{}:{}@127.0.0.1:{}/{}?sslmode={mode}",
            pg::PASSWORD_ROLE,
            pg::PASSWORD,
            pg::server().port,
            db.name
        );
        let err = refused(&toolq(&url, &["init"]), 1);
        assert!(
            err.contains(&format!(
                "the server does not accept TLS connections, which sslmode={mode} demands"
            )),
            "{err}"
        );
    }
}

#[test]
fn postgres_tls_prefer_uses_tls_when_offered_and_plain_text_when_not() {
    // The TLS server takes TCP over TLS only: prefer gets in there.
    let tls_db = pg::Database::create_on(pg::tls_server());
    ok(&format!("{}?sslmode=prefer", tls_db.url), &["init"]);
    ok(&tls_db.url, &["init"]);
    // The plain server: prefer (named, or the default) and disable connect in plain text.
    let db = pg::Database::create();
    for query in ["?sslmode=prefer", "?sslmode=disable", ""] {
        ok(&format!("{}{query}", db.url), &["init"]);
    }
}

#[test]
fn postgres_tls_a_bad_sslrootcert_or_sslmode_is_a_usage_error_naming_it() {
    let db = pg::Database::create_on(pg::tls_server());
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing-ca.pem");
    let garbage = dir.path().join("garbage-ca.pem");
    std::fs::write(&garbage, "-----BEGIN CERTIFICATE-----\nnot base64!\n").unwrap();
    let empty = dir.path().join("empty-ca.pem");
    std::fs::write(&empty, "").unwrap();
    for (query, says) in [
        (
            format!("?sslmode=verify-full&sslrootcert={}", missing.display()),
            format!("sslrootcert={} cannot be read", missing.display()),
        ),
        (
            format!("?sslmode=verify-ca&sslrootcert={}", garbage.display()),
            format!(
                "sslrootcert={} is not a PEM certificate file",
                garbage.display()
            ),
        ),
        (
            format!("?sslmode=require&sslrootcert={}", empty.display()),
            format!("sslrootcert={} holds no PEM certificate", empty.display()),
        ),
        (
            "?sslmode=allow".to_string(),
            "sslmode=allow is not supported".to_string(),
        ),
        (
            "?sslmode=require&sslrootcert=system".to_string(),
            "sslrootcert=system needs sslmode=verify-full".to_string(),
        ),
    ] {
        let url = with_password(&db, &query);
        for args in [&["init"][..], &["runs"]] {
            let err = refused(&toolq(&url, args), 2);
            assert!(err.contains(&says), "{query}: {err}");
        }
    }
}

/// `db`'s URL as the certificate role, with `query` appended.
fn as_cert_role(db: &pg::Database, query: &str) -> String {
    db.url
        .replacen("postgres@", &format!("{}@", pg::CERT_ROLE), 1)
        + query
}

#[test]
fn postgres_tls_a_client_certificate_logs_in_a_cert_role_and_a_worker_drains() {
    let s = pg::tls_server();
    let db = pg::Database::create_on(s);
    let ca = s.ca_file.as_ref().unwrap();
    let (crt, key) = s.client_cert.as_ref().unwrap();
    let url = as_cert_role(
        &db,
        &format!(
            "?sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
            ca.display(),
            crt.display(),
            key.display()
        ),
    );
    ok(&url, &["init"]);
    enqueue(&url, 2);
    let worker = worker_finishing(&url, &db, 2);
    // The server saw the certificate: every session of the worker names it.
    let sessions = db
        .rows(&format!(
            "SELECT s.client_dn FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.datname = current_database() AND a.usename = '{}'",
            pg::CERT_ROLE
        ))
        .unwrap();
    assert!(!sessions.is_empty(), "the worker holds connections");
    for dn in &sessions {
        assert_eq!(dn[0].as_deref(), Some("/CN=toolq_cert"), "{sessions:?}");
    }
    drop(worker);

    // libpq's variables give the same files when the URL does not.
    enqueue(&url, 1);
    let bare = as_cert_role(&db, "");
    let o = toolq_command()
        .args(["--db", &bare, "worker", "--drain"])
        .env("PGSSLMODE", "verify-full")
        .env("PGSSLROOTCERT", ca)
        .env("PGSSLCERT", crt)
        .env("PGSSLKEY", key)
        .output()
        .unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
    assert_eq!(completed(&db), 3);
}

#[test]
fn postgres_tls_a_cert_role_without_its_certificate_is_refused() {
    let s = pg::tls_server();
    let db = pg::Database::create_on(s);
    let err = refused(&toolq(as_cert_role(&db, "?sslmode=require"), &["init"]), 1);
    assert!(
        err.contains("connection requires a valid client certificate"),
        "the server's reason: {err}"
    );
    assert!(
        err.contains("give sslcert=FILE and sslkey=FILE"),
        "what to give: {err}"
    );
    assert_eq!(tables(&db), 0, "nothing was written");
}

#[test]
fn postgres_tls_a_bad_client_certificate_option_is_a_usage_error_naming_it() {
    let s = pg::tls_server();
    let db = pg::Database::create_on(s);
    let (crt, _) = s.client_cert.as_ref().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.key");
    for (query, says) in [
        (
            format!("?sslmode=require&sslcert={}", crt.display()),
            format!("sslcert={} needs sslkey=FILE", crt.display()),
        ),
        (
            format!(
                "?sslmode=require&sslcert={}&sslkey={}",
                crt.display(),
                missing.display()
            ),
            format!("sslkey={} cannot be read", missing.display()),
        ),
        (
            format!(
                "?sslmode=require&sslcert={}&sslkey={}",
                crt.display(),
                crt.display()
            ),
            format!("sslkey={} holds no PEM private key", crt.display()),
        ),
    ] {
        let url = as_cert_role(&db, &query);
        let err = refused(&toolq(&url, &["init"]), 2);
        assert!(err.contains(&says), "{query}: {err}");
    }
    // From the environment, the message names the variable.
    let o = toolq_command()
        .args(["--db", &as_cert_role(&db, ""), "init"])
        .env("PGSSLMODE", "verify-everything")
        .output()
        .unwrap();
    let err = refused(&o, 2);
    assert!(
        err.contains("PGSSLMODE=verify-everything is not supported"),
        "{err}"
    );
}
