//! Lock holds: the intervals during which a client believed it held the lock.
//!
//! A hold runs from an `acquire` `ok` to the first `release` `invoke` with the
//! same token. The release may come from another process id: after an `info`
//! a worker continues under a new id and still releases its old token. An
//! `info` acquire starts no hold: the client does not believe it holds the
//! lock, so it cannot act on that belief. A process that crashed believes
//! nothing: its holds end at its `crash` event (the lock key may live on
//! until its TTL, but that is the lock's state, not anyone's belief).

use crate::history::{f, Event, History, OpType, Process};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// The process whose `acquire` succeeded.
    pub process: Process,
    pub token: Option<String>,
    pub fence: Option<u64>,
    /// Time and `index` of the `acquire` `ok`.
    pub start: u64,
    pub start_index: u64,
    /// Time of the releasing `invoke` or of the holder's crash, or the end
    /// of the history.
    pub end: u64,
    /// `index` of the releasing `invoke` or the crash; `None` if neither came.
    pub end_index: Option<u64>,
    /// Ended by a release (not by a crash, nor by the end of the history).
    pub released: bool,
}

impl Hold {
    /// The hold an acquire `ok` starts, open until `end`.
    pub fn granted(e: &Event, end: u64) -> Self {
        Hold {
            process: e.process.clone(),
            token: e.token.clone(),
            fence: e.fence,
            start: e.time,
            start_index: e.index,
            end,
            end_index: None,
            released: false,
        }
    }

    /// Whether two holds are the same acquisition seen twice (same token).
    /// Holds without a token are never the same lock as another hold.
    pub fn same_lock(&self, other: &Hold) -> bool {
        self.has_token(&other.token)
    }

    fn has_token(&self, token: &Option<String>) -> bool {
        self.token.is_some() && self.token == *token
    }

    /// Whether `release` (a release invoke, or a crash) ends this hold: a
    /// release ends the holds with its token or, without a token, the
    /// releasing process's own tokenless holds, since there is nothing else
    /// to match. A crash ends every hold of the dead process, and the hold of
    /// the token it still held (an earlier id of the same worker took it).
    pub fn ended_by(&self, release: &Event) -> bool {
        if let Some(dead) = release.crashed() {
            return self.process == dead || self.has_token(&release.token);
        }
        match &release.token {
            Some(_) => self.has_token(&release.token),
            None => self.token.is_none() && self.process == release.process,
        }
    }

    /// Strict intersection: a hold that ends exactly when another starts
    /// does not overlap it.
    pub fn intersects(&self, other: &Hold) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// All holds of a history, sorted by start time (ties by `index`), each
/// ended as [`Hold::ended_by`] says.
pub fn holds(history: &History) -> Vec<Hold> {
    let end_of_history = history.time_span().map_or(0, |(_, max)| max);
    let mut holds: Vec<Hold> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    for e in history.in_time_order() {
        let released = match (e.kind, e.f.as_str()) {
            _ if e.crashed().is_some() => false,
            _ if e.is_nemesis() => continue,
            (OpType::Ok, f::ACQUIRE) => {
                open.push(holds.len());
                holds.push(Hold::granted(e, end_of_history));
                continue;
            }
            (OpType::Invoke, f::RELEASE) => true,
            _ => continue,
        };
        open.retain(|&id| {
            let h = &mut holds[id];
            if !h.ended_by(e) {
                return true;
            }
            h.end = e.time;
            h.end_index = Some(e.index);
            h.released = released;
            false
        });
    }
    holds
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::Hist;

    #[test]
    fn a_hold_runs_from_acquire_ok_to_release_invoke() {
        let mut h = Hist::new();
        h.acquire(1, "a").fence(7); // 0 invoke, 1 ok
        h.write(1, 1); // 2, 3
        h.release(1, "a"); // 4 invoke, 5 ok
        let history = h.build();
        let holds = holds(&history);
        assert_eq!(holds.len(), 1);
        let hold = &holds[0];
        assert_eq!((hold.start_index, hold.end_index), (1, Some(4)));
        assert_eq!(
            (hold.start, hold.end),
            (history.events[1].time, history.events[4].time)
        );
        assert_eq!(hold.fence, Some(7));
        assert!(hold.released);
    }

    #[test]
    fn an_unreleased_hold_lasts_to_the_end_of_the_history() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.nemesis("start-pause");
        h.final_read(0);
        let history = h.build();
        let hold = &holds(&history)[0];
        assert!(!hold.released);
        assert_eq!(hold.end_index, None);
        assert_eq!(hold.end, history.events.last().unwrap().time);
    }

