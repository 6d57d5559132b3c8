//! Where a run's artifacts (log and result blobs) live.

use crate::ids::RunId;

/// The directory of a run's artifacts: `/.background/{run_id}`.
pub fn artifact_dir(id: &RunId) -> String {
    format!("/.background/{id}")
}

/// `/.background/{run_id}/output.log`
pub fn log_path(id: &RunId) -> String {
    format!("/.background/{id}/output.log")
}

/// `/.background/{run_id}/result.json`
pub fn result_path(id: &RunId) -> String {
    format!("/.background/{id}/result.json")
}
