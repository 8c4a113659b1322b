//! What `shrink` found, and how it reads: one line when there is nothing
//! to shrink, three when a schedule was found (the verdict and rate, the
//! command, the runs it took). Pure.

use super::command;
use crate::options::RunPlan;
use checker::Validity;
use std::path::PathBuf;
use std::time::Duration;

/// What `shrink` found.
#[derive(Debug)]
pub enum Found {
    /// One line: why there is nothing to shrink.
    Nothing(String),
    Shrunk(Box<Shrunk>),
    /// Not even the run's own faults broke the promise again.
    NotReproduced {
        title: String,
        faults: usize,
        tries: u32,
        interrupted: bool,
    },
}

#[derive(Debug)]
pub struct Shrunk {
    pub title: String,
    /// Faults armed before the run's first anomaly.
    pub from: usize,
    /// The smallest schedule found, as a plan to run.
    pub plan: RunPlan,
    /// Of the result's own tries, how many broke the promise.
    pub broke: u32,
    pub tried: u32,
    pub runs: u32,
    pub took: Duration,
    pub folder: PathBuf,
    /// Why a smaller schedule may exist: the search was cut short.
    pub cut: Option<String>,
}

impl Found {
    /// The exit code's verdict: 0 when there is nothing to shrink or a
    /// schedule was found, 2 (unknown) when the failure did not come back
    /// or a signal stopped the search.
    pub fn validity(&self) -> Validity {
        match self {
            Found::Nothing(_) => Validity::True,
            Found::Shrunk(s) if s.cut.as_deref() == Some(INTERRUPTED) => Validity::Unknown,
            Found::Shrunk(_) => Validity::True,
            Found::NotReproduced { .. } => Validity::Unknown,
        }
    }

    pub fn render(&self) -> String {
        self.render_for(crate::invoked::prefix())
    }

    /// As [`Found::render`], its command line starting `prefix`.
    fn render_for(&self, prefix: &str) -> String {
        match self {
            Found::Nothing(line) => format!("{line}\n"),
            Found::NotReproduced {
                title,
                faults,
                tries,
                interrupted: false,
            } => format!(
                "{title}: could not reproduce: its {} before the first anomaly kept the promise in {tries} of {tries} tries; the failure is timing-dependent beyond {tries} tries (try --tries {})\n",
                plural(*faults, "fault"),
                tries * 2
            ),
            Found::NotReproduced { title, .. } => {
                format!("{title}: interrupted before the failure came back: nothing shrunk\n")
            }
            Found::Shrunk(s) => {
                let mut text = format!(
                    "{}: kept {} of the {} before the first anomaly; INVALID in {} of {} tries\n  {}\n  {} in {:.0} s; their folders in {}\n",
                    s.title,
                    s.plan.steps.as_ref().map_or(0, Vec::len),
                    plural(s.from, "fault"),
                    s.broke,
                    s.tried,
                    command::line(prefix, &s.plan),
                    plural(s.runs as usize, "run"),
                    s.took.as_secs_f64(),
                    s.folder.display()
                );
                if let Some(cut) = &s.cut {
                    text.push_str(&format!("  {cut}: a smaller schedule may exist\n"));
                }
                text
            }
        }
    }
}

pub const INTERRUPTED: &str = "interrupted";

pub fn plural(n: usize, what: &str) -> String {
    match n {
        1 => format!("1 {what}"),
        n => format!("{n} {what}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::RunOptions;
    use workloads::Config;

    fn shrunk(cut: Option<&str>) -> Found {
        let mut o = RunOptions::new(Config::UnsafeDel, "pause".parse().unwrap());
        (o.seed, o.timing.time_limit) = (Some(7), 8);
        o.schedule = Some("1s:pause@checked".parse().unwrap());
        Found::Shrunk(Box::new(Shrunk {
            title: "unsafe-del × pause (seed 7)".into(),
            from: 3,
            plan: o.resolve().unwrap(),
            broke: 2,
            tried: 3,
            runs: 9,
            took: Duration::from_secs(95),
            folder: "/r/unsafe-del-pause/20261202T000000/shrink".into(),
            cut: cut.map(String::from),
        }))
    }

    #[test]
    fn a_schedule_found_reads_as_its_rate_its_command_and_its_cost() {
        let found = shrunk(None);
        assert_eq!(
            found.render_for("lockstorm"),
            "unsafe-del × pause (seed 7): kept 1 of the 3 faults before the first anomaly; INVALID in 2 of 3 tries\n  \
             lockstorm --config unsafe-del --nemesis pause --time-limit 8 --seed 7 --schedule 1s:pause@checked\n  \
             9 runs in 95 s; their folders in /r/unsafe-del-pause/20261202T000000/shrink\n"
        );
        assert_eq!(found.validity(), Validity::True);
        let capped = shrunk(Some("stopped at --max-runs 9"));
        assert!(capped
            .render()
            .ends_with("  stopped at --max-runs 9: a smaller schedule may exist\n"));
        assert_eq!(capped.validity(), Validity::True, "a schedule was found");
        assert_eq!(shrunk(Some(INTERRUPTED)).validity(), Validity::Unknown);
    }

    #[test]
    fn nothing_to_shrink_is_one_line_and_a_failure_that_did_not_return_is_unknown() {
        let nothing = Found::Nothing("nothing to shrink: r is VALID".into());
        assert_eq!(nothing.render().lines().count(), 1);
        assert_eq!(nothing.validity(), Validity::True);
        let gone = Found::NotReproduced {
            title: "t".into(),
            faults: 2,
            tries: 3,
            interrupted: false,
        };
        let text = gone.render();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.contains("could not reproduce")
                && text.contains("timing-dependent beyond 3 tries"),
            "{text}"
        );
        assert_eq!(gone.validity(), Validity::Unknown);
    }
}
