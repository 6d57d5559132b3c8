//! Why a schedule specification is invalid: a cron expression, a time zone or a one-shot
//! time. Every message names the field and shows the bad value.

/// Why a schedule specification is invalid. Messages name the field and value.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ScheduleError {
    /// The time zone is not a known IANA zone name.
    #[error("unknown time zone {0:?}: give an IANA name such as Europe/Berlin or UTC")]
    UnknownTimezone(String),
    /// The expression does not have exactly five whitespace-separated fields.
    #[error(
        "cron {expr:?}: expected 5 fields (minute hour day-of-month month day-of-week), got {got}"
    )]
    FieldCount {
        /// The expression as given (trimmed).
        expr: String,
        /// How many fields were found.
        got: usize,
    },
    /// The expression starts with `@` but is not a supported macro.
    #[error(
        "cron {expr:?}: unknown macro (expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)"
    )]
    UnknownMacro {
        /// The expression as given (trimmed).
        expr: String,
    },
    /// A numeric value lies outside the field's allowed range.
    #[error("cron {expr:?}: {field} {value} is outside {min}-{max}")]
    OutOfRange {
        /// The expression as given (trimmed).
        expr: String,
        /// The field name, e.g. `minute`.
        field: &'static str,
        /// The offending value.
        value: u32,
        /// Smallest allowed value.
        min: u32,
        /// Largest allowed value.
        max: u32,
    },
    /// A value is neither a number nor a name the field accepts.
    #[error("cron {expr:?}: {field} {token:?} is not valid (expected {expected})")]
    InvalidValue {
        /// The expression as given (trimmed).
        expr: String,
        /// The field name, e.g. `month`.
        field: &'static str,
        /// The offending token.
        token: String,
        /// What the field accepts.
        expected: &'static str,
    },
    /// A step (`/n`) is not a whole number of at least 1.
    #[error("cron {expr:?}: {field} step in {token:?} must be a whole number of at least 1")]
    InvalidStep {
        /// The expression as given (trimmed).
        expr: String,
        /// The field name.
        field: &'static str,
        /// The list item containing the step, e.g. `*/0`.
        token: String,
    },
    /// A range `a-b` has `a` greater than `b`.
    #[error("cron {expr:?}: {field} range {token:?} starts after it ends")]
    InvalidRange {
        /// The expression as given (trimmed).
        expr: String,
        /// The field name.
        field: &'static str,
        /// The offending range.
        token: String,
    },
    /// The expression is valid syntax but never fires within about five years.
    #[error("cron {expr:?}: never fires in the next 5 years")]
    NeverFires {
        /// The expression as given (trimmed).
        expr: String,
    },
    /// A one-shot time looks like a date-time but carries no UTC offset.
    #[error("time {value:?} has no UTC offset; add Z or an offset such as +02:00 (RFC 3339)")]
    MissingOffset {
        /// The text as given (trimmed).
        value: String,
    },
    /// A one-shot time is not an RFC 3339 timestamp at all.
    #[error("time {value:?} is not an RFC 3339 timestamp such as 2026-12-01T10:00:00Z")]
    InvalidTimestamp {
        /// The text as given (trimmed).
        value: String,
    },
    /// A one-shot time is not after the current time.
    #[error("time {value:?} is in the past (now is {now})")]
    InPast {
        /// The text as given (trimmed).
        value: String,
        /// The current time, RFC 3339 in UTC.
        now: String,
    },
    /// A one-shot time after the last instant toolq stores (9999-12-31T23:59:59.999Z in UTC).
    #[error("time {value:?} is after the year 9999 in UTC")]
    TooLate {
        /// The text as given (trimmed).
        value: String,
    },
}
