//! `/runs`: enqueue (one, or many in one transaction), list in keyset pages, read one, wait
//! for one to end, act on one (cancel, retry, approve, deny, signal), and its output (the
//! log as a byte range or a follow, the result). Bodies and answers are the CLI's `--json`
//! ones: the same library types build both.

mod actions;
mod enqueue;
mod output;
mod read;

use std::str::FromStr;

use super::route::Route;
use crate::error::InputError;
use crate::ids::RunId;

pub(super) fn routes() -> Vec<Route> {
    let mut all = Vec::new();
    all.extend(enqueue::routes());
    all.extend(read::routes());
    all.extend(actions::routes());
    all.extend(output::routes());
    all
}

/// What the `{id}` segment of every run route says.
const ID: &str = "The run's id (`bg_` and 32 hex digits)";

/// The `{id}` segment as a run id: anything else (another kind of id, `..%2F..`) is a 400
/// naming `run id` and the value, before any read.
fn run_id(s: &str) -> Result<RunId, InputError> {
    RunId::from_str(s)
}