    #[test]
    fn info_or_fail_acquires_start_no_hold() {
        let mut h = Hist::new();
        h.invoke(1, "acquire");
        h.info(1, "acquire").error("timeout");
        h.invoke(2, "acquire");
        h.fail(2, "acquire").error("lock-busy");
        assert!(holds(&h.build()).is_empty());
    }

    #[test]
    fn a_worker_under_a_new_id_ends_its_old_hold() {
        let mut h = Hist::new();
        h.acquire(1, "a"); // 0, 1
        h.invoke(1, "write").value(1); // 2
        h.info(1, "write").error("timeout"); // 3: continues as process 11
        h.release(11, "a"); // 4 invoke, 5 ok
        h.acquire(2, "b"); // 6, 7
        let holds = holds(&h.build());
        assert_eq!(holds.len(), 2);
        assert_eq!(holds[0].process, Process::Client(1));
        assert_eq!(holds[0].end_index, Some(4));
        assert!(holds[0].released && !holds[0].intersects(&holds[1]));
    }

    #[test]
    fn holds_are_ordered_by_time_not_file_order() {
        let mut h = Hist::new();
        h.acquire(1, "a").time(500); // delivered first, observed later
        h.acquire(2, "b").time(300);
        let holds = holds(&h.build());
        assert_eq!(holds[0].token.as_deref(), Some("b"));
        assert_eq!(holds[1].start, 500);
    }

    #[test]
    fn a_crash_ends_the_dead_process_hold_at_its_death() {
        let mut h = Hist::new();
        h.acquire(1, "a"); // 1
        h.read(1, 0);
        h.crash(1).token("a"); // 4
        h.acquire(2, "b"); // 6
        let history = h.build();
        let holds = holds(&history);
        assert_eq!(holds[0].end_index, Some(4));
        assert_eq!(holds[0].end, history.events[4].time);
        assert!(!holds[0].released && !holds[0].intersects(&holds[1]));
    }

    #[test]
    fn a_crash_ends_the_hold_its_worker_took_under_an_earlier_id() {
        let mut h = Hist::new();
        h.acquire(1, "a"); // 1
        h.invoke(1, "write").value(1);
        h.info(1, "write").error("timeout"); // continues as 11
        h.crash(11).token("a"); // 4
        let holds = holds(&h.build());
        assert_eq!(holds[0].end_index, Some(4));
    }

    #[test]
    fn a_crash_without_a_hold_ends_nothing() {
        let mut h = Hist::new();
        h.acquire(1, "a"); // 1
        h.invoke(2, "acquire");
        h.crash(2); // 3: died waiting for the lock
        h.release(1, "a"); // 4
        let holds = holds(&h.build());
        assert_eq!(holds.len(), 1);
        assert_eq!((holds[0].end_index, holds[0].released), (Some(4), true));
    }

    #[test]
    fn a_tokenless_release_ends_only_its_own_process_hold() {
        let mut h = Hist::new();
        h.invoke(1, "acquire");
        h.ok(1, "acquire"); // 1
        h.invoke(2, "acquire");
        h.ok(2, "acquire"); // 3
        h.invoke(2, "release"); // 4
        let holds = holds(&h.build());
        assert_eq!(holds[0].end_index, None);
        assert_eq!(holds[1].end_index, Some(4));
        assert!(!holds[0].same_lock(&holds[1]));
    }
}
