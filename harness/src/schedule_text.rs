//! `--schedule`: a fault schedule written out by hand (or printed by
//! `shrink`), in place of the seed's draw. Each step is `AT:FAULT[@POINT]`,
//! steps joined by commas: `1.402s:pause@checked,5.8s:kill`. `AT` is when
//! the fault is armed, after the run starts (`1.5s` or `1500ms`); `FAULT` a
//! fault or scenario name as `--nemesis` takes it; `@POINT` where a fault
//! that strikes a worker lands (without it, `--at`). How long each fault
//! lasts is not written: it comes from the fault's own options
//! (`--pause-ms`, `--fault-ms`, …), as in a seeded schedule. Parsing is
//! pure; what a written step needs of the run (its fault among the
//! nemesis's, time to settle) is checked by [`ScheduleText::steps`].

use checker::Point;
use nemesis::{Action, At, ScheduleSpec, Step};
use std::fmt;
use std::str::FromStr;

/// One written step: no duration yet (the run's options give it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrittenStep {
    pub at_ms: u64,
    pub action: Action,
    pub point: Option<Point>,
}

/// `--schedule` as given: the steps in the order written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleText(pub Vec<WrittenStep>);

const FORM: &str =
    "write AT:FAULT[@POINT] steps joined by commas, e.g. 1.5s:pause@checked,6s:pause";

impl ScheduleText {
    /// The written form of steps a run made: each with its point, so it
    /// reads back to the same steps whatever `--at` is.
    pub fn of(steps: &[Step]) -> Self {
        ScheduleText(
            steps
                .iter()
                .map(|s| WrittenStep {
                    at_ms: s.at_ms,
                    action: s.action,
                    point: s.at,
                })
                .collect(),
        )
    }

    /// The steps for a run whose seeded draw would come from `spec`: each
    /// fault one the run's nemesis offers on its config (lasting what its
    /// options say), a strike without a point landing at `at`, each after
    /// the one before it has ended, and the last healed `spec.settle_ms` before the time limit.
    pub fn steps(&self, spec: &ScheduleSpec, at: At) -> Result<Vec<Step>, String> {
        if self.0.is_empty() {
            return Err(
                "--schedule is empty: give at least one step, or run with --nemesis none".into(),
            );
        }
        let mut steps: Vec<Step> = Vec::with_capacity(self.0.len());
        for w in &self.0 {
            let Some(&(_, duration_ms)) = spec.actions.iter().find(|(a, _)| *a == w.action) else {
                return Err(format!(
                    "--schedule names {}, which --nemesis does not offer on this config: add it to --nemesis, or drop it from --schedule",
                    w.action
                ));
            };
            if let Some(prev) = steps.last() {
                // The nemesis plays one fault at a time: a step due while
                // the last still acts would start late, not when written.
                let free_ms = prev.at_ms + prev.duration_ms;
                if w.at_ms < free_ms {
                    return Err(format!(
                        "--schedule: step {} starts before the fault before it ends (at {}): write the steps in time order, each after the last has ended",
                        written(w),
                        seconds(free_ms)
                    ));
                }
            }
            steps.push(Step {
                at_ms: w.at_ms,
                action: w.action,
                duration_ms,
                at: w.point,
            });
        }
        // A strike without a point lands where `--at` says, as in a seeded
        // schedule (`random` draws from the seed's own stream).
        let mut unplaced: Vec<Step> = steps.iter().filter(|s| s.at.is_none()).copied().collect();
        nemesis::place_strikes(&mut unplaced, at, spec.seed);
        let mut placed = unplaced.into_iter();
        for s in steps.iter_mut().filter(|s| s.at.is_none()) {
            s.at = placed.next().and_then(|p| p.at);
        }
        let last = steps.last().expect("not empty");
        let needs_ms = last.at_ms + last.duration_ms + spec.settle_ms;
        if needs_ms > spec.time_limit_ms {
            return Err(format!(
                "--schedule: its last fault ends at {} and the run keeps {} to settle before the final read: use --time-limit {} or more",
                seconds(last.at_ms + last.duration_ms),
                seconds(spec.settle_ms),
                needs_ms.div_ceil(1000)
            ));
        }
        Ok(steps)
    }
}

/// A time as the schedule writes it: seconds, to the millisecond.
pub fn seconds(ms: u64) -> String {
    match ms % 1000 {
        0 => format!("{}s", ms / 1000),
        frac => {
            let frac = format!("{frac:03}");
            format!("{}.{}s", ms / 1000, frac.trim_end_matches('0'))
        }
    }
}

fn written(w: &WrittenStep) -> String {
    match w.point {
        Some(p) => format!("{}:{}@{p}", seconds(w.at_ms), w.action),
        None => format!("{}:{}", seconds(w.at_ms), w.action),
    }
}

