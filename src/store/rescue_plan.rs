//! A rescue's bookkeeping between its queries, the same on every engine: which workers on
//! this host are dead, whether the first look (a read, without the write lock) found anything
//! worth a write, the end each run taken back gets (`decide`, from above the store), and what
//! committed. The engine reads, marks the dead workers, and writes the ends through its one
//! end-writer.

use crate::run::{FinishRecord, Run};
use crate::store::{DecideRescue, Rescue, RescueReason, Rescued, RescuedRun};

/// A worker row that has not stopped, with what is needed to check its process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveWorker {
    /// Worker id.
    pub id: String,
    /// Its process id.
    pub pid: i64,
    /// Its process start time, as recorded at registration.
    pub process_start_time: String,
}

/// The ids of the workers in `live` whose process `is_dead(pid, start_time)` says is gone.
pub(crate) fn dead(live: Vec<LiveWorker>, is_dead: impl Fn(i64, &str) -> bool) -> Vec<String> {
    live.into_iter()
        .filter(|w| is_dead(w.pid, &w.process_start_time))
        .map(|w| w.id)
        .collect()
}

/// What a rescue's first look found: the dead workers to mark, and whether a running run is
/// to be taken back. The write looks again; every write in it is fenced anyway.
#[derive(Debug, Clone, Default)]
pub(crate) struct FirstLook {
    /// Dead workers on this host.
    pub dead: Vec<String>,
    /// Whether any rescuable run is one this rescue takes.
    pub pending: bool,
}

impl FirstLook {
    /// From the live workers and the rescuable runs read.
    pub fn of(p: &Rescue, live: Vec<LiveWorker>, rescuable: &[(Run, RescueReason)]) -> FirstLook {
        FirstLook {
            dead: dead(live, p.is_dead),
            pending: rescuable.iter().any(|(run, reason)| p.takes(run, *reason)),
        }
    }

    /// Whether the rescue has anything to write.
    pub fn worth_a_write(&self) -> bool {
        !self.dead.is_empty() || self.pending
    }
}

/// The runs a rescue takes back, each with the end `decide` gave it, in the order read.
pub(crate) struct Taken {
    runs: Vec<(Run, RescueReason)>,
    records: Vec<FinishRecord>,
}

impl Taken {
    /// The runs among `rescuable` that `p` takes, and their ends.
    pub fn decide(p: &Rescue, rescuable: Vec<(Run, RescueReason)>, decide: &DecideRescue) -> Taken {
        let runs: Vec<(Run, RescueReason)> = rescuable
            .into_iter()
            .filter(|(run, reason)| p.takes(run, *reason))
            .collect();
        let records = runs
            .iter()
            .map(|(run, reason)| decide(run, *reason))
            .collect();
        Taken { runs, records }
    }

    /// The ends to write, in order.
    pub fn records(&self) -> Vec<&FinishRecord> {
        self.records.iter().collect()
    }

    /// What committed: `workers_died` workers marked, and the runs whose end applied
    /// (`applied`, per record).
    pub fn rescued(self, workers_died: usize, applied: &[bool]) -> Rescued {
        let runs = self
            .runs
            .into_iter()
            .zip(self.records)
            .zip(applied)
            .filter(|(_, ok)| **ok)
            .map(|(((run, reason), record), _)| RescuedRun {
                run,
                reason,
                outcome: record.outcome,
            })
            .collect();
        Rescued { workers_died, runs }
    }
}
