//! The lock setups lockstorm can test ([`Config`]), and for each what it
//! promises, how many lock nodes it needs, and the storage it needs
//! (PostgreSQL for the `pg-*` configs, whose lock lives there).

use crate::storage::StorageKind;
use checker::Promise;
use serde::{Deserialize, Serialize};
use strum::{Display, EnumCount, EnumString, IntoStaticStr, VariantArray};

/// Each config's name is its variant's, kebab-cased (strum for the command
/// line and messages, serde for run.json and the worker's spec: a test holds
/// them to the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(EnumCount, VariantArray, IntoStaticStr, Display, EnumString)]
#[strum(serialize_all = "kebab-case", parse_err_ty = String, parse_err_fn = unknown_config)]
pub enum Config {
    /// One node; `SET NX PX`, compare-and-delete release.
    Single,
    /// A primary, two replicas and three Sentinels; the client finds the
    /// primary through Sentinel.
    Replicated,
    /// Redis Cluster: three masters with a replica each; `SET NX PX` on
    /// the master of the lock key's slot, found from the cluster and
    /// followed through `MOVED`. A master's replica takes over by the
    /// cluster's vote, with whatever of the key reached it.
    Cluster,
    /// `cluster` plus a fencing token, checked by the storage: one script
    /// sets the key and increments the fence counter, which a hash tag
    /// keeps in the lock key's slot (a script may touch one slot only).
    ClusterFenced,
    /// Redlock on five independent nodes (our own client).
    Redlock,
    /// The same five nodes, driven by the published `rslock` crate.
    RedlockRslock,
    /// `single` plus a fencing token checked by the storage.
    Fenced,
    /// `single` plus a renewal thread that keeps extending the held lease.
    Watchdog,
    /// PostgreSQL's row lock: a transaction takes `SELECT … FOR UPDATE` on
    /// the counter's row, reads and writes it, and its commit releases.
    PgRowLock,
    /// PostgreSQL's session-level advisory lock (`pg_try_advisory_lock`),
    /// the counter written on another session.
    PgAdvisory,
    /// `pg-advisory` plus a fence (`nextval`, taken with the lock) that the
    /// storage checks.
    PgAdvisoryFenced,
    /// etcd's lock recipe on three etcd members: a lease kept alive while
    /// held, the key put under it only if absent (`create_revision == 0`).
    Etcd,
    /// `etcd` plus its fence, the key's `create_revision`, checked by the
    /// storage.
    EtcdFenced,
    /// ZooKeeper's lock recipe on a three-member ensemble: an ephemeral
    /// sequential node under the lock's path, the lowest holds; the
    /// session's timeout is the lease, kept alive by the client's pings.
    Zookeeper,
    /// `zookeeper` plus its fence, the lock node's creation zxid (`czxid`),
    /// checked by the storage.
    ZookeeperFenced,
    /// Negative control: release with a plain `DEL`.
    UnsafeDel,
    /// Negative control: release as `GET`, compare in the client, `DEL`.
    UnsafeGetDel,
    /// Negative control: `SETNX` then `PEXPIRE` as two commands.
    UnsafeSetnx,
    /// Negative control: each worker locks a key of its own.
    UnsafeKeyPerWorker,
    /// Negative control: a "lock" that grants every request.
    NoLock,
}

impl Config {
    /// Every config, in the order the variants are declared.
    pub const ALL: [Config; Config::COUNT] = *Config::VARIANTS
        .first_chunk()
        .expect("COUNT is the number of VARIANTS");

