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

/// A session's heads as [`pick_lazy`] is given them: the best of them known so far (a prefix
/// of all of them, in any order: at least the best one when it is known at all), whether
/// that is all of them (as [`pick`] would be given them), and the session's take.
#[derive(Debug, Clone)]
pub(crate) struct LazyHeads<K> {
    pub heads: Vec<Head<K>>,
    pub complete: bool,
    pub take: usize,
}

/// Head order within a session: priority first, then age, then id.
fn by_rank<K>(a: &Head<K>, b: &Head<K>) -> std::cmp::Ordering {
    b.priority
        .cmp(&a.priority)
        .then_with(|| a.run_at.cmp(&b.run_at))
        .then_with(|| a.id.cmp(&b.id))
}

/// [`pick`]'s choice and order, reading a session's heads beyond those known (`fill(i)`: all
/// of session `i`'s heads, as [`pick`] would be given them) only when the choice may reach
/// them. Each session's heads, best first, come in [`pick`]'s order across sessions
/// (priority, then rank within the session, then age), so the choice is a merge of the
/// sessions' lists: a session whose known heads are used up is read whole only when its
/// next head, of at most the priority of its last known one, could come before the best
/// known head of the others. With one head known per session and runs of one priority, a
/// claim of `max` runs over more than `max` sessions reads nothing more.
pub(crate) fn pick_lazy<K: Clone, E>(
    mut sessions: Vec<LazyHeads<K>>,
    room: &mut HashMap<String, i64>,
    max: usize,
    mut fill: impl FnMut(usize) -> Result<Vec<Head<K>>, E>,
) -> Result<Vec<Head<K>>, E> {
    for s in &mut sessions {
        s.heads.sort_by(by_rank);
        if s.complete {
            s.heads.truncate(s.take);
        }
    }
    // The rank within its session of each session's next head.
    let mut next = vec![0usize; sessions.len()];
    let mut chosen = Vec::new();
    // (priority, rank) order, then age and id: `pick`'s order across sessions.
    let before = |a: &Head<K>, ra: usize, b: &Head<K>, rb: usize| {
        b.priority
            .cmp(&a.priority)
            .then(ra.cmp(&rb))
            .then_with(|| a.run_at.cmp(&b.run_at))
            .then_with(|| a.id.cmp(&b.id))
            .is_lt()
    };
    while chosen.len() < max {
        let mut best: Option<usize> = None;
        for (i, s) in sessions.iter().enumerate() {
            let Some(h) = s.heads.get(next[i]).filter(|_| next[i] < s.take) else {
                continue;
            };
            if best.is_none_or(|b| before(h, next[i], &sessions[b].heads[next[b]], next[b])) {
                best = Some(i);
            }
        }
        // A session read in part whose next head may come first is read whole.
        let mut filled = false;
        for i in 0..sessions.len() {
            let s = &sessions[i];
            if s.complete || next[i] < s.heads.len() || next[i] >= s.take {
                continue;
            }
            // Its next head has at most the priority of its last known one, and rank next[i].
            let may_lead = match (s.heads.last(), best) {
                (Some(last), Some(b)) => {
                    let head = &sessions[b].heads[next[b]];
                    last.priority > head.priority
                        || (last.priority == head.priority && next[i] <= next[b])
                }
                _ => true,
            };
            if may_lead {
                let mut all = fill(i)?;
                all.sort_by(by_rank);
                all.truncate(sessions[i].take);
                debug_assert!(
                    all.iter()
                        .zip(&sessions[i].heads[..next[i]])
                        .all(|(a, b)| a.id == b.id),
                    "a session's heads read whole begin with those already chosen from"
                );
                sessions[i].heads = all;
                sessions[i].complete = true;
                filled = true;
            }
        }
        if filled {
            continue;
        }
        let Some(b) = best else { break };
        let head = sessions[b].heads[next[b]].clone();
        next[b] += 1;
        match room.get_mut(&head.tool) {
            Some(n) if *n > 0 => {
                *n -= 1;
                chosen.push(head);
            }
            _ => {}
        }
    }
    Ok(chosen)
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

    /// A small deterministic generator for the comparison below.
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    #[test]
    fn the_lazy_pick_chooses_what_pick_chooses_reading_less() {
        let mut rng = Lcg(7);
        let mut read_less = 0;
        for case in 0..3000 {
            let sessions = 1 + rng.below(12) as usize;
            let max = 1 + rng.below(20) as usize;
            let tools = ["a", "b", "c"];
            let mut all = Vec::new();
            for s in 0..sessions {
                let n = rng.below(8) as usize;
                let heads: Vec<Head<()>> = (0..n)
                    .map(|k| {
                        let priority = if case % 3 == 0 {
                            0
                        } else {
                            rng.below(3) as i64
                        };
                        let run_at = format!("{:03}", rng.below(50));
                        let tool = tools[rng.below(3) as usize];
                        head(priority, &run_at, &format!("s{s}r{k}"), tool)
                    })
                    .collect();
                let take = 1 + rng.below(6) as usize;
                all.push((heads, take));
            }
            let room: HashMap<String, i64> = tools
                .iter()
                .map(|t| (t.to_string(), rng.below(12) as i64))
                .collect();
            let want = pick(all.clone(), &mut room.clone(), max);
            // Known: each session's best head only.
            let lazy: Vec<LazyHeads<()>> = all
                .iter()
                .map(|(heads, take)| {
                    let mut sorted = heads.clone();
                    sorted.sort_by(by_rank);
                    sorted.truncate(1);
                    LazyHeads {
                        heads: sorted,
                        complete: heads.len() <= 1,
                        take: *take,
                    }
                })
                .collect();
            let mut fills = 0;
            let got = pick_lazy(lazy, &mut room.clone(), max, |i| {
                fills += 1;
                Ok::<_, ()>(all[i].0.clone())
            })
            .unwrap();
            assert_eq!(ids(&got), ids(&want), "case {case}");
            if fills < sessions {
                read_less += 1;
            }
        }
        assert!(
            read_less > 1000,
            "the lazy pick read every session {read_less}"
        );
    }

    #[test]
    fn one_head_per_session_is_enough_for_a_claim_over_more_sessions_than_runs() {
        let sessions: Vec<LazyHeads<()>> = (0..50)
            .map(|s| LazyHeads {
                heads: vec![head(0, &format!("{s:03}"), &format!("s{s}"), "t")],
                complete: false,
                take: 5,
            })
            .collect();
        let mut room = HashMap::from([("t".to_string(), i64::MAX)]);
        let got = pick_lazy(sessions, &mut room, 16, |_| Err("read")).unwrap();
        assert_eq!(got.len(), 16);
        assert_eq!(got[0].id, "s0");
    }
}
