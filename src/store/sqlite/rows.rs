//! Multi-row `INSERT` statements for a cohort's rows: one statement execution per chunk
//! instead of one per row. SQLite's fixed cost per execution (reset, cursor opens, an
//! `AUTOINCREMENT` table's sequence read and write) is paid once per chunk.

use std::sync::OnceLock;

use rusqlite::{Statement, ToSql, Transaction};

use super::Ctx;
use crate::error::StoreError;

/// The largest chunk: 32 rows of up to 8 parameters stay far below SQLite's parameter limit.
const MAX_CHUNK: usize = 32;

/// Chunk sizes for `n` rows: powers of two, largest first, so a few statement texts (32, 16,
/// ..., 1 rows) cover every cohort size and stay in the prepared-statement cache.
pub(crate) fn chunks(mut n: usize) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if n == 0 {
            return None;
        }
        let size = if n >= MAX_CHUNK {
            MAX_CHUNK
        } else {
            1 << n.ilog2()
        };
        n -= size;
        Some(size)
    })
}

/// The texts of one multi-row statement by chunk size (1, 2, 4, ..., [`MAX_CHUNK`] rows),
/// each built on first use: a cohort's settle asked for them on every commit, and building
/// one is a few thousand instructions of formatting.
pub(crate) struct SqlBySize([OnceLock<String>; SIZES]);

/// Chunk sizes [`chunks`] yields: the powers of two up to [`MAX_CHUNK`].
const SIZES: usize = MAX_CHUNK.trailing_zeros() as usize + 1;

impl SqlBySize {
    /// An empty cache, for a `static`.
    pub(crate) const fn new() -> Self {
        Self([const { OnceLock::new() }; SIZES])
    }

    /// The text for `rows` rows (a power of two up to [`MAX_CHUNK`]), `make` building it once.
    pub(crate) fn get(
        &'static self,
        rows: usize,
        make: impl FnOnce(usize) -> String,
    ) -> &'static str {
        debug_assert!(rows.is_power_of_two() && rows <= MAX_CHUNK, "{rows} rows");
        self.0[(rows.trailing_zeros() as usize).min(SIZES - 1)].get_or_init(|| make(rows))
    }
}

/// `{head} VALUES (...), (...) {tail}` for `rows` rows of `row` placeholders. In `row`, `#`
/// stands for the row's next parameter and `?1` for the parameter shared by all rows, so
/// row `i`'s own parameters are numbered from `2 + i * per_row`.
pub(crate) fn values_sql(head: &str, row: &str, rows: usize, tail: &str) -> String {
    let per_row = row.matches('#').count();
    let mut sql = String::with_capacity(head.len() + tail.len() + rows * (row.len() + 24));
    sql.push_str(head);
    sql.push_str(" VALUES ");
    for i in 0..rows {
        if i > 0 {
            sql.push_str(", ");
        }
        let mut next = 2 + i * per_row;
        for part in row.split_inclusive('#') {
            match part.strip_suffix('#') {
                Some(text) => {
                    sql.push_str(text);
                    sql.push('?');
                    sql.push_str(&next.to_string());
                    next += 1;
                }
                None => sql.push_str(part),
            }
        }
    }
    sql.push(' ');
    sql.push_str(tail);
    sql
}

/// Inserts `items` with one statement per chunk. `sql(n)` is the statement for `n` rows
/// (see [`values_sql`]); `shared` binds `?1`; `bind(stmt, first, item)` binds one row's own
/// parameters from index `first` and returns the next free index.
pub(crate) fn insert_chunked<T>(
    tx: &Transaction<'_>,
    items: &[T],
    what: &str,
    sql: impl Fn(usize) -> &'static str,
    shared: &dyn ToSql,
    bind: impl Fn(&mut Statement<'_>, usize, &T) -> rusqlite::Result<usize>,
) -> Result<(), StoreError> {
    let mut rest = items;
    for size in chunks(items.len()) {
        let (chunk, tail) = rest.split_at(size);
        rest = tail;
        let mut stmt = tx.prepare_cached(sql(size)).ctx(what)?;
        stmt.raw_bind_parameter(1, shared).ctx(what)?;
        let mut next = 2;
        for item in chunk {
            next = bind(&mut stmt, next, item).ctx(what)?;
        }
        stmt.raw_execute().ctx(what)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_powers_of_two_largest_first() {
        assert_eq!(chunks(0).collect::<Vec<_>>(), Vec::<usize>::new());
        assert_eq!(chunks(1).collect::<Vec<_>>(), [1]);
        assert_eq!(chunks(16).collect::<Vec<_>>(), [16]);
        assert_eq!(chunks(15).collect::<Vec<_>>(), [8, 4, 2, 1]);
        assert_eq!(chunks(70).collect::<Vec<_>>(), [32, 32, 4, 2]);
    }

    #[test]
    fn values_number_each_rows_parameters_after_the_shared_one() {
        assert_eq!(
            values_sql(
                "INSERT INTO t (a, b, c)",
                "(#, #, ?1)",
                2,
                "ON CONFLICT DO NOTHING"
            ),
            "INSERT INTO t (a, b, c) VALUES (?2, ?3, ?1), (?4, ?5, ?1) ON CONFLICT DO NOTHING"
        );
    }
}
