//! The one pass: every event-fed checker in the registry, and the run's own
//! record beside them, fed each event once, in time order. A check
//! finishes it; the harness's live tally asks it along the way.

use crate::availability::AvailabilityCheck;
use crate::cause::Causes;
use crate::crashes::Crashes;
use crate::exposure::ExposureCheck;
use crate::faults::Faults;
use crate::finding::Finding;
use crate::history::Event;
use crate::registry::{CheckerEntry, Fed, CHECKERS};
use crate::settings::Settings;
use crate::stats::{Stats, StatsCheck};
use crate::{Checker, Invoked, OnEvent};

/// Every event-fed checker in the registry, plus the run's own record
/// (stats, unverified faults, what anomalies may be put down to): one pass
/// over the events.
pub struct OnePass {
    checkers: Vec<(&'static CheckerEntry, Box<dyn Checker>)>,
    stats: StatsCheck,
    availability: AvailabilityCheck,
    exposure: ExposureCheck,
    faults: Faults,
    crashes: Crashes,
    causes: Causes,
}

/// A pass with no settings beyond a promise: what the history alone
/// decides (the live tally's).
impl Default for OnePass {
    fn default() -> Self {
        OnePass::new(&Settings::default())
    }
}

impl OnePass {
    /// Every event-fed checker, made for `settings`.
    pub fn new(settings: &Settings) -> Self {
        let checkers = CHECKERS
            .iter()
            .filter_map(|c| match c.fed {
                Fed::Events(new) => Some((c, new(settings))),
                Fed::Whole { .. } => None,
            })
            .collect();
        OnePass {
            checkers,
            stats: StatsCheck::default(),
            availability: AvailabilityCheck::default(),
            exposure: ExposureCheck::default(),
            faults: Faults::default(),
            crashes: Crashes::default(),
            causes: Causes::default(),
        }
    }
}

impl OnEvent for OnePass {
    fn on_event(&mut self, e: &Event, invoke: Option<&Invoked>) {
        for (_, checker) in &mut self.checkers {
            checker.on_event(e, invoke);
        }
        self.stats.on_event(e, invoke);
        self.availability.on_event(e, invoke);
        self.exposure.on_event(e, invoke);
        self.faults.on_event(e, invoke);
        self.crashes.on_event(e, invoke);
        self.causes.on_event(e, invoke);
    }
}

/// What the one pass found, each checker's finding in registry order.
pub(crate) struct PassFindings {
    pub checkers: Vec<(&'static CheckerEntry, Finding)>,
    pub stats: Stats,
    pub faults: Faults,
    pub crashes: Crashes,
    pub causes: Causes,
}

impl OnePass {
    /// The anomalies counted so far that a checker can count before the
    /// end (a live tally), in registry order, zeros included.
    pub fn so_far(&self) -> Vec<(&'static str, u64)> {
        self.checkers
            .iter()
            .flat_map(|(entry, checker)| {
                entry
                    .anomalies
                    .iter()
                    .filter_map(|a| Some((a.name, checker.so_far(a.name)?)))
            })
            .collect()
    }

    /// Finishes every checker: how often each anomaly it reports occurred,
    /// in registry order.
    pub fn counts(self) -> Vec<(&'static str, u64)> {
        self.finish()
            .checkers
            .into_iter()
            .flat_map(|(_, finding)| finding.anomalies)
            .map(|(name, a)| (name, a.count))
            .collect()
    }

    pub(crate) fn finish(self) -> PassFindings {
        PassFindings {
            checkers: self
                .checkers
                .into_iter()
                .map(|(entry, checker)| (entry, checker.finish()))
                .collect(),
            stats: Stats {
                availability: self.availability.finish(),
                exposure: self.exposure.finish(),
                ..self.stats.finish()
            },
            faults: self.faults,
            crashes: self.crashes,
            causes: self.causes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_tally_counts_what_is_known_before_the_end_in_registry_order() {
        let names: Vec<_> = OnePass::default()
            .so_far()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            names,
            [
                "lock-overlap",
                "unsafe-action",
                "foreign-release",
                "stale-fence-accepted"
            ]
        );
    }
}
