//! Which of the session heads a claim takes, the same on every engine: each session's best
//! runs (priority, then age) up to its free slots; across sessions, higher priority first and
//! then round-robin (every session's first before any session's second), then oldest; each
//! tool's room (its `max_running` and rate) holds over all sessions together.

use std::collections::HashMap;

/// A queued run at the head of its session, as a claim read it. `key` is whatever the engine
/// needs to claim it besides the id (SQLite: the rowid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head<K> {
    pub priority: i64,
    /// Stored timestamp text: its order is the time order.
    pub run_at: String,
    pub id: String,
    pub tool: String,
    pub key: K,
}

/// Each visited session's heads with its take: what [`pick`] chooses from.
pub(crate) type SessionHeads<K> = Vec<(Vec<Head<K>>, usize)>;

/// The runs to claim, best first, at most `max`: from each `(heads of one session, its take)`
/// the best `take`, then ordered across sessions and cut by each tool's `room` (which it
/// spends). A tool missing from `room` has none.
pub(crate) fn pick<K>(
    sessions: impl IntoIterator<Item = (Vec<Head<K>>, usize)>,
    room: &mut HashMap<String, i64>,
    max: usize,
) -> Vec<Head<K>> {
    // (rank within its session, head)
    let mut candidates: Vec<(usize, Head<K>)> = Vec::new();
    for (mut heads, take) in sessions {
        heads.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then_with(|| a.run_at.cmp(&b.run_at))
                .then_with(|| a.id.cmp(&b.id))
        });
        heads.truncate(take);
        candidates.extend(heads.into_iter().enumerate());
    }
    candidates.sort_by(|(ra, a), (rb, b)| {
        b.priority
            .cmp(&a.priority)
            .then(ra.cmp(rb))
            .then_with(|| a.run_at.cmp(&b.run_at))
            .then_with(|| a.id.cmp(&b.id))
    });
    candidates.retain(|(_, c)| match room.get_mut(&c.tool) {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
    });
    candidates.truncate(max);
    candidates.into_iter().map(|(_, h)| h).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(priority: i64, run_at: &str, id: &str, tool: &str) -> Head<()> {
        Head {
            priority,
            run_at: run_at.into(),
            id: id.into(),
            tool: tool.into(),
            key: (),
        }
    }

    fn ids(heads: &[Head<()>]) -> Vec<&str> {
        heads.iter().map(|h| h.id.as_str()).collect()
    }

    #[test]
    fn priority_first_then_round_robin_across_sessions_then_age() {
        let a = vec![head(0, "1", "a1", "t"), head(0, "2", "a2", "t")];
        let b = vec![head(0, "3", "b1", "t"), head(5, "9", "b-urgent", "t")];
        let mut room = HashMap::from([("t".to_string(), i64::MAX)]);
        let got = pick([(a, 2), (b, 2)], &mut room, 10);
        assert_eq!(ids(&got), ["b-urgent", "a1", "a2", "b1"]);
    }

    #[test]
    fn each_session_gives_at_most_its_take_and_tools_their_room() {
        let a = vec![
            head(0, "1", "a1", "slow"),
            head(0, "2", "a2", "slow"),
            head(0, "3", "a3", "fast"),
        ];
        let b = vec![head(0, "1", "b1", "slow"), head(0, "4", "b2", "fast")];
        let mut room = HashMap::from([("slow".to_string(), 1), ("fast".to_string(), 5)]);
        let got = pick([(a, 2), (b, 2)], &mut room, 10);
        // a gives a1, a2 (its take of 2); b gives b1, b2; slow has room for one: a1.
        assert_eq!(ids(&got), ["a1", "b2"]);
        assert_eq!(room["slow"], 0);
        let mut none = HashMap::new();
        assert!(pick([(vec![head(0, "1", "x", "t")], 1)], &mut none, 10).is_empty());
        let mut room = HashMap::from([("t".to_string(), i64::MAX)]);
        let many = (0..5).map(|i| head(0, &i.to_string(), &format!("r{i}"), "t"));
        assert_eq!(pick([(many.collect(), 5)], &mut room, 3).len(), 3);
    }
}
