//! What the user typed: flag values refused when a filter on them would match nothing, and
//! library errors named by the flag (and the text) the user gave.

use crate::error::{Error, InputError, Result};

/// The library names request fields (`max_attempts`, `cron_expression`); on the command line
/// the user typed flags, so input errors about those fields name the flag instead.
pub(super) fn name_flags(e: Error) -> Error {
    const FIELDS: &[&str] = &[
        "priority",
        "max_attempts",
        "timeout",
        "title",
        "session",
        "args",
        "idempotency_key",
        "catchup_window",
        "delivery",
        "count",
        "by",
        "limit",
        "unique_by",
        "unique_for",
        "unique_states",
        "batch_size",
        "payload",
    ];
    match e {
        Error::Input(mut ie) if FIELDS.contains(&ie.field.as_str()) => {
            ie.field = format!("--{}", ie.field.replace('_', "-"));
            Error::Input(ie)
        }
        Error::Input(mut ie) if ie.field == "schedule" => {
            ie.reason = "give exactly one of --cron (recurring) or --at (one-shot)".into();
            Error::Input(ie)
        }
        e => e,
    }
}

/// A filter flag's value (`--tool`, `--session`, ...), refused when empty or blank: no run has
/// an empty tool or session, so such a filter would list nothing and exit 0 as if there were
/// no such runs (and `enqueue --session ''` is refused the same way).
pub(crate) fn filter(flag: &str, value: Option<String>) -> Result<Option<String>, InputError> {
    InputError::non_blank_filter(flag, value)
}

/// A library error about one of the request's fields, shown with the text the user typed for
/// it: the library knows only the parsed value (`--timeout 0m` is echoed as "0m"). `typed`
/// pairs the library's field names with the flag values given.
pub(crate) fn as_typed(e: Error, typed: &[(&str, Option<&str>)]) -> Error {
    e.with_typed_values(typed)
}

/// Parses a run id argument (exit 2 on a malformed id).
pub(crate) fn run_id(s: &str) -> Result<crate::ids::RunId> {
    Ok(s.parse()?)
}
