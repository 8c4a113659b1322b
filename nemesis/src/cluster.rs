//! What a nemesis may do to the nodes. The harness owns the processes and
//! implements this; faults only decide *when* and *which*.

use crate::names::Names;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use strum::{Display, EnumString, IntoStaticStr, VariantArray};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A node as a fault sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRef {
    pub name: String,
    pub pid: u32,
    /// The `run_id` its `INFO server` reported when it was seen to be ours:
    /// a restarted node answers with a new one.
    pub run_id: String,
}

/// Where a probe connection leaves from: the address a cut link's packets
/// would come from, or the harness's own (never cut), to show the node is up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Harness,
    Worker(usize),
    Node(String),
}

/// A node's wall clock read once: the time it said (ns since the epoch) and
/// this machine's real time just before the reading was asked for and just
/// after it came, between which the node read its clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockReading {
    /// What said it (`TIME`, `Date`), for a message.
    pub via: &'static str,
    pub node_ns: i64,
    pub before_ns: i64,
    pub after_ns: i64,
}

/// A machine other than this one that runs nodes (`--nodes`): its
/// processes as a fault acts on them, by their PIDs there, over its
/// connection. A node with no host runs here, and faults signal it here.
pub trait Host: Send + Sync {
    /// How `--nodes` named it, for events and messages.
    fn name(&self) -> String;
    /// SIGSTOP to the process group `leader` leads there.
    fn suspend_group(&self, leader: u32) -> BoxFuture<'_, std::io::Result<()>>;
    /// SIGCONT to that group.
    fn resume_group(&self, leader: u32) -> BoxFuture<'_, std::io::Result<()>>;
    /// The state letter (`ps`'s) of each of `pids` that exists there.
    fn states(&self, pids: &[u32]) -> BoxFuture<'_, std::io::Result<Vec<(u32, char)>>>;
    /// The state letter of each process of the group `leader` leads there.
    fn group_states(&self, leader: u32) -> BoxFuture<'_, std::io::Result<Vec<(u32, char)>>>;
}

/// A primary the topology put in the old one's place: the node, and on a
/// Redis Cluster the config epoch it claims the lock's slot under, read in
/// the same look that found it (the evidence a vote was won).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Promotion {
    pub node: String,
    pub epoch: Option<u64>,
}

impl Promotion {
    /// `value` with the epoch, when there is one.
    pub fn with_epoch(&self, mut value: serde_json::Value) -> serde_json::Value {
        if let Some(epoch) = self.epoch {
            value["epoch"] = serde_json::json!(epoch);
        }
        value
    }
}

