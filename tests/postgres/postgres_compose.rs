//! Composition on Postgres under concurrency.
