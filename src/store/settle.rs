//! A settle's bookkeeping between its queries, the same on every engine. A settle writes the
//! hand-backs first, then every end through the one end-writer, then claims replacements:
//! every row it changes is locked before the messages (on Postgres, the inbox lock, then the
//! claim lock). What is shared here: the hand-backs to write, each settlement's answer in
//! batch order, and whether the settle leaves a slot free that other workers should hear of.

use std::collections::HashMap;

use crate::run::{FinishRecord, Run, StepSave};
use crate::store::{Release, Settlement};

/// The hand-backs among `batch`, in order.
pub(crate) fn releases(batch: &[Settlement]) -> impl Iterator<Item = &Release> {
    batch.iter().filter_map(|s| match s {
        Settlement::Release(r) => Some(r),
        Settlement::End(_) | Settlement::Step(_) => None,
    })
}

/// The step records among `batch`, in order. A settle writes them before the ends, so a
/// run's steps commit no later than its end.
pub(crate) fn step_saves(batch: &[Settlement]) -> impl Iterator<Item = &StepSave> {
    batch.iter().filter_map(|s| match s {
        Settlement::Step(s) => Some(&**s),
        Settlement::End(_) | Settlement::Release(_) => None,
    })
}

/// Per settlement in `batch`, whether it applied: `ended` answers its ends in order (as the
/// end-writer returned them), `released` its hand-backs in order, `saved` its step records.
pub(crate) fn applied(
    batch: &[Settlement],
    ended: &[bool],
    released: &[bool],
    saved: &[bool],
) -> Vec<bool> {
    let (mut ended, mut released, mut saved) = (ended.iter(), released.iter(), saved.iter());
    batch
        .iter()
        .map(|s| match s {
            Settlement::End(_) => ended.next(),
            Settlement::Release(_) => released.next(),
            Settlement::Step(_) => saved.next(),
        })
        .map(|ok| ok.copied().unwrap_or(false))
        .collect()
}

/// Whether a settle leaves a slot free: a hand-back or the end of a waiting run always does;
/// running attempts that ended free one per session and per tool unless the settle claimed
/// as many runs of that session and tool (a busy worker refilling its own slots changes no
/// count another worker's claim reads). `ends` and `ended` as given to and returned by the
/// end-writer; `tools`: the tool of each running attempt that ended, by run id.
pub(crate) fn frees_a_slot(
    ends: &[&FinishRecord],
    ended: &[bool],
    tools: &HashMap<String, String>,
    released: &[bool],
    claimed: &[Run],
) -> bool {
    let mut net: HashMap<(bool, &str), i64> = HashMap::new();
    let mut freed = released.contains(&true);
    for (r, &ok) in ends.iter().zip(ended) {
        match tools.get(r.id.as_str()) {
            Some(tool) if ok => {
                *net.entry((false, r.session_id.as_str())).or_default() += 1;
                *net.entry((true, tool.as_str())).or_default() += 1;
            }
            _ => freed |= ok,
        }
    }
    for run in claimed {
        *net.entry((false, run.session_id.as_str())).or_default() -= 1;
        *net.entry((true, run.tool.as_str())).or_default() -= 1;
    }
    freed || net.values().any(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(id: &str) -> Settlement {
        Settlement::Release(Release {
            id: crate::ids::RunId::from_db(id.into()),
            attempt: 1,
            token: "t".into(),
        })
    }

    #[test]
    fn answers_follow_the_batch_order() {
        let batch = vec![release("a"), release("b")];
        assert_eq!(releases(&batch).count(), 2);
        assert_eq!(applied(&batch, &[], &[true, false], &[]), [true, false]);
        assert_eq!(applied(&batch, &[], &[true], &[]), [true, false]);
    }

    #[test]
    fn a_hand_back_frees_a_slot() {
        let tools = HashMap::new();
        assert!(frees_a_slot(&[], &[], &tools, &[true], &[]));
        assert!(!frees_a_slot(&[], &[], &tools, &[false], &[]));
    }
}
