//! Lock clients, one module per config. Each offers one acquisition *attempt*
//! and a release; the worker loop owns retries, timing and the history.

mod adapter;
mod adapter_watch;
mod cluster;
mod etcd;
mod fenced;
mod no_lock;
mod pg_advisory;
mod pg_row_lock;
pub mod redlock;
mod redlock_rslock;
mod renewal;
mod replicated;
mod single;
#[cfg(test)]
mod test_nodes;
mod unsafe_del;
mod unsafe_get_del;
mod unsafe_key_per_worker;
mod unsafe_setnx;
mod watchdog;
mod zookeeper;

pub use crate::adapter::{GiveUp, Warn};

use crate::adapter::AdapterSpec;
use crate::clock::LockClock;
use crate::conn::Conn;
use crate::recorder::Recorder;
use crate::strike::Hook;
use crate::{Config, Outcome};
use checker::Point;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

/// What a successful acquisition hands back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grant {
    /// The fencing token, for fenced configs.
    pub fence: Option<u64>,
    /// Which lock nodes granted it, by position in the node list (Redlock):
    /// recorded so a broken run shows whether two holders' majorities met
    /// only on faulty nodes.
    pub nodes: Vec<usize>,
    /// The library's own token, from a client adapter that shows it.
    pub client_token: Option<String>,
}

pub trait LockClient: Send {
    /// One attempt. `Ok(None)` means someone else holds the lock.
    fn try_acquire(&mut self, token: &str) -> Outcome<Option<Grant>>;
    /// Releases the lock held under `token`; `Fail("not-held")` if it was not.
    fn release(&mut self, token: &str) -> Outcome<()>;
    /// The strike points this client marks itself, inside its own steps
    /// (through [`LockParams::strike`]). The worker strikes the others: a
    /// successful acquisition's `acquiring` just before it returns, and
    /// `releasing` just before the release is sent.
    fn marks(&self) -> &'static [Point] {
        &[]
    }

    /// What the lock knows of the lease it holds now, for a lock that
    /// renews it while held; the rest leave the lease to the acquisition.
    fn renewal(&self) -> Renewal {
        Renewal::Unrenewed
    }

    /// The client's own view of whether it still holds the lock, for a
    /// client that has one (an adapter's library); `None`: the worker
    /// judges the lease by its own clock.
    fn own_view(&mut self) -> Option<Outcome<bool>> {
        None
    }

    /// Whether its grants carry fencing tokens for the storage to check:
    /// an adapter whose library declares `fence` (the `fenced` config's own
    /// lock is fenced by its config).
    fn fences(&self) -> bool {
        false
    }

    /// The counter, for a lock that is the storage's own transaction
    /// (`pg-row-lock`): the worker reads and writes inside it. `None`: the
    /// worker opens the storage itself.
    fn storage(&self) -> Option<Box<dyn crate::storage::Storage>> {
        None
    }
}

/// A held lease, as a lock that renews it sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// Never renewed: the lease is the acquisition's.
    Unrenewed,
    /// Last extended by a renewal sent at this lock-clock time (ns): the new
    /// lease cannot have started earlier.
    Renewed(i64),
    /// A renewal failed, or found the key gone or someone else's.
    Lost,
}

/// Where a lock client finds its nodes and how long its leases are.
#[derive(Clone)]
pub struct LockParams {
    /// The lock's nodes, for configs that address them directly.
    pub nodes: Vec<String>,
    /// The storage node (`ip:port`): PostgreSQL's locks live there.
    pub storage_node: String,
    /// The run's keys: the lock's, and `fenced`'s token counter.
    pub keys: crate::Keys,
    /// How to log in to the lock's nodes (a deployment's; `None` for
    /// nodes lockstorm started).
    pub login: Option<crate::conn::Login>,
    /// Sentinels that name the current primary (`replicated`).
    pub sentinels: Vec<String>,
    /// The name they watch it under.
    pub master: String,
    pub ttl: Duration,
    pub op_timeout: Duration,
    /// How long one acquire op may take (a client adapter's library waits
    /// for the lock itself).
    pub acquire_timeout: Duration,
    /// After acquiring, `WAIT` for this many replicas (0: don't wait).
    pub wait_replicas: u32,
    /// The worker's lease clock, which the clock nemesis may skew.
    pub clock: Arc<LockClock>,
    /// The worker's own loopback address, so partitions can single it out.
    pub source: Option<Ipv4Addr>,
    /// Called at the strike points the client marks (see [`LockClient::marks`]).
    pub strike: Hook,
    /// The worker's index (`unsafe-key-per-worker` names its key after it,
    /// `watchdog` its renewals' process).
    pub worker: u64,
    /// Where ops the lock runs on a thread of its own (renewals) are recorded.
    pub recorder: Recorder,
    /// The client adapter that holds the lock client, if any.
    pub adapter: Option<AdapterSpec>,
    /// Ends the worker when its client cannot go on (an adapter that broke
    /// the protocol), saying why.
    pub give_up: GiveUp,
    /// Tells the harness's log something about the lock client that ends
    /// nothing (an adapter's process left outside the worker's group).
    pub warn: Warn,
}

