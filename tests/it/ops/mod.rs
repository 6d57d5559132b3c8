//! Operations: retention, WAL checkpoints, metrics, logs, the ops views and OPS.md queries.

mod fixture;
mod logs;
mod metrics;
mod prune;
mod views;
sqlite_only! {
    mod wal;
}
