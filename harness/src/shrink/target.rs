//! What a stored run offers to shrink, and the run each candidate schedule
//! makes: pure, from `run.json` and `results.json`.

use crate::options::RunPlan;
use crate::record::RunRecord;
use checker::{Results, Validity};
use nemesis::Step;
use std::time::Duration;

/// What can be shrunk of a stored run.
#[derive(Clone, Debug, PartialEq)]
pub enum Shrinkable {
    /// The run kept its promise.
    Valid,
    /// Neither kept nor broken: nothing to reproduce.
    Unknown,
    /// It broke the promise before its first fault: no schedule to shrink.
    BeforeAnyFault { first_anomaly_ms: u64 },
    /// The faults armed before the first anomaly that breaks the promise,
    /// and how long after the last of them that anomaly came.
    Steps { steps: Vec<Step>, lag_ms: u64 },
}

/// The faults that may have caused the run's first anomaly: every step
/// armed by then (a step never acts before its time, so any fault that
/// started before the anomaly is among them).
pub fn shrinkable(record: &RunRecord, results: &Results) -> Shrinkable {
    match results.valid {
        Validity::True => return Shrinkable::Valid,
        Validity::Unknown => return Shrinkable::Unknown,
        Validity::False => {}
    }
    // An invalid run without a dated anomaly is taken as broken at its end.
    // History times count from the run's start, the schedule's from when
    // every worker was ready.
    let ready_ms = record.workers_ready_ms.unwrap_or(0);
    let first_anomaly_ms = results
        .first_anomaly_time()
        .map_or(record.options.time_limit.as_millis() as u64, |ns| {
            (ns / 1_000_000).saturating_sub(ready_ms)
        });
    let steps: Vec<Step> = (record.schedule.iter().flatten())
        .filter(|s| s.at_ms <= first_anomaly_ms)
        .copied()
        .collect();
    match steps.last() {
        None => Shrinkable::BeforeAnyFault { first_anomaly_ms },
        Some(last) => Shrinkable::Steps {
            lag_ms: first_anomaly_ms - last.at_ms,
            steps,
        },
    }
}

/// The run of a candidate: the original plan with `steps` for its schedule
/// and a time limit cut to just past the last of them: its fault, then as
/// long as the original's anomaly took to show (or the fault's own length,
/// if longer), the quiet the run keeps to settle, and a second to spare;
/// never longer than the original's.
pub fn candidate(original: &RunPlan, steps: &[Step], lag_ms: u64) -> RunPlan {
    let settle_ms = original.schedule_spec().settle_ms;
    let last = steps.last().expect("a candidate has a step");
    let end_ms = last.at_ms + last.duration_ms.max(lag_ms) + settle_ms + 1_000;
    let secs = end_ms.div_ceil(1000).min(original.time_limit.as_secs());
    RunPlan {
        steps: Some(steps.to_vec()),
        time_limit: Duration::from_secs(secs),
        ..original.clone()
    }
}

/// The same steps moved sooner, the first at `start_ms` (the gaps kept),
/// or `None` when the first is no later than that already. A fault late in
/// a long run needs the run to reach it; moved sooner, the time limit that
/// follows it is shorter.
pub fn sooner(steps: &[Step], start_ms: u64) -> Option<Vec<Step>> {
    let by = steps
        .first()?
        .at_ms
        .checked_sub(start_ms)
        .filter(|by| *by > 0)?;
    let moved = steps.iter().map(|s| Step {
        at_ms: s.at_ms - by,
        ..*s
    });
    Some(moved.collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use checker::Promise;
    use nemesis::{Action, Fault};

    fn pause(at_ms: u64) -> Step {
        Step {
            at_ms,
            action: Action::Fault(Fault::Pause),
            duration_ms: 3_000,
            at: Some(checker::Point::Checked),
        }
    }

    fn record(steps: Vec<Step>) -> RunRecord {
        let options = RunPlan {
            time_limit: Duration::from_secs(20),
            ..RunPlan::default()
        };
        serde_json::from_value(serde_json::json!({
            "promise": Promise::MutualExclusion,
            "options": options,
            "schedule": steps,
        }))
        .unwrap()
    }

    fn results(valid: Validity, first_ms: Option<u64>) -> Results {
        let mut r = checker::check(&checker::History::default(), Promise::MutualExclusion);
        r.valid = valid;
        if let Some(ms) = first_ms {
            let a = checker::Anomaly {
                count: 1,
                first_time: Some(ms * 1_000_000),
                ..Default::default()
            };
            r.anomalies.insert(checker::anomaly::LOCK_OVERLAP.into(), a);
        }
        r
    }

    #[test]
    fn the_steps_armed_before_the_first_anomaly_are_shrunk() {
        let rec = record(vec![pause(1_000), pause(6_000), pause(11_000)]);
        assert_eq!(
            shrinkable(&rec, &results(Validity::False, Some(7_500))),
            Shrinkable::Steps {
                steps: vec![pause(1_000), pause(6_000)],
                lag_ms: 1_500
            }
        );
        assert_eq!(
            shrinkable(&rec, &results(Validity::False, Some(500))),
            Shrinkable::BeforeAnyFault {
                first_anomaly_ms: 500
            }
        );
        assert_eq!(
            shrinkable(&rec, &results(Validity::True, None)),
            Shrinkable::Valid
        );
        assert_eq!(
            shrinkable(&rec, &results(Validity::Unknown, Some(7_500))),
            Shrinkable::Unknown
        );
    }

    #[test]
    fn steps_move_sooner_together_and_never_later() {
        assert_eq!(
            sooner(&[pause(9_000), pause(14_000)], 1_000),
            Some(vec![pause(1_000), pause(6_000)])
        );
        assert_eq!(sooner(&[pause(1_000)], 1_000), None);
        assert_eq!(sooner(&[pause(500)], 1_000), None);
        assert_eq!(sooner(&[], 1_000), None);
    }

    #[test]
    fn a_candidate_ends_just_past_its_last_fault() {
        let original = record(vec![]).options;
        // 6 s + 3 s of pause + 2 s to settle + 1 s: 12 s.
        let c = candidate(&original, &[pause(1_000), pause(6_000)], 1_500);
        assert_eq!(c.time_limit, Duration::from_secs(12));
        assert_eq!(c.schedule(), vec![pause(1_000), pause(6_000)]);
        assert_eq!((c.seed, c.config), (original.seed, original.config));
        // A slow anomaly keeps its time; never past the original's limit.
        let slow = candidate(&original, &[pause(1_000)], 4_200);
        assert_eq!(slow.time_limit, Duration::from_secs(9));
        let late = candidate(&original, &[pause(16_000)], 1_000);
        assert_eq!(late.time_limit, Duration::from_secs(20));
    }
}
