//! Schedules: cron and one-shot specifications, the pure firing plan (missed ticks, catch-up),
//! the stored model, and the library calls to create, inspect, cancel and enable them.

pub mod api;
pub mod cron;
pub mod fire;
pub mod model;
pub mod spec;
pub(crate) mod tick;
pub mod zone;

pub use api::{FireReport, ScheduleDetail, ScheduleRequest};
pub use cron::{CronSchedule, ScheduleError, parse_one_shot, parse_timezone};
pub use model::{Occurrence, Schedule};
pub use spec::{MissedPolicy, OverlapPolicy, ScheduleSpec};
pub use zone::Zone;
