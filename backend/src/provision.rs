//! The provisioning interface every backend implements: [`Provisioner`]
//! starts a node's process from a [`Launch`], and [`NodeProcess`] is that
//! process. Apart from the crate root so that the backends, which implement
//! it, import nothing that imports them.

use crate::error::Result;
use nemesis::cluster::BoxFuture;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use store::BackendRecord;

/// The program a node runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Program {
    /// `redis-server`, as the backend found it.
    Server,
    /// Sentinel: its config file is the first argument.
    Sentinel,
    /// A program its server kind found on this host (PostgreSQL, etcd): a
    /// new kind names its own here, and no backend needs a line for it.
    Found(Found),
}

/// A server kind's program, as the kind found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// Where it is on this host (and in the kind's image: the same path).
    pub path: PathBuf,
    /// The local image its containers run, and what `image import` builds
    /// it from; `None`: the kind runs on the local backend only.
    pub image: Option<(&'static str, &'static str)>,
    /// It is asked to shut down (SIGQUIT) before it is killed: PostgreSQL's
    /// shared memory goes with it only then.
    pub quits: bool,
}

/// Everything needed to start one node's process, and to start it again.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The node's name (`n1`, `s2`, `storage`).
    pub name: String,
    pub program: Program,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// The node's own folder (absolute): working directory, logs, data and
    /// its time shim's control file. Every path in `args` is inside it, in
    /// `reads` or in `writes`.
    pub dir: PathBuf,
    /// Host files the node reads outside its folder (the time shim).
    pub reads: Vec<PathBuf>,
    /// Host folders the node writes outside its folder (PostgreSQL's data
    /// folder, when the server's user cannot reach the run's folder).
    pub writes: Vec<PathBuf>,
    /// Where the process's stdout and stderr go (inside `dir`).
    pub output: PathBuf,
    /// The time control file of a node whose program reads the clock
    /// without libc (etcd: Go), when its wall clock may move: the backend
    /// serves that clock itself ([`nemesis::served_clock`]).
    pub served_clock: Option<PathBuf>,
    /// The user (uid, gid) the process runs as, when not the harness's own:
    /// PostgreSQL refuses to run as root.
    pub user: Option<(u32, u32)>,
    /// Files and folders in `dir` a restart starts without, wherever the
    /// node's folder is (a Redis node without persistence comes back
    /// empty: its synced dump goes).
    pub forget_on_restart: Vec<PathBuf>,
}

/// A node's process, running or stopped, on some backend.
pub trait NodeProcess: Send + Sync {
    /// Its PID as the host sees it (what signals and /proc take); 0 while down.
    fn pid(&self) -> u32;
    /// How it ended, once it has (a node that exits at start).
    fn exited(&mut self) -> BoxFuture<'_, Option<String>>;
    /// SIGKILL, and wait until it is gone; it stays down until [`Self::restart`].
    fn kill(&mut self) -> BoxFuture<'_, ()>;
    /// Starts it again as it was launched: same arguments, same folder.
    fn restart(&mut self) -> BoxFuture<'_, Result<()>>;
    /// Ends it for good, leaving its output in the node's folder and
    /// nothing else behind.
    fn remove(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// Starts node processes for one run.
pub trait Provisioner: Send + Sync {
    fn launch(&self, launch: Launch) -> BoxFuture<'_, Result<Box<dyn NodeProcess>>>;
    /// What `run.json` records of the backend.
    fn record(&self) -> BackendRecord;
    /// The Redis version the nodes run, for `run.json`.
    fn redis_version(&self) -> String;
    /// Called once the run's nodes are gone, or the run failed: removes
    /// whatever of the run is left on the backend.
    fn finish(&self) -> BoxFuture<'_, ()>;
    /// The address node `name` listens on, when the backend places it
    /// (`--nodes`: its host's); `None`: the topology's loopback plan.
    fn address_of(&self, _name: &str) -> Option<Ipv4Addr> {
        None
    }
    /// A port for a node on `ip` to bind; taken meanwhile, the node says so
    /// and its kind tries another.
    fn free_port(&self, ip: Ipv4Addr) -> Result<u16> {
        free_port(ip)
    }
    /// The machines the nodes run on, when not this one (`--nodes`).
    fn hosts(&self) -> Option<Arc<dyn Hosts>> {
        None
    }
}

/// The machines a run's nodes run on, when not this one: what the
/// topology's faults do there.
pub trait Hosts: Send + Sync {
    /// The host node `name` runs on.
    fn host_of(&self, name: &str) -> Arc<dyn nemesis::cluster::Host>;
    /// Drops every packet between node `a` and node `b` (each named, with
    /// its address), both ways, with their hosts' iptables.
    fn cut<'a>(
        &'a self,
        a: (&'a str, SocketAddrV4),
        b: (&'a str, SocketAddrV4),
    ) -> BoxFuture<'a, Result<()>>;
    /// Every cut heals.
    fn heal(&self) -> BoxFuture<'_, Result<()>>;
    /// Removes what the cuts made on the hosts; what would not go, one
    /// line each naming the host.
    fn remove_cuts(&self) -> BoxFuture<'_, Vec<String>>;
    /// Whether a TCP connection from node `from`'s host to `addr` is
    /// accepted within `within`.
    fn connects<'a>(
        &'a self,
        from: &'a str,
        addr: &'a str,
        within: Duration,
    ) -> BoxFuture<'a, Result<bool>>;
}

/// A free port on `ip`, for a server to bind: someone else may take it
/// first, so a kind that binds it retries on another when told the
/// address is in use.
pub(crate) fn free_port(ip: Ipv4Addr) -> Result<u16> {
    TcpListener::bind((ip, 0))
        .and_then(|l| Ok(l.local_addr()?.port()))
        .map_err(crate::error::doing(format!("finding a free port on {ip}")))
}
