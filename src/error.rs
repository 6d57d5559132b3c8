//! The crate's error types: one per boundary, wrapped by [`Error`].

use std::fmt;

mod engine;

pub use engine::EngineError;

/// A piece of user input was wrong: names the field, shows the value, says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    /// The field, flag or argument that was wrong (e.g. `args`, `--priority`, `line 3: tool`).
    pub field: String,
    /// The offending value as given (shortened when very long).
    pub value: String,
    /// What is wrong with it.
    pub reason: String,
    /// Whether the message shows `value` (quoted, so an empty one reads `""`); false for
    /// errors about how fields combine, which have no one value ([`InputError::about`]).
    pub shows_value: bool,
}

impl InputError {
    /// Builds an input error; long values are shortened so messages stay readable.
    pub fn new(
        field: impl Into<String>,
        value: impl AsRef<str>,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            field: field.into(),
            value: shorten(value.as_ref(), 120),
            reason: reason.into(),
            shows_value: true,
        }
    }

    /// An input error about a field (or how fields combine) with no one value to show, e.g.
    /// `at: give either at or in, not both`.
    pub fn about(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            value: String::new(),
            reason: reason.into(),
            shows_value: false,
        }
    }

    /// The same error with `prefix` put before the field, e.g. `line 3: `.
    pub fn within(mut self, prefix: &str) -> Self {
        self.field = format!("{prefix}{}", self.field);
        self
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.shows_value {
            write!(f, "{}: {}", self.field, self.reason)
        } else {
            write!(f, "{} {:?}: {}", self.field, self.value, self.reason)
        }
    }
}

impl std::error::Error for InputError {}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let head: String = s.chars().take(max).collect();
    format!("{head}...")
}

/// The configuration file is unreadable or holds a bad value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("config {path}: {source}")]
    Read {
        /// Path of the file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML (or defines a table twice).
    #[error("config {path}: {message}")]
    Parse {
        /// Path of the file.
        path: String,
        /// What is wrong, from its line number on; further lines show the line and a hint.
        message: String,
    },
    /// A key is unknown (with the likely one), of the wrong type, or missing.
    #[error("config {origin}: {message}")]
    Key {
        /// Where the key was set: `file, line N`, `environment variable X` or a flag.
        origin: String,
        /// What is wrong; further lines show what was found and what is allowed.
        message: String,
    },
    /// A key has a value outside what it accepts.
    #[error("config {path}: {key} = {value}\n  {reason}")]
    Invalid {
        /// Where the key was set: `file, line N`, `environment variable X` or a flag.
        path: String,
        /// The key, dotted (`worker.concurrency`).
        key: String,
        /// The value as written.
        value: String,
        /// Why it is rejected (what it accepts).
        reason: String,
    },
}

