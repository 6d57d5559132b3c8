//! The time limit of a run, in the one order the worker applies and `show` reports: the run's
//! own (`enqueue --timeout`, a schedule's `--timeout`), else its tool's, else `runs.timeout`.

use std::time::Duration;

/// Which of the three gave a run its time limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitSource {
    /// The run's own timeout.
    Run,
    /// Its tool's timeout (a command tool's `[tools.NAME] timeout`, or a Rust tool's own).
    Tool,
    /// `runs.timeout`, the default of every run.
    Default,
}

/// The limit of a run whose own timeout is `run_ms`, whose tool's is `tool`, under the
/// default `default`, and where it came from.
pub fn time_limit(
    run_ms: Option<i64>,
    tool: Option<Duration>,
    default: Duration,
) -> (Duration, LimitSource) {
    match (run_ms, tool) {
        (Some(ms), _) => (
            Duration::from_millis(u64::try_from(ms).unwrap_or(0)),
            LimitSource::Run,
        ),
        (None, Some(d)) => (d, LimitSource::Tool),
        (None, None) => (default, LimitSource::Default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_wins_then_the_tool_then_the_default() {
        let (s, m) = (Duration::from_secs(1), Duration::from_secs(60));
        let default = Duration::from_secs(600);
        assert_eq!(
            time_limit(Some(1000), Some(m), default),
            (s, LimitSource::Run)
        );
        assert_eq!(time_limit(None, Some(m), default), (m, LimitSource::Tool));
        assert_eq!(
            time_limit(None, None, default),
            (default, LimitSource::Default)
        );
    }
}
