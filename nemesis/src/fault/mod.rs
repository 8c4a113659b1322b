//! The faults lockstorm can inject, `--nemesis` parsing, node targets, and
//! the scheduled actions (single faults, and scenarios that combine them).
//! Their names live in `names.rs`; what each fault is and does lives in its
//! [`Package`], one child module of this one each, which this module maps
//! it to. Adding a fault is three files: its variant in `names.rs`, its
//! package here, and its `mod` and line in [`Fault::package`] below.

mod crash;
mod delay;
mod failover;
mod kill;
mod manual_failover;
pub mod partition;
mod pause;
mod scenario;
mod skew;
mod terminate;

pub use crate::cluster::Targets;
use crate::names::or_list;
pub use crate::names::{Action, Fault};
use crate::package::Package;
use checker::Point;
use crash::Crash;
use delay::{Delay, LoseReply};
use failover::Failover;
use kill::Kill;
use manual_failover::{ManualFailover, Takeover};
use partition::Partition;
use pause::{Pause, PauseNode};
use scenario::{KillClock, SplitClock};
use serde::{Deserialize, Serialize};
use skew::Clock;
use std::fmt;
use std::str::FromStr;
use terminate::TerminateSession;

impl Fault {
    /// Everything else about the fault: the one line to add with a variant.
    pub fn package(self) -> &'static dyn Package {
        match self {
            Fault::Pause => &Pause,
            Fault::PauseNode => &PauseNode,
            Fault::Crash => &Crash,
            Fault::Kill => &Kill,
            Fault::Failover => &Failover,
            Fault::ManualFailover => &ManualFailover,
            Fault::Takeover => &Takeover,
            Fault::Clock => &Clock,
            Fault::Partition => &Partition,
            Fault::Delay => &Delay,
            Fault::LoseReply => &LoseReply,
            Fault::TerminateSession => &TerminateSession,
        }
    }

    /// The faults that strike a worker at a strike point (what `--at` and
    /// `@point` place), as each one's package says.
    pub fn striking() -> Vec<Fault> {
        Fault::ALL
            .into_iter()
            .filter(|f| f.package().strikes())
            .collect()
    }

    /// [`Fault::striking`] as prose: `pause, crash, … or …`.
    pub fn striking_names() -> String {
        or_list(
            &Fault::striking()
                .into_iter()
                .map(Fault::name)
                .collect::<Vec<_>>(),
        )
    }
}

/// `--at`: where a fault that strikes a worker lands: one strike point, or
/// `random` (each strike draws one, seeded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum At {
    Point(Point),
    Random,
}

impl At {
    /// After the holder's last lease check: the gap no check closes.
    pub fn default_point() -> Point {
        Point::Checked
    }
}

impl Default for At {
    fn default() -> Self {
        At::Point(At::default_point())
    }
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            At::Point(p) => p.fmt(f),
            At::Random => f.write_str("random"),
        }
    }
}

impl FromStr for At {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "random" => Ok(At::Random),
            _ => s
                .parse()
                .map(At::Point)
                .map_err(|e: String| format!("{e}, random")),
        }
    }
}

impl From<At> for String {
    fn from(a: At) -> String {
        a.to_string()
    }
}

impl TryFrom<String> for At {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// A nemesis and where its strikes land, as run folders, matrices and
/// expectations name it: `pause@read`. The default point is not written
/// (`pause` is `pause@checked`), nor a point for a nemesis that strikes no
/// worker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Aimed {
    pub nemesis: Nemesis,
    pub at: At,
}

impl fmt::Display for Aimed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.nemesis.fmt(f)?;
        let strikes = self.nemesis.any(|p| p.strikes());
        match strikes && self.at != At::default() {
            true => write!(f, "@{}", self.at),
            false => Ok(()),
        }
    }
}

impl FromStr for Aimed {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (nemesis, at) = match s.split_once('@') {
            Some((n, at)) => (n, at.trim().parse()?),
            None => (s, At::default()),
        };
        let nemesis: Nemesis = nemesis.parse()?;
        if s.contains('@') && !nemesis.any(|p| p.strikes()) {
            return Err(format!(
                "'{s}': @ places a fault that strikes a worker, and {nemesis} has none: use {}",
                Fault::striking_names()
            ));
        }
        Ok(Aimed { nemesis, at })
    }
}

impl Action {
    /// The scenarios: each runs when all of its faults are asked for.
    pub const SCENARIOS: [Action; 2] = [Action::SplitClock, Action::KillClock];