impl LockParams {
    /// A connection to one of the lock's nodes, from the worker's address.
    pub fn connect(&self, addr: &str, timeout: Duration) -> Conn {
        Conn::from(addr, self.source, timeout).with_login(self.login.clone())
    }
}

/// The name Sentinel monitors the primary under.
pub const PRIMARY_NAME: &str = "lockstorm";

/// [`PRIMARY_NAME`], owned: a spec's default.
pub fn primary_name() -> String {
    PRIMARY_NAME.into()
}

pub fn client(config: Config, params: &LockParams) -> Box<dyn LockClient> {
    if let Some(spec) = &params.adapter {
        return Box::new(adapter::Adapter::new(spec, params));
    }
    match config {
        Config::Single => Box::new(single::Single::new(params)),
        Config::Fenced => Box::new(fenced::Fenced::new(params)),
        Config::Replicated => Box::new(replicated::Replicated::new(params)),
        Config::Cluster => Box::new(cluster::Cluster::new(params, false)),
        Config::ClusterFenced => Box::new(cluster::Cluster::new(params, true)),
        Config::Redlock => Box::new(redlock::Redlock::new(params)),
        Config::RedlockRslock => Box::new(redlock_rslock::RedlockRslock::new(params)),
        Config::Watchdog => Box::new(watchdog::Watchdog::new(params)),
        Config::UnsafeDel => Box::new(unsafe_del::UnsafeDel::new(params)),
        Config::UnsafeGetDel => Box::new(unsafe_get_del::UnsafeGetDel::new(params)),
        Config::UnsafeSetnx => Box::new(unsafe_setnx::UnsafeSetnx::new(params)),
        Config::UnsafeKeyPerWorker => {
            Box::new(unsafe_key_per_worker::UnsafeKeyPerWorker::new(params))
        }
        Config::PgRowLock => Box::new(pg_row_lock::PgRowLock::new(params)),
        Config::PgAdvisory => Box::new(pg_advisory::PgAdvisory::new(params, false)),
        Config::PgAdvisoryFenced => Box::new(pg_advisory::PgAdvisory::new(params, true)),
        Config::Etcd => Box::new(etcd::Etcd::new(params, false)),
        Config::EtcdFenced => Box::new(etcd::Etcd::new(params, true)),
        Config::Zookeeper => Box::new(zookeeper::ZooKeeper::new(params, false)),
        Config::ZookeeperFenced => Box::new(zookeeper::ZooKeeper::new(params, true)),
        Config::NoLock => Box::new(no_lock::NoLock),
    }
}

/// Deletes the key only if it still holds our token, so a holder whose lease
/// expired cannot delete the next holder's lock.
pub(crate) const COMPARE_AND_DELETE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"#;

/// Maps a DEL count to the history's release outcome.
pub(crate) fn released(deleted: Outcome<i64>) -> Outcome<()> {
    match deleted {
        Outcome::Ok(1) => Outcome::Ok(()),
        Outcome::Ok(_) => Outcome::Fail(checker::history::error::NOT_HELD.into()),
        Outcome::Fail(e) => Outcome::Fail(e),
        Outcome::Info(e) => Outcome::Info(e),
    }
}

pub(crate) fn first_node(params: &LockParams) -> &str {
    params
        .nodes
        .first()
        .expect("the harness gives every locking config a lock node")
}
