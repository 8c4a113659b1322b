//! The faults and actions there are, and their names: on the command line
//! (`--nemesis`), in run folders and run.json, and in the history's fault
//! events. Each name is its variant's, kebab-cased by strum (serde's
//! `rename_all` agrees, and a test holds them to it), or written once in a
//! `serialize` where it is not (the scenarios'). What each one does lives in
//! its package, which takes its name from here; `fault.rs` maps each to its
//! package. A leaf module, so the packages can import it.

use serde::{Deserialize, Serialize};
use std::fmt;
use strum::{Display, EnumCount, EnumString, IntoStaticStr, VariantArray};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(EnumCount, VariantArray, IntoStaticStr, Display, EnumString)]
#[strum(serialize_all = "kebab-case", parse_err_ty = String, parse_err_fn = unknown_fault)]
pub enum Fault {
    /// SIGSTOP the lock holder in its critical section, for longer than the TTL.
    Pause,
    /// SIGSTOP the node the lock lives on (the primary, for `replicated`).
    PauseNode,
    /// SIGKILL a worker's process group at a strike point; it is replaced.
    Crash,
    /// SIGKILL lock nodes right after an acquisition; restart them later.
    Kill,
    /// Partition the primary from its replicas, kill it after an
    /// acquisition, heal once Sentinel has promoted a replica.
    Failover,
    /// Ask the replica of a Redis Cluster's slot master to take over by
    /// `CLUSTER FAILOVER`, in step with its master, while a worker holds.
    ManualFailover,
    /// Cut a Redis Cluster's slot master off from its replica, and once a
    /// worker holds, make the replica take the slots by `CLUSTER FAILOVER
    /// TAKEOVER`; heal once the old master follows it.
    Takeover,
    /// Jump lock nodes' wall clocks (and optionally skew the holder's lease clock).
    Clock,
    /// Cut links between workers and lock nodes (in the fault proxy).
    Partition,
    /// Hold one request of a worker, or its reply, past the lease, in the
    /// fault proxy; then let it go on.
    Delay,
    /// Forward one request of a worker, drop its reply and reset the
    /// connection, in the fault proxy.
    LoseReply,
    /// End the lock holder's PostgreSQL session from the server while the
    /// holder is held at a strike point.
    TerminateSession,
}

impl Fault {
    /// Every fault, in the order the variants are declared (which is also
    /// how a nemesis sorts its faults).
    pub const ALL: [Fault; Fault::COUNT] = *Fault::VARIANTS
        .first_chunk()
        .expect("COUNT is the number of VARIANTS");

    /// The name `--nemesis` takes and the schedule records.
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// `start-<fault>`: the fault has taken effect (recorded once its
    /// evidence is in), as `checker::history::fault::started` reads it.
    pub fn start_event(self) -> String {
        format!("start-{self}")
    }

    /// `stop-<fault>`: the fault is healed, as
    /// `checker::history::fault::stopped` reads it.
    pub fn stop_event(self) -> String {
        format!("stop-{self}")
    }
}

fn unknown_fault(s: &str) -> String {
    format!(
        "unknown fault '{s}': choose one of {}",
        Names(Fault::VARIANTS)
    )
}

/// `skip-<fault or scenario>`: it could not act this time (its value says
/// why).
pub(crate) fn skip_event(name: &str) -> String {
    format!("skip-{name}")
}

/// One scheduled action: a single fault, or a scenario that needs two faults
/// acting together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
#[derive(IntoStaticStr, Display)]
pub enum Action {
    #[strum(transparent)]
    Fault(Fault),
    /// Kleppmann's: the holder reaches n1–n3 only, n3's clock jumps past the
    /// TTL, a second client reaching n3–n5 only takes the lock.
    #[strum(serialize = "partition+clock")]
    SplitClock,
    /// Two nodes killed and restarted empty leave the holder a bare
    /// majority; a clock jump on one of them takes it away.
    #[strum(serialize = "kill+clock")]
    KillClock,
}

impl Action {
    /// A fault's name, or a scenario's (its faults joined by `+`).
    pub fn name(self) -> &'static str {
        self.into()
    }
}

/// Names as prose, for messages and help: `a, b or c`.
pub fn or_list(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => one.to_string(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// A list of valid names, for messages: displayed as `one, two, three`.
#[derive(Clone, Copy, Debug)]
pub struct Names<T: 'static>(pub &'static [T]);

impl<T: Copy + Into<&'static str>> fmt::Display for Names<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, name) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str((*name).into())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use checker::history::fault::{started, stopped};

    #[test]
    fn each_fault_has_one_name_everywhere_and_its_events_read_back_to_it() {
        for f in Fault::ALL {
            let name = f.name();
            assert_eq!(f.to_string(), name);
            assert_eq!(name.parse::<Fault>(), Ok(f));
            assert_eq!(serde_json::to_value(f).unwrap(), name, "serde agrees");
            assert_eq!(Action::Fault(f).name(), name);
            assert_eq!(started(&f.start_event()), Some(name));
            assert_eq!(stopped(&f.stop_event()), Some(name));
        }
        assert_eq!(Fault::PauseNode.start_event(), "start-pause-node");
        assert_eq!(Fault::Kill.stop_event(), "stop-kill");
        assert_eq!(Action::SplitClock.to_string(), "partition+clock");
    }

    #[test]
    fn an_unknown_fault_lists_the_valid_ones() {
        assert_eq!(
            "gc".parse::<Fault>(),
            Err("unknown fault 'gc': choose one of pause, pause-node, crash, kill, failover, manual-failover, takeover, clock, partition, delay, lose-reply, terminate-session".to_string())
        );
    }
}
