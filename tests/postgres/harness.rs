//! The throwaway server itself: started once, a fresh database per test, password auth for
//! the credential tests.

use crate::support::{TestDb, pg};

#[test]
fn each_test_gets_its_own_empty_database_on_one_server() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (TestDb::at(a.path()), TestDb::at(b.path()));
    assert_ne!(a.url, b.url);
    a.exec("CREATE TABLE probe (n bigint); INSERT INTO probe VALUES (7)");
    assert_eq!(a.count("SELECT n FROM probe"), 7);
    assert_eq!(
        b.count("SELECT count(*) FROM pg_tables WHERE tablename = 'probe'"),
        0
    );
    // One server for the whole binary.
    assert_eq!(a.url.split('/').nth(2), b.url.split('/').nth(2));
    assert!(pg::server().dir.join("data/postmaster.pid").exists());
}

#[test]
fn the_password_role_needs_its_password() {
    let s = pg::server();
    let good = format!(
        "postgres://{}:{}@127.0.0.1:{}/postgres",
        pg::PASSWORD_ROLE,
        pg::PASSWORD,
        s.port
    );
    assert_eq!(
        pg::rows(&good, "SELECT 1").unwrap(),
        vec![vec![Some("1".into())]]
    );
    let bad = format!(
        "postgres://{}:wrong@127.0.0.1:{}/postgres",
        pg::PASSWORD_ROLE,
        s.port
    );
    let e = pg::rows(&bad, "SELECT 1").unwrap_err();
    assert!(e.contains("password"), "{e}");
}