pub trait Cluster: Send + Sync {
    /// The host node `name` runs on, when not this machine.
    fn host_of(&self, _name: &str) -> Option<std::sync::Arc<dyn Host>> {
        None
    }
    /// The node the lock lives on now: the primary for `replicated` (as
    /// Sentinel names it), the master of the lock key's slot for `cluster`
    /// (as most nodes name it), otherwise the lock node.
    fn primary(&self) -> BoxFuture<'_, Option<NodeRef>>;
    /// The other data nodes of a replicated topology (not Sentinels).
    fn replicas_of(&self, primary: &str) -> Vec<String>;
    /// SIGKILLs a node and reaps it; it stays down until [`Cluster::restart`].
    /// Returns the node as it was before the kill.
    fn kill(&self, name: &str) -> BoxFuture<'_, std::io::Result<NodeRef>>;
    /// Starts a killed node again with its own settings (keeping its data
    /// only if persistence is on) and waits until it answers as our new
    /// child (its `INFO server` pid is the child's); fails otherwise.
    fn restart(&self, name: &str) -> BoxFuture<'_, Result<NodeRef, String>>;
    /// Drops every packet between node `a` and each of `others`.
    fn partition<'a>(
        &'a self,
        a: &'a str,
        others: &'a [String],
    ) -> BoxFuture<'a, std::io::Result<()>>;
    /// The lock's nodes are members of one consensus cluster (etcd's), which
    /// talk to each other: a partition cuts members from members.
    fn consensus(&self) -> bool {
        false
    }
    /// Whether consensus member `node` knows a leader now.
    fn has_leader(&self, _node: &str) -> BoxFuture<'_, Result<bool, String>> {
        Box::pin(async { Err("not a consensus cluster".to_string()) })
    }
    /// Removes every rule this run added.
    fn heal(&self) -> BoxFuture<'_, std::io::Result<()>>;
    /// The lock's nodes are one Redis Cluster of lockstorm's: they gossip
    /// and vote over their bus, so a partition cuts the slot's master off
    /// from the other nodes (not the workers from it).
    fn votes(&self) -> bool {
        false
    }
    /// A lock node that is down is replaced by a replica the topology
    /// promotes itself (Sentinel's, or Redis Cluster's, vote).
    fn fails_over(&self) -> bool {
        false
    }
    /// Asks `replica`, of lockstorm's own Redis Cluster, to take its
    /// master's slots by `CLUSTER FAILOVER` (coordinated) or, with
    /// `takeover`, `CLUSTER FAILOVER TAKEOVER`; returns once it began.
    fn hand_over(&self, _replica: &str, _takeover: bool) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async { Err("not a Redis Cluster lockstorm started".to_string()) })
    }
    /// Waits until the topology has agreed that `node` is down, the step
    /// before it votes in a replacement: the cluster flags it `fail`, or
    /// Sentinel's quorum `o_down`. Returns who said so, `None` on timeout
    /// (or on a topology that does not fail over).
    fn await_marked_down(&self, _node: &str, _timeout: Duration) -> BoxFuture<'_, Option<String>> {
        Box::pin(async { None })
    }
    /// Waits until Sentinel (or the cluster) names a primary other than `old`.
    fn await_promotion(&self, old: &str, timeout: Duration) -> BoxFuture<'_, Option<Promotion>>;
    /// The independent lock nodes, in order (n1, n2, …); the primary's
    /// replicas and Sentinels are not among them.
    fn lock_nodes(&self) -> Vec<String>;
    /// The nodes a node fault hits: the storage node for `storage`, the
    /// primary for `replicated`, the lock node for single-node configs,
    /// else `targets` of the lock nodes.
    fn targets(&self, targets: Targets) -> BoxFuture<'_, Vec<NodeRef>>;
    /// Shifts a node's wall clock (through its time shim) by `offset_ns`,
    /// running at `rate` from now on.
    fn set_clock(&self, node: &str, offset_ns: i64, rate: f64) -> std::io::Result<()>;
    /// Whether a TCP connection from `from` to `node`'s port is accepted
    /// within `timeout` (false on a timeout or refusal; `Err` when the probe
    /// itself cannot be made).
    fn connects(
        &self,
        from: Source,
        node: &str,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<bool, String>>;
    /// `node`'s wall clock read once (a Redis node's `TIME`, an etcd
    /// member's HTTP `Date`).
    fn wall_clock(&self, node: &str) -> BoxFuture<'_, Result<ClockReading, String>>;
    /// Runs the user's command for `fault` on `node` (a deployment lockstorm
    /// did not start): `None` when there is none, else what it printed, or
    /// why it failed (a non-zero exit, a timeout).
    fn run_command(
        &self,
        _fault: &str,
        _node: &str,
    ) -> BoxFuture<'_, Option<Result<String, String>>> {
        Box::pin(async { None })
    }
    /// `node`'s `ROLE` (`master`, `slave`), `None` when it does not answer.
    fn role_of(&self, node: &str) -> BoxFuture<'_, Option<String>>;
    /// Ends `worker`'s PostgreSQL lock session if it holds a lock, and
    /// waits until its backend has exited: the pids of the backends ended
    /// (none: it held no lock).
    fn end_lock_session(&self, _worker: &str) -> BoxFuture<'_, Result<Vec<i32>, String>> {
        Box::pin(async { Err("the run has no PostgreSQL".to_string()) })
    }
}

/// Which lock nodes a node fault hits, on configs with several (Redlock);
/// configs with one lock node, or a primary, always hit that one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(VariantArray, IntoStaticStr, Display, EnumString)]
#[strum(serialize_all = "kebab-case", parse_err_ty = String, parse_err_fn = unknown_targets)]
pub enum Targets {
    One,
    Minority,
    #[default]
    Majority,
    All,
    /// `partition` only: Jepsen's majorities ring, every worker sees a
    /// different majority of the nodes. Other faults treat it as `majority`.
    Ring,
    /// `kill` and `pause-node` only: the storage node (the counter's Redis
    /// node or PostgreSQL server, where PostgreSQL's locks live too), not
    /// the lock's nodes.
    Storage,
}

impl Targets {
    /// The valid names, for messages: `one, minority, majority, all, ring`.
    pub const NAMES: Names<Targets> = Names(Targets::VARIANTS);

    pub fn name(self) -> &'static str {
        self.into()
    }

    /// The first nodes of `nodes`, as many as the choice asks for (pure);
    /// none for `storage`, which is no lock node.
    pub fn pick(self, nodes: &[String]) -> Vec<String> {
        let n = nodes.len();
        let k = match self {
            Targets::One => 1,
            Targets::Minority => ((n.saturating_sub(1)) / 2).max(1),
            Targets::Majority | Targets::Ring => n / 2 + 1,
            Targets::All => n,
            Targets::Storage => 0,
        };
        nodes[..k.min(n)].to_vec()
    }
}

fn unknown_targets(s: &str) -> String {
    format!("unknown targets '{s}': choose one of {}", Targets::NAMES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_have_one_name_everywhere_and_an_unknown_one_lists_them() {
        for t in Targets::VARIANTS.iter().copied() {
            assert_eq!(t.name().parse::<Targets>(), Ok(t));
            assert_eq!(t.to_string(), t.name());
            assert_eq!(serde_json::to_value(t).unwrap(), t.name(), "serde agrees");
        }
        assert_eq!(
            "most".parse::<Targets>(),
            Err(
                "unknown targets 'most': choose one of one, minority, majority, all, ring, storage"
                    .into()
            )
        );
    }
}
