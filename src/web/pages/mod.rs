//! One file per page (as cli/ has one per command), each with the same shape: a handler
//! that reads the page's data (its JSON), and functions that render its sections.

pub mod approvals;
pub mod batch;
pub mod batches;
pub mod bulk;
pub mod fallback;
pub mod overview;
pub mod run;
pub mod runs;
pub mod schedule;
pub mod schedules;
pub mod session;
pub mod workers;
