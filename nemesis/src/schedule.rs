//! The fault schedule: a pure function of the seed, so the same seed gives the
//! same faults at the same offsets; [`place_strikes`] gives each striking
//! step its point from a stream of its own, leaving the faults the seed's.

use crate::fault::{Action, At};
#[cfg(test)]
use crate::Fault;
use checker::Point;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleSpec {
    pub seed: u64,
    /// Each action to draw from, with how long it lasts once it starts.
    pub actions: Vec<(Action, u64)>,
    /// Mean quiet time between faults.
    pub interval_ms: u64,
    pub time_limit_ms: u64,
    /// Quiet time kept at the end so the system settles before the final read.
    pub settle_ms: u64,
}

/// One fault: arm it `at_ms` after the run starts, keep it for `duration_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub at_ms: u64,
    pub action: Action,
    pub duration_ms: u64,
    /// Where a fault that strikes a worker lands (`pause`, `crash`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Point>,
}

/// Faults separated by a quiet time drawn from [interval/2, 3·interval/2],
/// each healed before `time_limit − settle`.
pub fn schedule(spec: &ScheduleSpec) -> Vec<Step> {
    let mut steps = Vec::new();
    if spec.actions.is_empty() || spec.interval_ms == 0 {
        return steps;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    let end = spec.time_limit_ms.saturating_sub(spec.settle_ms);
    let mut at = rng.random_range(spec.interval_ms / 2..=spec.interval_ms);
    loop {
        let (action, duration_ms) = spec.actions[rng.random_range(0..spec.actions.len())];
        if at + duration_ms > end {
            break;
        }
        steps.push(Step {
            at_ms: at,
            action,
            duration_ms,
            at: None,
        });
        at += duration_ms + rng.random_range(spec.interval_ms / 2..=spec.interval_ms * 3 / 2);
    }
    steps
}

/// Gives each step whose fault strikes a worker its point: `at` itself, or
/// for `random` a draw from a stream of its own, so the faults and their
/// times are those of the same seed without strike points.
pub fn place_strikes(steps: &mut [Step], at: At, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5354_5249_4b45);
    for step in steps.iter_mut().filter(|s| s.action.package().strikes()) {
        step.at = Some(match at {
            At::Point(point) => point,
            At::Random => Point::ALL[rng.random_range(0..Point::ALL.len())],
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(seed: u64) -> ScheduleSpec {
        ScheduleSpec {
            seed,
            actions: vec![
                (Action::Fault(Fault::Pause), 1_500),
                (Action::Fault(Fault::PauseNode), 1_000),
            ],
            interval_ms: 2_000,
            time_limit_ms: 30_000,
            settle_ms: 2_000,
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule_and_another_seed_another() {
        assert_eq!(schedule(&spec(42)), schedule(&spec(42)));
        assert_ne!(schedule(&spec(42)), schedule(&spec(43)));
    }

    #[test]
    fn faults_do_not_overlap_and_heal_before_the_settle_time() {
        for seed in 0..200 {
            let steps = schedule(&spec(seed));
            assert!(steps.len() >= 5, "seed {seed}: only {} faults", steps.len());
            for w in steps.windows(2) {
                assert!(w[0].at_ms + w[0].duration_ms + 1_000 <= w[1].at_ms);
            }
            let last = steps.last().unwrap();
            assert!(last.at_ms + last.duration_ms <= 28_000);
        }
    }

    #[test]
    fn strikes_get_their_point_and_random_is_seeded() {
        let mut steps = schedule(&spec(3));
        place_strikes(&mut steps, At::Point(Point::Read), 3);
        for s in &steps {
            let strikes = s.action == Action::Fault(Fault::Pause);
            assert_eq!(s.at, strikes.then_some(Point::Read), "{s:?}");
        }
        let random = |seed| {
            let mut steps = schedule(&spec(seed));
            place_strikes(&mut steps, At::Random, seed);
            steps
        };
        assert_eq!(random(3), random(3));
        let points: std::collections::HashSet<_> =
            (0..20).flat_map(random).filter_map(|s| s.at).collect();
        assert_eq!(points.len(), Point::ALL.len(), "{points:?}");
    }

    #[test]
    fn a_mix_uses_every_fault_and_none_gives_nothing() {
        let faults: std::collections::HashSet<_> =
            schedule(&spec(7)).iter().map(|s| s.action).collect();
        assert_eq!(faults.len(), 2);
        let quiet = ScheduleSpec {
            actions: vec![],
            ..spec(7)
        };
        assert!(schedule(&quiet).is_empty());
    }
}
