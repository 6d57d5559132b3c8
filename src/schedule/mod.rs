//! Schedules: cron and one-shot specifications, the pure firing plan (missed ticks, catch-up),
//! the stored model, and the library calls to create, inspect, cancel and enable them.

pub mod api;
pub mod cron;
pub mod error;
pub mod fire;
pub mod model;
pub mod once;
pub mod spec;
pub(crate) mod tick;
pub mod zone;

pub use api::{FireReport, ScheduleDetail, ScheduleRequest};
pub use cron::{CronSchedule, parse_timezone};
pub use error::ScheduleError;
pub use model::{Occurrence, Schedule};
pub use once::parse_one_shot;
pub use spec::{MissedPolicy, OverlapPolicy, ScheduleSpec};
pub use zone::Zone;
