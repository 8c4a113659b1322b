//! Where nodes run. One provisioning interface ([`mod@provision`]:
//! [`Provisioner`] starts a node's process, [`NodeProcess`] is that process;
//! [`provision()`] picks one for `--backend`) with two implementations:
//! [`local`] (child processes) and, with the `docker` feature, [`docker`]
//! (containers through testcontainers, with host networking and the host's
//! PID namespace); and the servers themselves, one interface ([`Server`]:
//! a name, an address, a PID, a kill, a restart and a removal, written once
//! in a private module with the core every kind embeds) with four kinds:
//! [`node`] (Redis: its settings, readiness and logs), [`postgres`],
//! [`etcd`] and [`zookeeper`] ([`redis_cluster`] makes Redis nodes one
//! cluster and reads who masters a slot). With `--nodes`, [`remote`] is the
//! provisioner: the same processes on other machines, over SSH. Everything above it (the topology, the nemeses, the workers,
//! the checker) sees a node as an address and a host PID, and never asks
//! which backend runs it.

#![forbid(unsafe_code)]

#[cfg(feature = "docker")]
pub mod docker;
pub mod docker_cli;
mod error;
pub mod etcd;
pub mod lab;
pub mod local;
pub mod node;
pub mod postgres;
pub mod provision;
mod reaper;
pub mod redis_cluster;
pub mod remote;
mod server;
pub mod zookeeper;

pub use error::{Error, Result};
pub use provision::{Hosts, Launch, NodeProcess, Program, Provisioner};
pub use server::Server;

use clap::ValueEnum;

/// How long a server program may take to say its version: a program that
/// hangs there is killed, and the run says so, instead of waiting forever.
pub const PROBE_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// `--backend`: where a command's nodes run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// `local` when `redis-server` is on PATH, else `docker` when a daemon answers.
    Auto,
    /// Each node is a `redis-server` child process on a loopback address.
    Local,
    /// Each node is a container (host networking, same loopback addresses).
    Docker,
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
    Err(Error::Usage(docker_cli::LEFT_OUT.into()))
}
