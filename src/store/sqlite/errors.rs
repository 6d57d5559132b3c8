//! SQLite's errors as the store's: wrapped with the action that failed and classified by
//! result code ([`Fault`]), and the busy and read-only cases the writer retries or reports.

use rusqlite::ErrorCode;

use crate::error::{EngineError, Fault, StoreError};

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if f.code == ErrorCode::DatabaseBusy || f.code == ErrorCode::DatabaseLocked)
}

pub(super) fn is_read_only(e: &StoreError) -> bool {
    matches!(e, StoreError::Sqlite { source, .. }
        if matches!(source.downcast_ref::<rusqlite::Error>(),
            Some(rusqlite::Error::SqliteFailure(f, _)) if f.code == ErrorCode::ReadOnly))
}

pub(super) fn store_error_is_busy(e: &StoreError) -> bool {
    matches!(e, StoreError::Sqlite { source, .. }
        if source.downcast_ref::<rusqlite::Error>().is_some_and(is_busy))
}

impl StoreError {
    /// Wraps a rusqlite error with the action that failed.
    pub(crate) fn sqlite(action: impl Into<String>, source: rusqlite::Error) -> Self {
        let fault = sqlite_fault(&source);
        Self::Sqlite {
            action: action.into(),
            source: EngineError::new(source, fault),
        }
    }
}

/// SQLite's verdict on an error, by its result code.
fn sqlite_fault(e: &rusqlite::Error) -> Fault {
    use rusqlite::ErrorCode as C;
    match e.sqlite_error_code() {
        Some(C::DatabaseCorrupt | C::NotADatabase) => Fault::Damaged,
        Some(
            C::DiskFull | C::SystemIoFailure | C::ReadOnly | C::CannotOpen | C::PermissionDenied,
        ) => Fault::Storage,
        _ => Fault::Other,
    }
}

impl From<r2d2::Error> for StoreError {
    fn from(e: r2d2::Error) -> Self {
        Self::Pool(EngineError::new(e, Fault::Other))
    }
}

/// Wraps a rusqlite result with the action that failed.
pub(crate) trait Ctx<T> {
    fn ctx(self, action: &str) -> Result<T, StoreError>;
}

impl<T> Ctx<T> for rusqlite::Result<T> {
    fn ctx(self, action: &str) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::sqlite(action, e))
    }
}

/// How the engine classifies SQLite's errors ([`Fault`]), and names a damaged file.
#[cfg(test)]
mod fault_tests {
    use super::*;
    use crate::error::Error;

    fn sqlite(code: std::ffi::c_int) -> StoreError {
        StoreError::sqlite(
            "claim",
            rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None),
        )
    }

    #[test]
    fn sqlite_codes_are_classified_by_what_a_worker_does_about_them() {
        use rusqlite::ffi;
        assert_eq!(sqlite(ffi::SQLITE_CORRUPT).fault(), Fault::Damaged);
        assert_eq!(sqlite(ffi::SQLITE_NOTADB).fault(), Fault::Damaged);
        for code in [ffi::SQLITE_FULL, ffi::SQLITE_IOERR, ffi::SQLITE_READONLY] {
            assert_eq!(sqlite(code).fault(), Fault::Storage, "{code}");
        }
        assert_eq!(sqlite(ffi::SQLITE_BUSY).fault(), Fault::Other);
        assert_eq!(sqlite(ffi::SQLITE_CONSTRAINT).fault(), Fault::Other);
    }

    #[test]
    fn a_damaged_file_is_named_with_what_to_do() {
        let path = std::path::Path::new("/data/q.db");
        let e = sqlite(rusqlite::ffi::SQLITE_CORRUPT).on_file(path);
        assert_eq!(e.fault(), Fault::Damaged);
        let text = e.to_string();
        assert!(
            text.contains("/data/q.db") && text.contains("claim"),
            "{text}"
        );
        assert!(text.contains("toolq --db /data/q.db check"), "{text}");
        assert_eq!(Error::from(e).exit_code(), 1);
        let full = sqlite(rusqlite::ffi::SQLITE_FULL).on_file(path);
        assert!(matches!(full, StoreError::Sqlite { .. }), "{full}");
    }
}
