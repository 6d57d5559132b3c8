//! The `schedules` and `schedule_occurrences` tables.
