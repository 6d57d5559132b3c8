//! Idempotency keys, the same on every engine: an enqueue whose key is already held returns
//! the run that holds it when that run has the same tool and args, and is refused otherwise.

use crate::error::StoreError;
use crate::ids::RunId;
use crate::run::NewRun;

/// The run already stored under `run`'s idempotency key (`id`, `tool`, `args` as stored):
/// its id when it is the same request, else a `KeyConflict` naming what differs (`index`:
/// the run's position in its insert).
pub(crate) fn same_request(
    run: &NewRun,
    index: usize,
    (id, tool, args): (String, String, String),
) -> Result<RunId, StoreError> {
    let what = if tool != run.tool {
        format!("a different tool: stored {tool}, given {}", run.tool)
    } else if args != run.args && json(&args) != json(&run.args) {
        format!(
            "different args: stored {}, given {}",
            short(&args),
            short(&run.args)
        )
    } else {
        return Ok(RunId::from_db(id));
    };
    Err(StoreError::KeyConflict {
        index,
        key: run.idempotency_key.clone().unwrap_or_default(),
        run: id,
        what,
    })
}

/// A JSON text cut for a message.
fn short(s: &str) -> String {
    if s.chars().count() <= 200 {
        return s.to_string();
    }
    format!("{}...", s.chars().take(200).collect::<String>())
}

/// A JSON text parsed for comparison (stored and given args may differ in spacing or key order).
fn json(s: &str) -> Option<serde_json::Value> {
    serde_json::from_str(s).ok()
}
