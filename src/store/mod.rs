//! The store: every SQL statement lives under this module. Two engines fill the contract
//! ([`Engine`]): SQLite ([`sqlite`], the default, one file) and Postgres ([`postgres`], a
//! server many hosts share). Callers name an engine by its path (`store::sqlite::Store`,
//! `store::postgres::PgStore`); this module re-exports only the contract.

mod claim_plan;
pub mod codec;
pub(crate) mod compose_plan;
mod end_plan;
pub mod engine;
pub(crate) mod fire_ledger;
mod keys;
mod pick;
pub mod postgres;
pub(crate) mod prune;
mod rescue_plan;
mod room;
mod run_params;
mod settle;
pub mod sqlite;
mod types;
mod upkeep;

pub use engine::*;
pub use run_params::*;
pub use types::*;
pub use upkeep::*;
