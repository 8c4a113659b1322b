//! The registry of checkers, [`CHECKERS`]: each checker's name, the
//! anomalies it reports and how it is fed, how such a line reads, and the
//! lookups on it. Everything that lists checkers or anomalies (the verdict,
//! the one pass, reports, plots, the live tally) reads them from here, so a
//! new checker is one module and one line.

use crate::finding::{Anomaly, CheckerReport, Finding, Validity};
use crate::settings::Settings;
use crate::{anomaly, counter, deadlock, fence, linear, mutex, Checker, Whole};

/// Every checker of the verdict, the one registry: its name, what it
/// reports, how it is fed. Checkers' notes appear in this order; anomalies
/// in their `rank` order wherever a reader scans them. (`faults`, stats and
/// attribution are the run's own record, not checkers of the lock: they
/// are in every pass, see [`OnePass`](crate::pass::OnePass).)
pub(crate) static CHECKERS: &[CheckerEntry] = &[
    CheckerEntry {
        name: mutex::NAME,
        anomalies: &[
            kind(anomaly::LOCK_OVERLAP, 0, Some("overlap"), Breaks::Exclusion).said(
                "pairs of holds that overlapped in time (one fault can make several)",
                "two holders at once",
            ),
            kind(anomaly::UNSAFE_ACTION, 1, Some("unsafe"), Breaks::Exclusion).said(
                "storage reads and writes sent by a holder that had lost the lock",
                "a stale holder acting",
            ),
            kind(
                anomaly::FOREIGN_RELEASE,
                4,
                Some("foreign"),
                Breaks::Exclusion,
            )
            .said(
                "releases that deleted a lock another process held",
                "another's lock released",
            ),
        ],
        fed: Fed::Events(|_| Box::<mutex::Mutex>::default()),
    },
    CheckerEntry {
        name: counter::NAME,
        anomalies: &[kind(anomaly::LOST_UPDATE, 2, Some("lost"), Breaks::Data).said(
            "acknowledged increments missing from the counter, or written twice",
            "a lost update",
        )],
        fed: Fed::Events(|s| Box::new(counter::Counter::new(s))),
    },
    CheckerEntry {
        name: fence::NAME,
        anomalies: &[kind(
            anomaly::STALE_FENCE_ACCEPTED,
            3,
            Some("stale fence"),
            Breaks::Data,
        )
        .said(
            "writes the storage took with a fence lower than one it had taken",
            "a stale fence accepted",
        )],
        fed: Fed::Events(|_| Box::<fence::Fences>::default()),
    },
    CheckerEntry {
        name: linear::NAME,
        anomalies: &[kind(anomaly::NONLINEARIZABLE, 5, None, Breaks::Exclusion).said(
            "1 if no real-time order of the lock operations fits a mutex (the search stops at the first); alone, it finds what holds cannot show",
            "a history no mutex allows",
        )],
        fed: Fed::Whole(|s| Box::new(linear::Linear::new(s))),
    },
    CheckerEntry {
        name: deadlock::NAME,
        anomalies: &[kind(
            anomaly::DEADLOCK,
            6,
            Some("deadlock"),
            Breaks::Liveness,
        )
        .said(
            "stretches with no fault active in which acquires were tried and none granted",
            "a stuck lock",
        )],
        fed: Fed::Events(|s| Box::new(deadlock::Deadlock::new(s))),
    },
];

/// A registry line's anomaly, positionally to keep the table short.
const fn kind(
    name: &'static str,
    rank: u8,
    short: Option<&'static str>,
    breaks: Breaks,
) -> AnomalyKind {
    AnomalyKind {
        name,
        rank,
        short,
        breaks,
        meaning: "",
        harm: "",
    }
}

impl AnomalyKind {
    /// With what its count counts, and the harm one occurrence does.
    const fn said(self, meaning: &'static str, harm: &'static str) -> AnomalyKind {
        AnomalyKind {
            meaning,
            harm,
            ..self
        }
    }
}

/// One checker in the registry.
pub(crate) struct CheckerEntry {
    /// Its key under `results.json`'s `checkers`.
    pub name: &'static str,
    /// What it reports, each anomaly reported by this checker alone. Its own
    /// `valid` matters to the verdict only when one of these counts under
    /// the promise.
    pub anomalies: &'static [AnomalyKind],
    pub fed: Fed,
}

/// An anomaly as the registry describes it.
#[derive(Debug, PartialEq, Eq)]
pub struct AnomalyKind {
    /// Its key under `results.json`'s `anomalies` (see [`crate::anomaly`]).
    pub name: &'static str,
    /// Its place in the order a reader scans for anomalies (reports, plots):
    /// ascending, and unique across the registry.
    pub rank: u8,
    /// Its name where room is short (a cell of the comparison picture);
    /// `None` leaves it out there.
    pub short: Option<&'static str>,
    /// Which promise it breaks.
    pub breaks: Breaks,
    /// What its count counts, in words (the summary's gloss).
    pub meaning: &'static str,
    /// The harm of one occurrence, for "3 faults led to …".
    pub harm: &'static str,
}