/// A database operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database engine reported an error.
    #[error("database: {action}: {source}")]
    Sqlite {
        /// What was being done.
        action: String,
        /// The engine's error.
        source: EngineError,
    },
    /// The connection pool failed to hand out a connection.
    #[error("database: connection pool: {0}")]
    Pool(EngineError),
    /// The file was written by a newer toolq.
    #[error(
        "database {path} has schema version {found}, newer than this toolq supports ({supported}); upgrade toolq"
    )]
    SchemaTooNew {
        /// Path of the file.
        path: String,
        /// Version in the file.
        found: i64,
        /// Newest version this build knows.
        supported: i64,
    },
    /// The file is not a toolq database (or is damaged).
    #[error("database {path}: {reason}")]
    NotToolq {
        /// Path of the file.
        path: String,
        /// What was found instead.
        reason: String,
    },
    /// A pragma did not take the value it was set to.
    #[error("database: PRAGMA {name} is {got:?} after setting it to {wanted:?}")]
    Pragma {
        /// The pragma.
        name: &'static str,
        /// The value asked for.
        wanted: String,
        /// The value read back.
        got: String,
    },
    /// A store operation was asked for something its contract does not allow.
    #[error("database: {0}")]
    Invalid(String),
    /// The file does not exist (or is empty) and this command does not create it.
    #[error(
        "database {path} does not exist or is empty (toolq init, worker, enqueue and schedule add create it)"
    )]
    Missing {
        /// Path of the file.
        path: String,
    },
    /// The file is read-only for this process and the command must write to it.
    #[error("database {path} is read-only for this process: cannot {action}")]
    ReadOnly {
        /// Path of the file.
        path: String,
        /// What needed to write.
        action: String,
    },
    /// An idempotency key already names a run of another tool or with other args (exit
    /// code 2: almost always a bug in the caller).
    #[error("idempotency key {key:?} already names run {run} with {what}")]
    KeyConflict {
        /// The run's position in its insert (0 for a single enqueue).
        index: usize,
        /// The key.
        key: String,
        /// The run that holds it.
        run: String,
        /// What differs, with both values (`different args: stored {...}, given {...}`).
        what: String,
    },
    /// The store refused what it was asked to write because of what it found (exit code 2):
    /// an `--after` parent that does not exist, a batch that has completed. Nothing was
    /// written.
    #[error("{field} {value:?}: {reason}")]
    Rejected {
        /// The input at fault (`after`, `batch`).
        field: String,
        /// Its value.
        value: String,
        /// Why.
        reason: String,
    },
    /// The database URL does not parse (exit code 2). The URL is shown without its password.
    #[error("database URL {url} is not valid: {reason}")]
    BadUrl {
        /// The URL, password hidden.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The database server could not be reached or refused the login (exit code 1). The URL
    /// is shown without its password.
    #[error("cannot connect to database {url}: {reason}")]
    Connect {
        /// The URL, password hidden.
        url: String,
        /// Why (refused, timed out, authentication failed, no such database).
        reason: String,
        /// Whether trying again later may succeed: the server is down, starting, shutting
        /// down or full, or the network failed; not a refused login, a missing database or
        /// a TLS mismatch.
        transient: bool,
    },
    /// The command only makes sense for another engine (exit code 2).
    #[error("{what}")]
    Unsupported {
        /// What is not available, and what to do instead.
        what: String,
    },
    /// A blocking database task panicked or was cancelled.
    #[error("database task failed: {0}")]
    Task(String),
    /// SQLite found the file damaged (SQLITE_CORRUPT) or not a database (SQLITE_NOTADB).
    /// Retrying cannot help: whoever meets it stops and says what to do.
    #[error(
        "database {path} is damaged ({action}: {source}); stop every worker using it, run `toolq --db {path} check`, and restore it from a backup"
    )]
    Damaged {
        /// Path of the file.
        path: String,
        /// What was being done.
        action: String,
        /// The engine's error.
        source: EngineError,
    },
    /// `toolq check` found problems (listed on stdout).
    #[error(
        "database {path} failed the integrity check ({problems} problem(s) listed above); stop every worker using it and restore it from a backup"
    )]
    CheckFailed {
        /// Path of the file.
        path: String,
        /// How many problems SQLite reported.
        problems: usize,
    },
    /// Writes made no progress for `worker.stall_timeout` because of a storage error.
    #[error(
        "database {path}: writes have failed for {} with no progress ({last}); free disk space or fix the storage, then start the worker again",
        crate::clock::format_duration(std::time::Duration::from_secs(*secs))
    )]
    Stalled {
        /// Path of the file.
        path: String,
        /// How long writes failed, in seconds.
        secs: u64,
        /// The last storage error.
        last: String,
    },
}

/// What kind of failure a [`StoreError`] is, which decides how a worker reacts to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The file is damaged: fatal, retrying cannot help.
    Damaged,
    /// The storage refuses writes (disk or database full, I/O error, read-only, cannot open):
    /// persistent until someone fixes it; back off and report the state, not every failure.
    Storage,
    /// Anything else (busy after the retries, a bad row, a task failure).
    Other,
}

impl StoreError {
    /// A [`StoreError::Rejected`].
    pub fn rejected(
        field: impl Into<String>,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) -> StoreError {
        StoreError::Rejected {
            field: field.into(),
            value: value.into(),
            reason: reason.into(),
        }
    }

