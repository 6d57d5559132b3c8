//! The workload on Postgres: a `postgres://` URL in place of the file path. "A fresh file"
//! becomes an emptied database (its `public` schema dropped and made again), and the checks
//! the SQLite modes read through the store are plain SQL on a connection of their own.

use std::path::Path;

use anyhow::Context;

/// The URL when `db` is one (the modes take the location as a path).
pub fn url(db: &Path) -> Option<&str> {
    db.to_str().filter(|s| toolq::db_url::is_postgres(s))
}

/// A connection for the measurement's own reads (never the worker's pool).
pub struct Sql(tokio_postgres::Client);

impl Sql {
    /// Connects to `url`.
    pub async fn connect(url: &str) -> anyhow::Result<Sql> {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .with_context(|| format!("connect to {}", toolq::db_url::redact(url)))?;
        tokio::spawn(conn);
        Ok(Sql(client))
    }

    /// The integers of the one row `sql` returns.
    pub async fn ints(&self, sql: &str) -> anyhow::Result<Vec<i64>> {
        let row = self.0.query_one(sql, &[]).await.context(sql.to_string())?;
        (0..row.len())
            .map(|i| row.try_get::<_, i64>(i).context(sql.to_string()))
            .collect()
    }

    /// The server's version, for the JSON line.
    pub async fn version(&self) -> anyhow::Result<String> {
        let row = self.0.query_one("SHOW server_version", &[]).await?;
        Ok(row.try_get(0)?)
    }
}

/// Empties the database at `url`: every table, view and function of toolq's schema goes.
pub async fn reset(url: &str) -> anyhow::Result<()> {
    let sql = Sql::connect(url).await?;
    sql.0
        .batch_execute("DROP SCHEMA IF EXISTS public CASCADE; CREATE SCHEMA public")
        .await
        .context("empty the database (drop and create schema public)")?;
    Ok(())
}
