//! Flow control's shared types and pure decisions: pauses (what an operator stopped), per-tool
//! limits (`max_running`, `rate`) and the sliding-window arithmetic of a rate.
//!
//! Limits are configuration, so each worker enforces the limits *it* is configured with, and
//! counts against them everything in the database: the running runs of the tool on every
//! worker, and the tool's starts on every worker within the window. Workers with the same
//! config therefore agree; give every worker the same `[limits]` (see OPS.md).

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

/// What a pause covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "scope", content = "value", rename_all = "lowercase")]
pub enum PauseScope {
    /// Every run.
    All,
    /// The runs (and schedules) of one tool.
    Tool(String),
    /// The runs (and schedules) of one session.
    Session(String),
}

impl PauseScope {
    /// The stored scope kind: `all`, `tool` or `session`.
    pub fn kind(&self) -> &'static str {
        match self {
            PauseScope::All => "all",
            PauseScope::Tool(_) => "tool",
            PauseScope::Session(_) => "session",
        }
    }

    /// The stored value: the tool or session, empty for `all`.
    pub fn value(&self) -> &str {
        match self {
            PauseScope::All => "",
            PauseScope::Tool(v) | PauseScope::Session(v) => v,
        }
    }

    /// From the stored kind and value; None for a kind this build does not know.
    pub fn from_stored(kind: &str, value: &str) -> Option<PauseScope> {
        match kind {
            "all" => Some(PauseScope::All),
            "tool" => Some(PauseScope::Tool(value.to_string())),
            "session" => Some(PauseScope::Session(value.to_string())),
            _ => None,
        }
    }
}

impl fmt::Display for PauseScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PauseScope::All => write!(f, "all"),
            PauseScope::Tool(t) => write!(f, "tool {t}"),
            PauseScope::Session(s) => write!(f, "session {s}"),
        }
    }
}

/// One pause as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pause {
    /// What it covers.
    #[serde(flatten)]
    pub scope: PauseScope,
    /// Since when.
    pub since: DateTime<Utc>,
    /// Who paused (`--by`).
    pub by: Option<String>,
    /// Why (`--reason`).
    pub reason: Option<String>,
}

/// The answer to a pause.
#[derive(Debug, Clone, Serialize)]
pub struct PauseOutcome {
    /// The pause in force (the earlier one if it was already paused).
    pub pause: Pause,
    /// False when that scope was already paused (nothing changed).
    pub new: bool,
}

/// The pauses in force, as a claim sees them.
#[derive(Debug, Clone, Default)]
pub struct Paused {
    /// Everything is paused.
    pub all: bool,
    /// Paused tools.
    pub tools: Vec<String>,
    /// Paused sessions.
    pub sessions: Vec<String>,
}

impl Paused {
    /// From the stored pauses.
    pub fn of(pauses: &[Pause]) -> Paused {
        let mut p = Paused::default();
        for pause in pauses {
            match &pause.scope {
                PauseScope::All => p.all = true,
                PauseScope::Tool(t) => p.tools.push(t.clone()),
                PauseScope::Session(s) => p.sessions.push(s.clone()),
            }
        }
        p
    }

    /// Whether a run (or schedule tick) of `tool` in `session` is held by a pause.
    pub fn holds(&self, tool: &str, session: &str) -> bool {
        self.all
            || self.tools.iter().any(|t| t == tool)
            || self.sessions.iter().any(|s| s == session)
    }
}

/// At most `count` starts in any `window`: `rate = "10/1m"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Starts allowed per window.
    pub count: u32,
    /// The window's length.
    pub window: Duration,
}

impl Rate {
    /// Parses `N/DURATION` (`10/1m`, `100/1h`, `5/30s`; `10/m` means `10/1m`).
    pub fn parse(s: &str) -> Result<Rate, String> {
        let bad = || format!("{s:?} is not a rate like \"10/1m\" (starts per window)");
        let (n, w) = s.split_once('/').ok_or_else(bad)?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 {
            return Err(format!("{s:?}: the count must be at least 1"));
        }
        let w = w.trim();
        let w = if w.starts_with(|c: char| c.is_ascii_digit()) {
            w.to_string()
        } else {
            format!("1{w}")
        };
        let window = crate::clock::parse_duration(&w).map_err(|e| format!("{s:?}: window {e}"))?;
        if window.is_zero() {
            return Err(format!("{s:?}: the window must be longer than zero"));
        }
        let window = Duration::from_std(window).map_err(|_| format!("{s:?}: window too long"))?;
        Ok(Rate { count, window })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.window.num_milliseconds();
        let w = humantime::format_duration(std::time::Duration::from_millis(ms.max(0) as u64));
        write!(f, "{}/{}", self.count, w)
    }
}

/// One tool's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ToolLimit {
    /// At most this many running runs of the tool, over all workers.
    pub max_running: Option<i64>,
    /// At most this many starts per window, over all workers.
    pub rate: Option<Rate>,
}

/// Limits by tool name.
pub type ToolLimits = BTreeMap<String, ToolLimit>;