    /// What kind of failure this is (the engine classifies its own errors).
    pub fn fault(&self) -> Fault {
        match self {
            StoreError::Damaged { .. } => Fault::Damaged,
            StoreError::Stalled { .. }
            | StoreError::Connect {
                transient: true, ..
            } => Fault::Storage,
            StoreError::Sqlite { source, .. } => source.fault(),
            _ => Fault::Other,
        }
    }

    /// The same error, as [`StoreError::Damaged`] naming `path` when it is one.
    pub fn on_file(self, path: &std::path::Path) -> Self {
        match self {
            StoreError::Sqlite { action, source } if source.fault() == Fault::Damaged => {
                StoreError::Damaged {
                    path: path.display().to_string(),
                    action,
                    source,
                }
            }
            other => other,
        }
    }
}

/// Any toolq error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad user input (exit code 2).
    #[error("{0}")]
    Input(#[from] InputError),
    /// A bad schedule specification (exit code 2).
    #[error("{0}")]
    Schedule(#[from] crate::schedule::ScheduleError),
    /// A bad configuration file (exit code 2).
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The database failed (exit code 1).
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The named object does not exist (exit code 1).
    #[error("{what} {id} not found")]
    NotFound {
        /// What kind of object.
        what: &'static str,
        /// Its id.
        id: String,
    },
    /// The operation does not fit the object's current state (exit code 1).
    #[error("{0}")]
    Conflict(String),
    /// An I/O error outside the database (exit code 1).
    #[error("{action}: {source}")]
    Io {
        /// What was being done.
        action: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl InputError {
    /// A filter's value (`--session S`, `?session=S`): absent matches all; given, it must not
    /// be empty or blank, which would match nothing.
    pub fn non_blank_filter(
        flag: &str,
        value: Option<String>,
    ) -> Result<Option<String>, InputError> {
        match value {
            Some(v) if v.is_empty() => Err(InputError::new(
                flag,
                v,
                "must not be empty: a filter on an empty value matches nothing (leave the flag out to match all)",
            )),
            Some(v) if v.trim().is_empty() => Err(InputError::new(
                flag,
                v,
                "must not be blank: a filter on a blank value matches nothing (leave the flag out to match all)",
            )),
            v => Ok(v),
        }
    }
}

impl Error {
    /// A library error about one of the request's fields, shown with the text the user typed
    /// for it: the library knows only the parsed value (`--timeout 0m` is echoed as "0m").
    /// `typed` pairs the library's field names with the values given.
    pub fn with_typed_values(self, typed: &[(&str, Option<&str>)]) -> Error {
        match self {
            Error::Input(mut ie) => {
                if let Some((_, Some(text))) = typed.iter().find(|(f, _)| *f == ie.field) {
                    ie.value = (*text).to_string();
                }
                Error::Input(ie)
            }
            e => e,
        }
    }

    /// The process exit code for this error: 2 for bad input, 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Input(_) | Error::Schedule(_) | Error::Config(_) => 2,
            Error::Store(
                StoreError::SchemaTooNew { .. }
                | StoreError::NotToolq { .. }
                | StoreError::Missing { .. }
                | StoreError::BadUrl { .. }
                | StoreError::Rejected { .. }
                | StoreError::Unsupported { .. },
            ) => 2,
            _ => 1,
        }
    }

    /// Wraps an I/O error with the action that failed.
    pub fn io(action: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            action: action.into(),
            source,
        }
    }
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_error_names_field_and_value() {
        let e = InputError::new("--priority", "abc", "must be an integer").within("line 3: ");
        assert_eq!(
            e.to_string(),
            "line 3: --priority \"abc\": must be an integer"
        );
        assert_eq!(Error::from(e).exit_code(), 2);
    }

    #[test]
    fn an_empty_value_is_shown_quoted_and_a_rule_shows_none() {
        let e = InputError::new("tool", "", "is not registered");
        assert_eq!(e.to_string(), "tool \"\": is not registered");
        let e = InputError::about("at", "give either at or in, not both");
        assert_eq!(e.to_string(), "at: give either at or in, not both");
    }

    #[test]
    fn long_values_are_shortened() {
        let e = InputError::new("args", "x".repeat(500), "bad");
        assert!(e.to_string().len() < 200);
    }
}
