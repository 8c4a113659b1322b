//! A fault is one package, as in Jepsen's `nemesis/combined`: its name, the
//! setups it applies to, how long it lasts, what it needs from the host, and
//! its effect (which records its own `start-…`/`stop-…` events and heals
//! what it did). The harness, the schedule and the matrix ask the package;
//! none of them knows a fault by name.
//!
//! Adding a fault: a [`Fault`](crate::Fault) variant (its name, and the
//! `start-…`/`stop-…` names of its events, come from the variant), a module
//! under `fault/` with a unit struct implementing [`Package`] whose `name`
//! is the variant's, and its `mod` and line in `Fault::package`. A scenario (faults that act
//! together) is an [`Action`](crate::Action) the same way.

use crate::cluster::BoxFuture;
use crate::runner::{Env, FaultParams};
use std::time::Duration;

/// What a run's lock setup offers a fault deciding whether it applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape<'a> {
    /// The config's name, for the reason a fault gives when it does not apply.
    pub config: &'a str,
    /// Nodes that hold the lock (0 for a setup without a lock node).
    pub lock_nodes: usize,
    /// The lock node is a master whose replica the topology promotes when
    /// it is down (Sentinel's vote, or a Redis Cluster's).
    pub fails_over: bool,
    /// The lock lives in a Redis Cluster: a replica takes its master's
    /// slots by the cluster's vote, or when asked to.
    pub cluster: bool,
    /// The lock is PostgreSQL's (held by a session or a transaction of the
    /// storage server), not a Redis node's.
    pub locks_in_storage: bool,
    /// `--targets storage`: node faults hit the storage node.
    pub storage_targeted: bool,
    /// lockstorm started the nodes, so a fault may act on them (kill, pause,
    /// skew, cut them from each other); false for a user's deployment.
    pub owned: bool,
    /// The nodes run on other machines (`--nodes`), reached over SSH.
    pub on_hosts: bool,
    /// The faults a user gave a command for (`--fault-cmd kill=…`): on a
    /// deployment lockstorm did not start, the only node faults it may run.
    pub commands: &'a [String],
}

pub trait Package: Sync {
    /// The name `--nemesis` takes and the schedule records.
    fn name(&self) -> &'static str;

    /// `Err(why)` when the fault cannot act on this setup: the rest of the
    /// sentence after `--nemesis <name>`, ending in what to choose instead.
    fn supports(&self, shape: &Shape) -> Result<(), String>;

    /// How long the fault lasts once it has started, for the schedule.
    fn duration(&self, p: &FaultParams) -> Duration;

    /// The fault takes seconds to act (a restart, a promotion, a cut): it
    /// only loses a lock whose holder is still in its critical section, so
    /// the run's default lease and work are long.
    fn slow(&self) -> bool {
        false
    }

    /// The fault strikes a worker at a strike point (`--at`).
    fn strikes(&self) -> bool {
        false
    }

    /// The fault cuts links with iptables.
    fn needs_firewall(&self) -> bool {
        false
    }

    /// The fault acts on the lock's nodes (their processes, clocks or links
    /// to each other), which only a run that started them can do.
    fn acts_on_nodes(&self) -> bool {
        false
    }

    /// The fault acts in the fault proxy: the run sends every worker's
    /// connections through it.
    fn needs_proxy(&self) -> bool {
        false
    }

    /// On a consensus cluster (etcd's members) the fault cuts members from
    /// each other with iptables instead: it then needs the firewall, not
    /// the proxy.
    fn cuts_members(&self) -> bool {
        false
    }

    /// The fault can hit the storage node instead of the lock's
    /// (`--targets storage`).
    fn can_target_storage(&self) -> bool {
        false
    }

    /// The fault moves node clocks, so nodes run under the time shim.
    fn needs_time_shim(&self) -> bool {
        false
    }

    /// Acts once on the live run, records its events, and heals before it
    /// returns, also when the run ends early (`env.stop`).
    fn run<'a>(&'a self, env: &'a mut Env, p: &'a FaultParams) -> BoxFuture<'a, ()>;
}

/// Why a fault that acts on lock nodes cannot act on a setup without one
/// (unless it is aimed at the storage node, or the lock lives there).
pub(crate) fn needs_lock_node(shape: &Shape) -> Result<(), String> {
    // PostgreSQL's locks live on the storage node: it is their lock node.
    match shape.lock_nodes > 0 || shape.storage_targeted || shape.locks_in_storage {
        false => Err(format!(
            "needs a lock node, and config {} has none: choose another config or nemesis",
            shape.config,
        )),
        true => Ok(()),
    }
}

/// A killed node is back within this long after its restart is asked for.
pub(crate) const RESTART_MARGIN: Duration = Duration::from_millis(500);

/// Whether `package` can act on this setup: `Err` is the rest of the
/// sentence after `--nemesis <name>`. A fault that acts on the nodes needs
/// nodes lockstorm started; the package decides the rest.
pub fn applies(package: &dyn Package, shape: &Shape) -> Result<(), String> {
    let commanded = shape.commands.iter().any(|c| c == package.name());
    if package.acts_on_nodes() && !shape.owned && !commanded {
        return Err(format!("acts on the lock's nodes, and lockstorm did not start this deployment (--target): give the command that does it, --fault-cmd {}=\"…\" (kill and failover take one), or choose pause, crash, delay, lose-reply or partition, which act on the clients and the network between them and it", package.name()));
    }
    if shape.on_hosts && package.needs_time_shim() {
        return Err("moves the nodes' clocks through a time shim, which lockstorm does not put on --nodes hosts yet: choose pause, crash, kill, pause-node, failover, partition, delay or lose-reply, or run without --nodes".into());
    }
    package.supports(shape)
}