/// What an anomaly breaks, so which promises it counts under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Breaks {
    /// Mutual exclusion: an overlap, or what follows from one (actions and
    /// releases of a stale holder). Expected under data safety.
    Exclusion,
    /// The data itself: counts under every promise.
    Data,
    /// Progress: the lock must be granted eventually, even after its holder
    /// dies. Counts under every promise.
    Liveness,
}

/// How a checker sees the history.
pub(crate) enum Fed {
    /// Each event in time order, in the one pass the event-fed checkers
    /// share (a history in memory or streamed); made for the check's
    /// settings.
    Events(fn(&Settings) -> Box<dyn Checker>),
    /// Fed the same events, but deciding only at the end: a search that
    /// needs them together keeps (compactly) what it reads of them. A
    /// streamed check may leave it out.
    Whole(fn(&Settings) -> Box<dyn Whole>),
}

impl CheckerEntry {
    /// What a checker that was not run reports: unknown, and none of its
    /// anomalies.
    pub fn not_checked(&self) -> Finding {
        let mut report = CheckerReport::new(Validity::Unknown);
        report
            .details
            .insert("reason".into(), serde_json::json!("not checked"));
        Finding {
            report,
            anomalies: self
                .anomalies
                .iter()
                .map(|a| (a.name, Anomaly::default()))
                .collect(),
            notes: Vec::new(),
            not_asked: false,
        }
    }
}

/// Every anomaly in the registry, in the order a reader scans for them.
pub fn anomalies() -> Vec<&'static AnomalyKind> {
    let mut all: Vec<&AnomalyKind> = CHECKERS.iter().flat_map(|c| c.anomalies).collect();
    all.sort_by_key(|a| a.rank);
    all
}

/// The registered checker called `name`.
pub(crate) fn entry(name: &str) -> Option<&'static CheckerEntry> {
    CHECKERS.iter().find(|c| c.name == name)
}

/// The registry's description of the anomaly called `name`.
pub fn anomaly_kind(name: &str) -> Option<&'static AnomalyKind> {
    CHECKERS
        .iter()
        .flat_map(|c| c.anomalies)
        .find(|a| a.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_anomaly_says_what_it_counts_and_what_it_harms() {
        for kind in anomalies() {
            assert!(!kind.meaning.is_empty(), "{} has no meaning", kind.name);
            assert!(!kind.harm.is_empty(), "{} has no harm", kind.name);
        }
    }

    #[test]
    fn each_anomaly_has_one_checker_one_name_and_one_rank() {
        let all = anomalies();
        let names: HashSet<_> = all.iter().map(|a| a.name).collect();
        let ranks: HashSet<_> = all.iter().map(|a| a.rank).collect();
        assert_eq!((names.len(), ranks.len()), (all.len(), all.len()));
        let checkers: HashSet<_> = CHECKERS.iter().map(|c| c.name).collect();
        assert_eq!(checkers.len(), CHECKERS.len());
    }

    #[test]
    fn each_checker_reports_exactly_its_registered_anomalies() {
        for c in CHECKERS {
            let finding = match &c.fed {
                Fed::Events(new) => new(&Settings::default()).finish(),
                Fed::Whole(new) => new(&Settings::default()).finish(),
            };
            let found: Vec<_> = finding.anomalies.iter().map(|(n, _)| *n).collect();
            let listed: Vec<_> = c.anomalies.iter().map(|a| a.name).collect();
            assert_eq!(found, listed, "{}", c.name);
            let skipped: Vec<_> = c.not_checked().anomalies.iter().map(|(n, _)| *n).collect();
            assert_eq!(skipped, listed, "{}", c.name);
        }
    }

    #[test]
    fn a_reader_scans_for_anomalies_in_this_order() {
        let names: Vec<_> = anomalies().iter().map(|a| a.name).collect();
        assert_eq!(
            names,
            [
                "lock-overlap",
                "unsafe-action",
                "lost-update",
                "stale-fence-accepted",
                "foreign-release",
                "nonlinearizable",
                "deadlock",
            ]
        );
        // The comparison picture's cells: all but `nonlinearizable`.
        let shorts: Vec<_> = anomalies().iter().filter_map(|a| a.short).collect();
        assert_eq!(
            shorts,
            [
                "overlap",
                "unsafe",
                "lost",
                "stale fence",
                "foreign",
                "deadlock"
            ]
        );
    }
}
