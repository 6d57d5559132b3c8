//! A claim's bookkeeping between its queries, the same on every engine: the running counts it
//! reads, the tools and sessions it visits and how many runs each session may take, each
//! tool's room ([`super::room`]), which heads it takes ([`super::pick`]), the per-worker room
//! for background runs, the lease tokens it hands out and the order it returns the runs in.

use std::collections::HashMap;

use crate::flow::{Paused, ToolLimits};
use crate::run::Run;

/// Running runs over all workers, per session and per tool, as a claim reads them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Running {
    per_session: HashMap<String, i64>,
    per_tool: HashMap<String, i64>,
}

impl Running {
    /// From (session, tool, running count) rows.
    pub fn of(rows: impl IntoIterator<Item = (String, String, i64)>) -> Running {
        let mut running = Running::default();
        for (session, tool, n) in rows {
            *running.per_session.entry(session).or_default() += n;
            *running.per_tool.entry(tool).or_default() += n;
        }
        running
    }

    /// Running runs of `tool`.
    pub fn of_tool(&self, tool: &str) -> i64 {
        self.per_tool.get(tool).copied().unwrap_or(0)
    }

    /// How many runs `session` may take in a claim of at most `max`: its free slots under
    /// `per_session`; `None` when it has none.
    pub fn take(&self, session: &str, per_session: i64, max: usize) -> Option<i64> {
        let free = per_session - self.per_session.get(session).copied().unwrap_or(0);
        (free > 0).then(|| free.min(max as i64))
    }

    /// Whether `tool`'s `max_running` leaves room for one more (its rate is left to the
    /// claim: reading it forgets old windows, a write).
    pub fn may_start(&self, limits: &ToolLimits, tool: &str) -> bool {
        let max = limits.get(tool).and_then(|l| l.max_running);
        max.is_none_or(|m| m > self.of_tool(tool))
    }
}

/// The worker's tools a claim looks for, sorted and each once, without the paused ones;
/// `None` when everything is paused.
pub(crate) fn wanted(paused: &Paused, tools: &[String]) -> Option<Vec<String>> {
    if paused.all {
        return None;
    }
    let mut wanted: Vec<String> = tools
        .iter()
        .filter(|t| !paused.tools.contains(*t))
        .cloned()
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    Some(wanted)
}

/// At most this many sessions are visited by a claim of at most `max` runs.
pub(crate) fn max_sessions(max: usize) -> usize {
    (max * 4).max(64)
}

/// What is left of a worker's room for background runs (`runs.background`) while it claims;
/// `None`: no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BackgroundRoom(Option<usize>);

impl BackgroundRoom {
    /// The room the claim was given.
    pub fn new(room: Option<usize>) -> BackgroundRoom {
        BackgroundRoom(room)
    }

    /// Whether it is used up: the rest of the claim takes no background run.
    pub fn full(&self) -> bool {
        self.0 == Some(0)
    }

    /// Takes a run (`background`: whether it is a background run): false, spending nothing,
    /// when a background run finds the room used up.
    pub fn take(&mut self, background: bool) -> bool {
        match &mut self.0 {
            Some(left) if background => {
                if *left == 0 {
                    return false;
                }
                *left -= 1;
                true
            }
            _ => true,
        }
    }
}

/// A fresh lease token: 24 hex digits (96 random bits), the fence of one attempt.
pub(crate) fn lease_token() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes: [u8; 12] = rand::random();
    bytes
        .iter()
        .flat_map(|b| [HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]])
        .map(char::from)
        .collect()
}

/// The order a claim returns its runs in: priority first, then age.
pub(crate) fn order_claimed(claimed: &mut [Run]) {
    claimed.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.run_at.cmp(&b.run_at)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::ToolLimit;

    #[test]
    fn takes_follow_free_slots_and_max_running() {
        let running = Running::of([
            ("a".to_string(), "t".to_string(), 2),
            ("a".to_string(), "u".to_string(), 1),
            ("b".to_string(), "t".to_string(), 1),
        ]);
        assert_eq!(running.take("a", 3, 10), None);
        assert_eq!(running.take("b", 3, 10), Some(2));
        assert_eq!(running.take("c", 3, 1), Some(1));
        let limits = ToolLimits::from([(
            "t".to_string(),
            ToolLimit {
                max_running: Some(3),
                rate: None,
            },
        )]);
        assert!(!running.may_start(&limits, "t"));
        assert!(running.may_start(&limits, "u"));
    }

    #[test]
    fn wanted_leaves_out_paused_tools_and_all() {
        let tools = ["b".to_string(), "a".to_string(), "b".to_string()];
        let mut paused = Paused::default();
        assert_eq!(wanted(&paused, &tools), Some(vec!["a".into(), "b".into()]));
        paused.tools.push("a".into());
        assert_eq!(wanted(&paused, &tools), Some(vec!["b".into()]));
        paused.all = true;
        assert_eq!(wanted(&paused, &tools), None);
    }

    #[test]
    fn background_room_admits_background_runs_until_used_up() {
        let mut room = BackgroundRoom::new(Some(1));
        assert!(room.take(false) && room.take(true));
        assert!(room.full() && !room.take(true) && room.take(false));
        let mut free = BackgroundRoom::new(None);
        assert!(!free.full() && free.take(true));
        assert_eq!(lease_token().len(), 24);
    }
}
