//! Integration tests: real SQLite files in temp dirs, real workers, real child processes.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

mod enqueue;
mod finish;
mod http;
mod tools;
