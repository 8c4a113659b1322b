//! The provisioning interface every backend implements: [`Provisioner`]
//! starts a node's process from a [`Launch`], and [`NodeProcess`] is that
//! process. Apart from the crate root so that the backends, which implement
//! it, import nothing that imports them.

use crate::error::Result;
use nemesis::cluster::BoxFuture;
use std::path::PathBuf;
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
    fn address_of(&self, _name: &str) -> Option<std::net::Ipv4Addr> {
        None
    }
    /// A port for a node on `ip` to bind; taken meanwhile, the node says so
    /// and its kind tries another.
    fn free_port(&self, ip: std::net::Ipv4Addr) -> Result<u16> {
        crate::server::free_port(ip)
    }
    /// The hosts the nodes run on, when not this machine (`--nodes`).
    fn remote(&self) -> Option<crate::remote::Remote> {
        None
    }
}