/// What a rate allows at `now`, given the tool's starts within the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// Starts allowed now.
    pub starts: u32,
    /// With no room: when the window next lets one start.
    pub opens_at: Option<DateTime<Utc>>,
}

/// What a rate's sliding window holds at some instant: the starts in `(now - window, now]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Starts inside the window.
    pub starts: u64,
    /// With `starts >= count`: the `count`-th newest start. The next start is allowed once it
    /// leaves the window (then `count - 1` remain).
    pub nth_newest: Option<DateTime<Utc>>,
}

impl Window {
    /// The window of `rate` at `now` over a tool's start times (any order).
    pub fn of(rate: Rate, now: DateTime<Utc>, starts: &[DateTime<Utc>]) -> Window {
        let from = now - rate.window;
        let mut inside: Vec<DateTime<Utc>> = starts.iter().copied().filter(|t| *t > from).collect();
        inside.sort_unstable();
        let n = inside.len();
        let count = rate.count as usize;
        Window {
            starts: n as u64,
            nth_newest: (n >= count).then(|| inside[n - count]),
        }
    }
}

/// What `rate` allows given its window: `count` less the starts inside it, or, when full,
/// when the `count`-th newest start leaves it.
pub fn room_in(rate: Rate, w: &Window) -> Room {
    let count = u64::from(rate.count);
    if w.starts < count {
        return Room {
            starts: (count - w.starts) as u32,
            opens_at: None,
        };
    }
    Room {
        starts: 0,
        opens_at: w.nth_newest.map(|t| t + rate.window),
    }
}

/// The sliding window over `recent` start times: see [`Window::of`] and [`room_in`].
pub fn room(rate: Rate, now: DateTime<Utc>, recent: &[DateTime<Utc>]) -> Room {
    room_in(rate, &Window::of(rate, now, recent))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000).expect("in range")
    }

    #[test]
    fn rates_parse_with_and_without_a_window_count() {
        let r = Rate::parse("10/1m").unwrap();
        assert_eq!((r.count, r.window), (10, Duration::minutes(1)));
        assert_eq!(Rate::parse("10/m").unwrap(), r);
        assert_eq!(
            Rate::parse(" 5 / 30s ").unwrap().window,
            Duration::seconds(30)
        );
        assert_eq!(r.to_string(), "10/1m");
        for bad in ["10", "x/1m", "0/1m", "10/0s", "10/fortnight", "-1/1m"] {
            assert!(Rate::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn an_empty_window_allows_the_whole_rate() {
        let r = Rate::parse("3/1m").unwrap();
        assert_eq!(
            room(r, t0(), &[]),
            Room {
                starts: 3,
                opens_at: None
            }
        );
    }

    #[test]
    fn a_full_window_opens_when_its_oldest_start_leaves() {
        let clock = ManualClock::new(t0());
        let r = Rate::parse("2/1m").unwrap();
        let first = clock.now();
        clock.advance(Duration::seconds(10));
        let second = clock.now();
        let starts = [first, second];
        clock.advance(Duration::seconds(5));
        assert_eq!(room(r, clock.now(), &starts[..1]).starts, 1);
        let full = room(r, clock.now(), &starts);
        assert_eq!(full.starts, 0);
        assert_eq!(full.opens_at, Some(first + Duration::minutes(1)));
        // Exactly one window after the first start, it has left: one start is allowed.
        clock.set(first + Duration::minutes(1));
        assert_eq!(room(r, clock.now(), &starts).starts, 1);
        // A millisecond before, it still counts.
        clock.set(first + Duration::minutes(1) - Duration::milliseconds(1));
        assert_eq!(room(r, clock.now(), &starts).starts, 0);
        clock.set(second + Duration::minutes(1));
        assert_eq!(room(r, clock.now(), &starts).starts, 2);
    }

    #[test]
    fn more_starts_than_the_rate_wait_for_enough_to_leave() {
        // A lowered rate (or a config that differed) may leave more starts in the window than
        // it allows: the next start waits until only count - 1 remain.
        let r = Rate::parse("2/1m").unwrap();
        let s: Vec<_> = (0..4).map(|i| t0() + Duration::seconds(i)).collect();
        let now = t0() + Duration::seconds(30);
        assert_eq!(
            room(r, now, &s),
            Room {
                starts: 0,
                opens_at: Some(s[2] + Duration::minutes(1))
            }
        );
    }

    #[test]
    fn pauses_hold_their_tool_session_or_everything() {
        let pause = |scope| Pause {
            scope,
            since: t0(),
            by: None,
            reason: None,
        };
        let p = Paused::of(&[pause(PauseScope::Tool("http".into()))]);
        assert!(p.holds("http", "s1"));
        assert!(!p.holds("echo", "s1"));
        let p = Paused::of(&[pause(PauseScope::Session("s1".into()))]);
        assert!(p.holds("echo", "s1") && !p.holds("echo", "s2"));
        assert!(Paused::of(&[pause(PauseScope::All)]).holds("x", "y"));
    }
}
