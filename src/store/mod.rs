//! The store: every SQL statement lives under this module. Today's engine is SQLite
//! ([`sqlite`]); its items are re-exported here while callers move to the engine contract.

pub mod engine;
pub mod sqlite;
mod types;

pub use engine::*;
pub use sqlite::*;
pub use types::*;
