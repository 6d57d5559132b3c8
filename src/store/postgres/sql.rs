//! The statement helpers every Postgres query goes through: prepared (cached per connection),
//! errors naming what was being done, columns read with their index in the error.

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::error::StoreError;

/// One statement parameter.
pub(crate) type P<'a> = &'a (dyn ToSql + Sync);

/// Prepares (cached per connection) and runs a query; errors name `what`.
pub(crate) async fn query<C: GenericClient>(
    c: &C,
    sql: &str,
    params: &[P<'_>],
    what: &str,
) -> Result<Vec<Row>, StoreError> {
    let st = prepare(c, sql, what).await?;
    query_prepared(c, &st, params, what).await
}

/// Prepares `sql` (cached per connection) without running it. A pipeline whose order
/// matters prepares its statements first: a statement still to prepare goes out a round
/// trip after the others, so it would run after them on the server.
pub(crate) async fn prepare<C: GenericClient>(
    c: &C,
    sql: &str,
    what: &str,
) -> Result<tokio_postgres::Statement, StoreError> {
    c.prepare_cached(sql)
        .await
        .map_err(|e| StoreError::pg(format!("prepare {what}"), e))
}

/// Runs a statement [`prepare`]d before: sent when the future is first polled, so the
/// statements of a `biased` join reach the server in the join's order.
pub(crate) async fn query_prepared<C: GenericClient>(
    c: &C,
    st: &tokio_postgres::Statement,
    params: &[P<'_>],
    what: &str,
) -> Result<Vec<Row>, StoreError> {
    c.query(st, params)
        .await
        .map_err(|e| StoreError::pg(what, e))
}

/// [`query`] for at most one row.
pub(crate) async fn query_opt<C: GenericClient>(
    c: &C,
    sql: &str,
    params: &[P<'_>],
    what: &str,
) -> Result<Option<Row>, StoreError> {
    Ok(query(c, sql, params, what).await?.into_iter().next())
}

/// [`query`] for exactly one row.
pub(crate) async fn query_one<C: GenericClient>(
    c: &C,
    sql: &str,
    params: &[P<'_>],
    what: &str,
) -> Result<Row, StoreError> {
    query_opt(c, sql, params, what)
        .await?
        .ok_or_else(|| StoreError::Invalid(format!("{what}: no row")))
}

/// Prepares (cached) and executes a statement; the rows it changed.
pub(crate) async fn exec<C: GenericClient>(
    c: &C,
    sql: &str,
    params: &[P<'_>],
    what: &str,
) -> Result<u64, StoreError> {
    let st = prepare(c, sql, what).await?;
    c.execute(&st, params)
        .await
        .map_err(|e| StoreError::pg(what, e))
}

/// Reads a column; a type mismatch is an error naming the column.
pub(crate) fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    idx: usize,
) -> Result<T, StoreError> {
    row.try_get(idx)
        .map_err(|e| StoreError::pg(format!("read column {idx}"), e))
}

/// Wakes every listening worker when this transaction commits (work was added or a limit
/// slot freed). Postgres folds the notifications of one transaction into one.
pub(crate) async fn notify<C: GenericClient>(c: &C) -> Result<(), StoreError> {
    exec(c, "SELECT pg_notify('toolq_changes', '')", &[], "notify").await?;
    Ok(())
}