impl fmt::Display for ScheduleText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let steps: Vec<String> = self.0.iter().map(written).collect();
        f.write_str(&steps.join(","))
    }
}

impl FromStr for ScheduleText {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim().is_empty() {
            return Err(format!("--schedule is empty: {FORM}"));
        }
        s.split(',')
            .map(step)
            .collect::<Result<_, _>>()
            .map(ScheduleText)
    }
}

fn step(text: &str) -> Result<WrittenStep, String> {
    let text = text.trim();
    let bad = |why: &str| format!("bad step '{text}' ({why}): {FORM}");
    let (at, rest) = text.split_once(':').ok_or_else(|| bad("no ':'"))?;
    let (action, point) = match rest.split_once('@') {
        Some((a, p)) => (a, Some(p.parse::<Point>().map_err(|e| bad(&e))?)),
        None => (rest, None),
    };
    let action = Action::try_from(action.to_string()).map_err(|e| bad(&e))?;
    if point.is_some() && !action.package().strikes() {
        return Err(bad(&format!(
            "{action} strikes no worker, so it takes no @POINT"
        )));
    }
    Ok(WrittenStep {
        at_ms: millis(at).ok_or_else(|| bad("AT is a time such as 1.5s or 1500ms"))?,
        action,
        point,
    })
}

/// `1.5s`, `2s` or `1500ms`, to the millisecond.
fn millis(text: &str) -> Option<u64> {
    if let Some(ms) = text.strip_suffix("ms") {
        return ms.parse().ok();
    }
    let secs = text.strip_suffix('s')?;
    let (whole, frac) = secs.split_once('.').unwrap_or((secs, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    let frac: u64 = format!("{frac:0<3}").parse().ok()?;
    whole.checked_mul(1000)?.checked_add(frac)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nemesis::Fault;

    fn spec() -> ScheduleSpec {
        ScheduleSpec {
            seed: 1,
            actions: vec![
                (Action::Fault(Fault::Pause), 3_000),
                (Action::Fault(Fault::Kill), 800),
            ],
            interval_ms: 2_000,
            time_limit_ms: 12_000,
            settle_ms: 2_000,
        }
    }

    #[test]
    fn a_printed_schedule_parses_back_to_the_same_steps() {
        let mut steps = nemesis::schedule(&ScheduleSpec {
            time_limit_ms: 60_000,
            ..spec()
        });
        nemesis::place_strikes(&mut steps, At::Random, 1);
        assert!(steps.len() > 5, "{steps:?}");
        let text = ScheduleText::of(&steps).to_string();
        let back: ScheduleText = text.parse().unwrap();
        let long = ScheduleSpec {
            time_limit_ms: 60_000,
            ..spec()
        };
        assert_eq!(back.steps(&long, At::default()).unwrap(), steps, "{text}");
        assert_eq!(back.to_string(), text);
    }

    #[test]
    fn times_are_seconds_or_milliseconds_and_points_fill_from_at() {
        let text: ScheduleText = "1.4s:pause,1500ms:kill, 5.25s:pause@releasing"
            .parse()
            .unwrap();
        let _ = text.steps(&spec(), At::default()).unwrap_err();
        let text: ScheduleText = "0.5s:pause,4000ms:kill, 5.25s:pause@releasing"
            .parse()
            .unwrap();
        let steps = text.steps(&spec(), At::Point(Point::Read)).unwrap();
        let got: Vec<_> = steps
            .iter()
            .map(|s| (s.at_ms, s.duration_ms, s.at))
            .collect();
        assert_eq!(
            got,
            [
                (500, 3_000, Some(Point::Read)),
                (4_000, 800, None),
                (5_250, 3_000, Some(Point::Releasing))
            ]
        );
        assert_eq!(seconds(1_400), "1.4s");
        assert_eq!(seconds(5_000), "5s");
        assert_eq!(seconds(1_402), "1.402s");
        assert_eq!(seconds(50), "0.05s");
    }

    #[test]
    fn bad_input_is_one_line_that_names_the_fix() {
        for bad in [
            "",
            "1.5s",
            "1.5:pause",
            "1.5s:gc",
            "1.2345s:pause",
            "1s:kill@checked",
            "1s:pause@later",
        ] {
            let e = bad.parse::<ScheduleText>().unwrap_err();
            assert!(
                !e.contains('\n') && e.contains("e.g. 1.5s:pause@checked"),
                "{bad}: {e}"
            );
        }
        let refused = |text: &str| {
            let t: ScheduleText = text.parse().unwrap();
            t.steps(&spec(), At::default()).unwrap_err()
        };
        assert!(refused("1s:clock").contains("add it to --nemesis"));
        assert!(refused("3s:pause,2s:pause").contains("in time order"));
        assert!(refused("1s:pause,3.999s:kill").contains("ends (at 4s)"));
        let late = refused("8s:pause");
        assert!(late.contains("use --time-limit 13 or more"), "{late}");
    }
}
