//! Schedules: cron and one-shot specifications, and firing due ticks.

pub mod cron;

pub use cron::{CronSchedule, ScheduleError, parse_one_shot, parse_timezone};
