//! Where a run's nodes come from, as the run's phases ask it
//! ([`Deployment`]): lockstorm's own nodes (local processes or Docker
//! containers, its backend's business), or a deployment it did not start
//! (`--target`). On the latter a run does more than run its workers there:
//! before the first write, it checks that every lock node is writable and
//! that no key of the run's prefix exists; at the end (a time limit, Ctrl-C
//! or SIGTERM alike), it removes every key of the prefix. Only read
//! commands, `SCAN` and `UNLINK` of the run's own keys: no `FLUSHALL`, no
//! `CONFIG SET`, no script that touches other keys (the deployment crate's
//! `own_keys` does each).

use crate::error::Result;
use deployment::own_keys::{clean, holds_a_run_key, preflight, DataNodes};
use deployment::target::Target;
use std::collections::BTreeMap;
use std::path::Path;
use workloads::conn::Login;
use workloads::Keys;

/// Where a run's nodes come from: what the run checks before its first
/// write and cleans after its last, what it may watch, and how its clients
/// log in. The run asks; only this type tells the two apart.
pub enum Deployment {
    /// Nodes lockstorm started for the run (on its backend, local or
    /// Docker): fresh, empty, and the run's alone.
    Own,
    /// A deployment the user named (`--target`), shared with its owner.
    Theirs(Box<Theirs>),
}

/// A deployment lockstorm did not start, as the run reaches it (a TLS one
/// through its bridges).
pub struct Theirs {
    pub target: Target,
    /// The user's node the counter lives on (`--storage-target`), and that
    /// node named as the run names it.
    pub storage: Option<(Target, DataNodes)>,
    /// The target's data nodes, named as the run names them.
    pub nodes: DataNodes,
}

impl Deployment {
    /// Before the first write, on a deployment lockstorm did not start:
    /// the audit (read only: what in the deployment can break a lock,
    /// beside the run that shows what does; its failure is only logged),
    /// then the preflight of the lock's nodes and the storage node. Returns
    /// each data node's server version the audit read.
    pub async fn preflight(
        &self,
        plan: &crate::RunPlan,
        dir: &Path,
    ) -> Result<BTreeMap<String, String>> {
        let Deployment::Theirs(theirs) = self else {
            return Ok(BTreeMap::new());
        };
        let target = &theirs.target;
        let mut servers = BTreeMap::new();
        match crate::audit::for_run(target, plan.ttl, dir).await {
            Ok(seen) => {
                tracing::info!("audit of {target}: {}", seen.summary);
                servers = seen.servers;
            }
            Err(e) => tracing::warn!("audit of {target} failed: {e}"),
        }
        preflight(target, theirs.nodes.clone(), &plan.keys).await?;
        if let Some((storage, node)) = &theirs.storage {
            preflight(storage, node.clone(), &plan.keys).await?;
        }
        Ok(servers)
    }

    /// After the last write, whatever ended the run: on a deployment
    /// lockstorm did not start, every key of the run's prefix goes (keys
    /// the preflight found there are not the run's, and it stopped).
    pub async fn clean(&self, keys: &Keys) {
        let Deployment::Theirs(theirs) = self else {
            return;
        };
        let mut removed = clean(&theirs.target, theirs.nodes.clone(), keys).await;
        if let Some((storage, node)) = &theirs.storage {
            removed += clean(storage, node.clone(), keys).await;
        }
        tracing::info!(
            "removed {removed} key(s) of {}* from {}",
            keys.prefix,
            theirs.target
        );
    }

    /// Whether lockstorm owns the nodes: only then does the run watch them
    /// (MONITOR and keyspace events would see a deployment owner's traffic
    /// and change its config) and reach them from each worker's own address
    /// (a deployment's protected mode takes 127.0.0.1, not 127.0.x.y).
    pub fn owned(&self) -> bool {
        matches!(self, Deployment::Own)
    }

    /// How the workers log in to the lock's nodes (the password stays in
    /// the environment); `None` on lockstorm's own.
    pub fn login(&self) -> Option<Login> {
        match self {
            Deployment::Own => None,
            Deployment::Theirs(theirs) => Some(theirs.target.login()),
        }
    }

    /// How the workers and the final read log in to the storage node, when
    /// it is the user's (`--storage-target`).
    pub fn storage_login(&self) -> Option<Login> {
        match self {
            Deployment::Own => None,
            Deployment::Theirs(theirs) => theirs.storage.as_ref().map(|(on, _)| on.login()),
        }
    }

    /// What an adapter is told of the deployment: the user and master name
    /// for a target; for lockstorm's own nodes an empty password, so one
    /// left in the user's shell never reaches a node that has none.
    pub fn adapter_login(&self, spec: &mut workloads::adapter::AdapterSpec, plan: &crate::RunPlan) {
        let target = match self {
            Deployment::Own => None,
            Deployment::Theirs(theirs) => Some(&theirs.target),
        };
        deployment::reach::adapter_login(spec, target, plan.master());
    }

    /// On a target that names a database, the adapter's lock must land
    /// there: one told `db` in init that ignores it writes among the user's
    /// keys in database 0. The check, to run while the adapter holds the
    /// lock once, if the deployment calls for one.
    pub fn adapter_key_check(
        &self,
        keys: &Keys,
    ) -> Option<impl Fn() -> std::result::Result<(), String> + Send + 'static> {
        let Deployment::Theirs(theirs) = self else {
            return None;
        };
        if theirs.target.db == 0 {
            return None;
        }
        let (target, nodes) = (theirs.target.clone(), theirs.nodes.clone());
        let keys = keys.clone();
        Some(move || holds_a_run_key(&target, &nodes, &keys))
    }
}
