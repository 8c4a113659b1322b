//! What a nemesis may do to the nodes. The harness owns the processes and
//! implements this; faults only decide *when* and *which*.

use crate::fault::Targets;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A node as a fault sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRef {
    pub name: String,
    pub pid: u32,
}

pub trait Cluster: Send + Sync {
    /// The node the lock lives on now: the primary for `replicated` (as
    /// Sentinel names it), otherwise the lock node.
    fn primary(&self) -> BoxFuture<'_, Option<NodeRef>>;
    /// The other data nodes of a replicated topology (not Sentinels).
    fn replicas_of(&self, primary: &str) -> Vec<String>;
    /// SIGKILLs a node and reaps it; it stays down until [`Cluster::restart`].
    fn kill(&self, name: &str) -> BoxFuture<'_, std::io::Result<u32>>;
    /// Starts a killed node again with its own settings (keeping its data
    /// only if persistence is on) and waits until it answers.
    fn restart(&self, name: &str) -> BoxFuture<'_, Result<NodeRef, String>>;
    /// Drops every packet between node `a` and each of `others`.
    fn partition(&self, a: &str, others: &[String]) -> std::io::Result<()>;
    /// Removes every rule this run added.
    fn heal(&self) -> std::io::Result<()>;
    /// Waits until Sentinel names a primary other than `old`.
    fn await_promotion(&self, old: &str, timeout: Duration) -> BoxFuture<'_, Option<String>>;
    /// The independent lock nodes, in order (n1, n2, …); the primary's
    /// replicas and Sentinels are not among them.
    fn lock_nodes(&self) -> Vec<String>;
    /// The nodes a node fault hits: the primary for `replicated`, the lock
    /// node for single-node configs, else `targets` of the lock nodes.
    fn targets(&self, targets: Targets) -> BoxFuture<'_, Vec<NodeRef>>;
    /// Shifts a node's wall clock (through its time shim) by `offset_ns`,
    /// running at `rate` from now on.
    fn set_clock(&self, node: &str, offset_ns: i64, rate: f64) -> std::io::Result<()>;
    /// Drops every packet between each worker and node in `links`.
    fn cut_workers(&self, links: &[(usize, String)]) -> std::io::Result<()>;
}
