//! Where nodes run. One provisioning interface — [`Provisioner`] starts a
//! node's process, [`NodeProcess`] is that process — with two
//! implementations: [`local`] (child processes) and, with the `docker`
//! feature, [`docker`] (containers through testcontainers, with host
//! networking and the host's PID namespace). Everything above it (the
//! topology, the nemeses, the workers, the checker) sees a node as an
//! address and a host PID, and never asks which backend runs it.

#[cfg(feature = "docker")]
pub mod docker;
pub mod local;

use crate::error::{Error, Result};
pub use crate::options::Backend;
use nemesis::cluster::BoxFuture;
use std::path::PathBuf;
use std::sync::Arc;
use store::BackendRecord;

/// The program a node runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    Server,
    /// Sentinel: its config file is the first argument.
    Sentinel,
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
    /// its time shim's control file. Every path in `args` is inside it.
    pub dir: PathBuf,
    /// Host files the node reads outside its folder (the time shim).
    pub reads: Vec<PathBuf>,
    /// Where the process's stdout and stderr go (inside `dir`).
    pub output: PathBuf,
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
}

/// The provisioner `backend` names, ready to launch nodes: `auto` is the
/// local backend when `redis-server` is on PATH, else Docker when a daemon
/// answers (an `image` asks for Docker). `sentinel` says whether the run
/// needs `redis-sentinel`.
pub async fn provision(
    backend: Backend,
    image: Option<&str>,
    sentinel: bool,
) -> Result<Arc<dyn Provisioner>> {
    match backend {
        Backend::Local => Ok(Arc::new(local::Local::find(sentinel)?)),
        Backend::Docker => docker(image).await,
        Backend::Auto if image.is_some() => docker(image).await,
        Backend::Auto => match local::Local::find(sentinel) {
            Ok(local) => Ok(Arc::new(local)),
            Err(no_local) => match docker(image).await {
                Ok(docker) => Ok(docker),
                Err(no_docker) => Err(Error::Usage(format!(
                    "nowhere to run Redis nodes: {no_local}; and {no_docker}. Install Redis, or start Docker, or choose with --backend"
                ))),
            },
        },
    }
}

#[cfg(feature = "docker")]
async fn docker(image: Option<&str>) -> Result<Arc<dyn Provisioner>> {
    Ok(Arc::new(docker::Docker::connect(image).await?))
}

#[cfg(not(feature = "docker"))]
async fn docker(_image: Option<&str>) -> Result<Arc<dyn Provisioner>> {
    Err(Error::Usage(
        "this lockstorm was built without the Docker backend: build it with `cargo build --features docker` (a default feature)".into(),
    ))
}