    pub fn package(self) -> &'static dyn Package {
        match self {
            Action::Fault(f) => f.package(),
            Action::SplitClock => &SplitClock,
            Action::KillClock => &KillClock,
        }
    }

    /// The faults `--nemesis` names to ask for this action: a scenario
    /// runs when all of its faults are asked for together.
    pub fn faults(self) -> Vec<Fault> {
        match self {
            Action::Fault(f) => vec![f],
            Action::SplitClock => vec![Fault::Partition, Fault::Clock],
            Action::KillClock => vec![Fault::Kill, Fault::Clock],
        }
    }

    /// Every action: each fault alone, then each scenario.
    pub fn all() -> impl Iterator<Item = Action> {
        Fault::ALL
            .into_iter()
            .map(Action::Fault)
            .chain(Action::SCENARIOS)
    }
}

impl From<Action> for String {
    fn from(a: Action) -> String {
        a.to_string()
    }
}

impl TryFrom<String> for Action {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Action::all()
            .find(|a| a.name() == s)
            .ok_or_else(|| format!("unknown action '{s}'"))
    }
}

/// What `--nemesis` asked for: a set of faults (empty for `none`). It is
/// written as its actions joined by `+` (`partition+clock`, `pause+kill`),
/// in run folders, run.json, summaries and expectations alike; `,` is
/// accepted in their place.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Nemesis {
    pub faults: Vec<Fault>,
    /// `all`: every fault alone and every scenario, in a seeded mix.
    pub all: bool,
}

impl Nemesis {
    pub fn none() -> Self {
        Nemesis::default()
    }

    /// Valid names for error messages.
    pub fn names() -> String {
        let mut names = vec!["none"];
        names.extend(Fault::ALL.map(Fault::name));
        names.push("all");
        names.join(", ")
    }

    pub fn has(&self, fault: Fault) -> bool {
        self.faults.contains(&fault)
    }

    /// The nemesis that asks for exactly `action`.
    pub fn of(action: Action) -> Self {
        let mut faults = action.faults();
        faults.sort();
        Nemesis { faults, all: false }
    }

    /// What a matrix's `all` stands for: no fault, each fault alone, and
    /// each scenario.
    pub fn each() -> Vec<Nemesis> {
        std::iter::once(Nemesis::none())
            .chain(Action::all().map(Nemesis::of))
            .collect()
    }

    /// The actions to schedule. Faults that form a scenario act together
    /// (`partition+clock` is Kleppmann's scenario, not two separate faults);
    /// `all` schedules every fault alone and every scenario.
    pub fn actions(&self) -> Vec<Action> {
        let scenarios: Vec<Action> = Action::SCENARIOS
            .into_iter()
            .filter(|s| s.faults().iter().all(|f| self.has(*f)))
            .collect();
        let in_scenario = |f: Fault| scenarios.iter().any(|s| s.faults().contains(&f));
        let alone = self
            .faults
            .iter()
            .filter(|f| self.all || !in_scenario(**f))
            .map(|f| Action::Fault(*f));
        scenarios.iter().copied().chain(alone).collect()
    }

    /// What the faults need from the host and the run, asked of every
    /// action the nemesis names (also those a config will not schedule).
    pub fn any(&self, need: impl Fn(&dyn Package) -> bool) -> bool {
        self.actions().into_iter().any(|a| need(a.package()))
    }
}

impl fmt::Display for Nemesis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.all {
            return f.write_str("all");
        }
        if self.faults.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<_> = self.actions().into_iter().map(Action::name).collect();
        f.write_str(&names.join("+"))
    }
}

impl FromStr for Nemesis {
    type Err = String;
    /// Fault names joined by `+` or `,`; `none` alone, or `all` for every fault.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut nemesis = Nemesis::default();
        for name in s.split([',', '+']).map(str::trim) {
            match name {
                "none" => {}
                "all" => {
                    nemesis.all = true;
                    nemesis.faults.extend(Fault::ALL);
                }
                _ => nemesis.faults.push(name.parse().map_err(|_| {
                    format!("unknown nemesis '{name}': choose from {}", Nemesis::names())
                })?),
            }
        }
        nemesis.faults.sort();
        nemesis.faults.dedup();
        Ok(nemesis)
    }
}

impl From<Nemesis> for String {
    fn from(n: Nemesis) -> String {
        n.to_string()
    }
}

impl TryFrom<String> for Nemesis {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nemesis(s: &str) -> Nemesis {
        s.parse().unwrap()
    }

    #[test]
    fn parses_lists_none_and_all() {
        assert_eq!(nemesis("none").faults, vec![]);
        assert_eq!(
            nemesis("pause-node,pause").faults,
            vec![Fault::Pause, Fault::PauseNode]
        );
        assert_eq!(nemesis("kill").faults, vec![Fault::Kill]);
        let all = nemesis("all");
        assert_eq!(all.faults, Fault::ALL.to_vec());
        assert_eq!(all.to_string(), "all");
        assert_eq!(nemesis("pause,pause-node").to_string(), "pause+pause-node");
    }

