//! The bundled SQLite carries the compile-time options of the repo's `.cargo/config.toml`
//! (`LIBSQLITE3_FLAGS`). This test binary links the same libsqlite3-sys build as `toolq`, so a
//! lost or overridden setting, which would only make toolq slower, fails here.

use rusqlite::Connection;

#[test]
fn the_bundled_sqlite_carries_the_repos_compile_options() {
    let c = Connection::open_in_memory().unwrap();
    for option in [
        "DEFAULT_MEMSTATUS=0",
        "OMIT_SHARED_CACHE",
        "USE_ALLOCA",
        "DQS=0",
    ] {
        let used: bool = c
            .query_row("SELECT sqlite_compileoption_used(?1)", [option], |r| {
                r.get(0)
            })
            .unwrap();
        assert!(
            used,
            "SQLITE_{option} is missing from the bundled SQLite: build inside the repo \
             (.cargo/config.toml sets LIBSQLITE3_FLAGS) and do not override LIBSQLITE3_FLAGS"
        );
    }
    // DQS=0: a double-quoted word is an identifier only, never a string literal.
    let err = c.query_row("SELECT \"not a column\"", [], |r| r.get::<_, String>(0));
    assert!(err.is_err(), "a double-quoted string was read as a literal");
}