    pub fn name(self) -> &'static str {
        self.into()
    }

    /// Fenced configs promise data safety; the rest promise mutual exclusion.
    pub fn fenced(self) -> bool {
        matches!(
            self,
            Config::Fenced
                | Config::ClusterFenced
                | Config::PgAdvisoryFenced
                | Config::EtcdFenced
                | Config::ZookeeperFenced
        )
    }

    /// What the config claims, and so which anomalies fail its runs. A
    /// lock that is the storage's own transaction promises its data, as
    /// fencing does: a holder whose transaction ended may still believe it
    /// holds, but nothing it writes lands.
    pub fn promise(self) -> Promise {
        if self.fenced() || self.commits_with_release() {
            Promise::DataSafety
        } else {
            Promise::MutualExclusion
        }
    }

    /// A lock broken on purpose: the harness must catch it (exhaustive, so a
    /// new config says which it is).
    pub fn negative_control(self) -> bool {
        match self {
            Config::Single
            | Config::Replicated
            | Config::Cluster
            | Config::ClusterFenced
            | Config::Redlock
            | Config::RedlockRslock
            | Config::Fenced
            | Config::Watchdog
            | Config::PgRowLock
            | Config::PgAdvisory
            | Config::PgAdvisoryFenced
            | Config::Etcd
            | Config::EtcdFenced
            | Config::Zookeeper
            | Config::ZookeeperFenced => false,
            Config::UnsafeDel
            | Config::UnsafeGetDel
            | Config::UnsafeSetnx
            | Config::UnsafeKeyPerWorker
            | Config::NoLock => true,
        }
    }

    /// Its lock key can be left with no expiry: `unsafe-setnx`'s holder
    /// dying between `SETNX` and `EXPIRE` is the flaw it shows. Never run
    /// on a deployment lockstorm does not own, where such a key would stay.
    pub fn may_leave_key_without_ttl(self) -> bool {
        self == Config::UnsafeSetnx
    }

    /// Whether there is a lock at all (on a Redis node, or in PostgreSQL).
    pub fn has_lock_node(self) -> bool {
        self != Config::NoLock
    }

    /// A hold's key lives at most one TTL after it was granted. Not so for
    /// `watchdog`, etcd's lock and ZooKeeper's, which keep it alive while
    /// held, nor
    /// without a lock node, nor for PostgreSQL's locks, which last as long
    /// as their session or transaction.
    pub fn lease_is_ttl(self) -> bool {
        self.has_lock_node()
            && !matches!(self, Config::Watchdog)
            && !self.locks_in_members()
            && !self.locks_in_storage()
    }

    /// The lock lives on etcd members, not Redis nodes.
    pub fn locks_in_etcd(self) -> bool {
        matches!(self, Config::Etcd | Config::EtcdFenced)
    }

    /// The lock lives on ZooKeeper members, not Redis nodes.
    pub fn locks_in_zookeeper(self) -> bool {
        matches!(self, Config::Zookeeper | Config::ZookeeperFenced)
    }

    /// The lock lives on the members of a consensus store (etcd's or
    /// ZooKeeper's), which the run starts instead of Redis lock nodes.
    pub fn locks_in_members(self) -> bool {
        self.locks_in_etcd() || self.locks_in_zookeeper()
    }

    /// The lock is the storage's own (PostgreSQL's), not a Redis node's.
    pub fn locks_in_storage(self) -> bool {
        matches!(
            self,
            Config::PgRowLock | Config::PgAdvisory | Config::PgAdvisoryFenced
        )
    }

    /// The storage the config needs, if it needs one: PostgreSQL's locks
    /// need PostgreSQL; the rest work with either.
    pub fn storage(self) -> Option<StorageKind> {
        self.locks_in_storage().then_some(StorageKind::Postgres)
    }

    /// The write happens inside the lock's transaction, which the release
    /// commits: a write acknowledged inside it takes effect only then.
    pub fn commits_with_release(self) -> bool {
        self == Config::PgRowLock
    }

    /// A master's replica takes over when the master is down (Sentinel's
    /// vote, or the cluster's), after `--down-after-ms`.
    pub fn fails_over(self) -> bool {
        matches!(self, Config::Replicated) || self.in_cluster()
    }

    /// The lock's nodes talk to each other (etcd's members, a Redis
    /// Cluster's nodes): a partition cuts them from each other, with
    /// iptables, not the workers from them in the fault proxy.
    pub fn nodes_talk(self) -> bool {
        self.locks_in_etcd() || self.in_cluster()
    }

    /// The lock lives in a Redis Cluster: on the master of its key's slot.
    pub fn in_cluster(self) -> bool {
        matches!(self, Config::Cluster | Config::ClusterFenced)
    }

    /// Every key of the run in one slot (a hash tag around the prefix):
    /// what a cluster needs for one script to touch the lock and its fence,
    /// and what keeps a library's own prefix on the key (`mutex:`) in the
    /// slot whose master the faults strike.
    pub fn keys_in_one_slot(self) -> bool {
        self.in_cluster()
    }

    /// How many independent lock nodes the config runs (replicas aside):
    /// for `cluster`, its masters.
    pub fn lock_nodes(self) -> usize {
        match self {
            Config::Cluster | Config::ClusterFenced => 3,
            Config::NoLock | Config::PgRowLock | Config::PgAdvisory | Config::PgAdvisoryFenced => 0,
            Config::Redlock | Config::RedlockRslock => 5,
            Config::Etcd | Config::EtcdFenced | Config::Zookeeper | Config::ZookeeperFenced => 3,
            _ => 1,
        }
    }

    pub fn names() -> String {
        Config::ALL.map(Config::name).join(", ")
    }
}

fn unknown_config(s: &str) -> String {
    format!("unknown config '{s}': choose one of {}", Config::names())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_unknown_names_list_the_valid_ones() {
        for c in Config::ALL {
            assert_eq!(c.name().parse::<Config>().unwrap(), c);
            assert_eq!(c.to_string(), c.name());
            assert_eq!(
                serde_json::to_string(&c).unwrap(),
                format!("\"{}\"", c.name())
            );
        }
        let err = "redlok".parse::<Config>().unwrap_err();
        assert!(
            err.contains(
                "single, replicated, cluster, cluster-fenced, redlock, redlock-rslock, fenced, watchdog, pg-row-lock, \
                 pg-advisory, pg-advisory-fenced, etcd, etcd-fenced, zookeeper, zookeeper-fenced, unsafe-del, unsafe-get-del, \
                 unsafe-setnx, \
                 unsafe-key-per-worker, no-lock"
            ),
            "{err}"
        );
        assert!(Config::Single.lease_is_ttl());
        assert!(!Config::Watchdog.lease_is_ttl(), "renewed while held");
        assert!(!Config::NoLock.lease_is_ttl(), "no key at all");
        assert!(
            !Config::PgAdvisory.lease_is_ttl(),
            "held while its session lives"
        );
        assert_eq!(Config::PgRowLock.storage(), Some(StorageKind::Postgres));
        assert_eq!(Config::Fenced.storage(), None, "either storage");
        assert!(Config::PgAdvisoryFenced.fenced() && !Config::PgAdvisory.fenced());
    }
}
