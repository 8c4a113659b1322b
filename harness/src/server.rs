//! A node of the run, whichever server it runs: a Redis node (a lock node,
//! a replica, a Sentinel, or the storage), a PostgreSQL server (the storage
//! of `--storage postgres`, and the lock of the configs that lock with
//! PostgreSQL), or an etcd member (the lock of the `etcd` configs). The
//! topology and its faults see every one alike: a name, an address, a PID,
//! and a kill, a restart and a removal.

use backend::etcd::EtcdMember;
use backend::node::{RedisNode, Role};
use backend::postgres::PostgresNode;
use backend::Server as _;

pub enum Server {
    Redis(RedisNode),
    Postgres(PostgresNode),
    Etcd(EtcdMember),
}

impl Server {
    pub fn name(&self) -> &str {
        match self {
            Server::Redis(n) => n.name(),
            Server::Postgres(n) => n.name(),
            Server::Etcd(n) => n.name(),
        }
    }

    pub fn addr(&self) -> String {
        match self {
            Server::Redis(n) => n.addr(),
            Server::Postgres(n) => n.addr(),
            Server::Etcd(n) => n.addr(),
        }
    }

    pub fn pid(&self) -> u32 {
        match self {
            Server::Redis(n) => n.pid(),
            Server::Postgres(n) => n.pid(),
            Server::Etcd(n) => n.pid(),
        }
    }

    /// What `run.json` calls its part.
    pub fn role(&self) -> &'static str {
        match self {
            Server::Redis(n) => match n.spec.role {
                Role::Lock => "lock",
                Role::Replica { .. } => "replica",
                Role::Sentinel { .. } => "sentinel",
                Role::Storage => "storage",
            },
            Server::Postgres(_) => "storage",
            Server::Etcd(_) => "lock",
        }
    }

    pub async fn died(&mut self) -> Option<String> {
        match self {
            Server::Redis(n) => n.died().await,
            Server::Postgres(n) => n.died().await,
            Server::Etcd(n) => n.died().await,
        }
    }

    pub fn node_ref(&self) -> nemesis::NodeRef {
        match self {
            Server::Redis(n) => n.node_ref(),
            Server::Postgres(n) => n.node_ref(),
            Server::Etcd(n) => n.node_ref(),
        }
    }

    pub async fn kill(&mut self) -> Option<u32> {
        match self {
            Server::Redis(n) => n.kill().await,
            Server::Postgres(n) => n.kill().await,
            Server::Etcd(n) => n.kill().await,
        }
    }

    pub async fn restart(&mut self) -> backend::Result<()> {
        match self {
            Server::Redis(n) => n.restart().await,
            Server::Postgres(n) => n.restart().await,
            Server::Etcd(n) => n.restart().await,
        }
    }

    pub async fn remove(&mut self) {
        match self {
            Server::Redis(n) => n.remove().await,
            Server::Postgres(n) => n.remove().await,
            Server::Etcd(n) => n.remove().await,
        }
    }
}
