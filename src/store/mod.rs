//! The store: every SQL statement lives under this module. Two engines fill the contract
//! ([`Engine`]): SQLite ([`sqlite`], the default, one file) and Postgres ([`postgres`], a
//! server many hosts share). SQLite's items are re-exported here while callers move to the
//! engine contract.

mod claim_plan;
mod end_plan;
pub mod engine;
mod keys;
mod pick;
pub mod postgres;
mod rescue_plan;
mod room;
mod settle;
pub mod sqlite;
mod types;

pub use engine::*;
pub use postgres::PgStore;
pub use sqlite::*;
pub use types::*;