    #[test]
    fn an_unknown_name_lists_the_valid_ones() {
        let err = "pause,gc".parse::<Nemesis>().unwrap_err();
        assert_eq!(
            err,
            "unknown nemesis 'gc': choose from none, pause, pause-node, crash, kill, failover, manual-failover, takeover, clock, partition, delay, lose-reply, terminate-session, all"
        );
    }

    #[test]
    fn faults_that_form_a_scenario_act_together() {
        assert_eq!(
            nemesis("partition,clock").actions(),
            vec![Action::SplitClock]
        );
        assert_eq!(nemesis("kill,clock").actions(), vec![Action::KillClock]);
        assert_eq!(
            nemesis("clock,pause").actions(),
            vec![Action::Fault(Fault::Pause), Action::Fault(Fault::Clock)]
        );
        let all = nemesis("all").actions();
        assert!(all.contains(&Action::SplitClock) && all.contains(&Action::Fault(Fault::Clock)));
        assert_eq!(all.len(), 14);
        for a in all {
            assert_eq!(Action::try_from(String::from(a)).unwrap(), a);
        }
    }

    #[test]
    fn a_nemesis_has_one_spelling_whichever_way_it_was_typed() {
        for (typed, canonical) in [
            ("clock,partition", "partition+clock"),
            ("partition+clock", "partition+clock"),
            ("clock+kill", "kill+clock"),
            ("pause,kill,clock", "kill+clock+pause"),
            ("pause-node, pause", "pause+pause-node"),
        ] {
            let n = nemesis(typed);
            assert_eq!(n.to_string(), canonical, "{typed}");
            assert_eq!(nemesis(canonical), n, "{canonical} reads back");
        }
    }

    #[test]
    fn each_nemesis_is_none_every_fault_and_every_scenario() {
        let names: Vec<String> = Nemesis::each().iter().map(|n| n.to_string()).collect();
        assert_eq!(
            names,
            [
                "none",
                "pause",
                "pause-node",
                "crash",
                "kill",
                "failover",
                "manual-failover",
                "takeover",
                "clock",
                "partition",
                "delay",
                "lose-reply",
                "terminate-session",
                "partition+clock",
                "kill+clock"
            ]
        );
        for n in Nemesis::each().into_iter().skip(1) {
            assert_eq!(n.actions().len(), 1, "{n} is one action");
        }
    }

    #[test]
    fn a_strike_point_is_written_after_an_at_unless_it_is_the_default() {
        for (typed, canonical) in [
            ("pause", "pause"),
            ("pause@checked", "pause"),
            ("pause@read", "pause@read"),
            ("crash@random", "crash@random"),
            ("kill,pause@releasing", "pause+kill@releasing"),
        ] {
            let aimed: Aimed = typed.parse().unwrap();
            assert_eq!(aimed.to_string(), canonical, "{typed}");
            assert_eq!(canonical.parse::<Aimed>().unwrap(), aimed);
        }
        let refused = "kill@read".parse::<Aimed>().unwrap_err();
        assert!(
            refused.ends_with("use pause, crash, delay, lose-reply or terminate-session"),
            "{refused}"
        );
        assert!("pause@later"
            .parse::<Aimed>()
            .unwrap_err()
            .contains("later"));
    }

    #[test]
    fn the_striking_faults_are_those_whose_package_strikes_a_worker() {
        use Fault::*;
        assert_eq!(
            Fault::striking(),
            [Pause, Crash, Delay, LoseReply, TerminateSession]
        );
        for f in Fault::ALL {
            let aimed = format!("{f}@read").parse::<Aimed>();
            assert_eq!(aimed.is_ok(), Fault::striking().contains(&f), "{f}");
        }
    }

    #[test]
    fn each_action_s_package_bears_its_name() {
        for a in Action::all() {
            assert_eq!(a.package().name(), a.name());
        }
    }

    #[test]
    fn targets_pick_the_first_nodes() {
        let nodes: Vec<String> = (1..=5).map(|n| format!("n{n}")).collect();
        let count = |t: Targets| t.pick(&nodes).len();
        assert_eq!(
            [
                Targets::One,
                Targets::Minority,
                Targets::Majority,
                Targets::All
            ]
            .map(count),
            [1, 2, 3, 5]
        );
        let one = vec!["n1".to_string()];
        for t in [
            Targets::One,
            Targets::Minority,
            Targets::Majority,
            Targets::All,
        ] {
            assert_eq!(t.pick(&one), one);
        }
    }
}
