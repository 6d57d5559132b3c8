//! How a run's completion message reaches its session.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::InputError;

/// How a run's completion message is delivered to its session.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// Interrupt the session as soon as it arrives.
    Interrupt,
    /// Deliver when the session is idle (the default).
    #[default]
    WhenIdle,
    /// Record it but do not notify.
    Silent,
}

impl Delivery {
    /// The mode's name as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Interrupt => "interrupt",
            Delivery::WhenIdle => "when_idle",
            Delivery::Silent => "silent",
        }
    }
}

impl FromStr for Delivery {
    type Err = InputError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "interrupt" => Ok(Delivery::Interrupt),
            "when_idle" => Ok(Delivery::WhenIdle),
            "silent" => Ok(Delivery::Silent),
            _ => Err(InputError::new(
                "delivery",
                s,
                "must be one of interrupt, when_idle, silent",
            )),
        }
    }
}
