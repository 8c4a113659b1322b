//! `run.json`: the record of one run ([`RunRecord`]), and the records of
//! what it ran on that it holds (nodes, backend, client adapter).
//!
//! The run's plan (`options`) and its schedule are written in the harness's
//! types: the plan's defaults are the command line's, and a step is the
//! nemesis's. A record is generic over them through [`Plan`], which says all
//! that a reader of stored runs may ask of a plan.

use checker::Promise;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt::Debug;
use std::time::Duration;

/// A run's plan, `options` in `run.json`: every option resolved (the
/// harness's `RunPlan`). Its `Default` is what a field missing from an
/// older run reads as.
pub trait Plan: Clone + Debug + Default + Serialize + DeserializeOwned {
    /// One step of the schedule the plan made (`schedule` in `run.json`).
    type Step: Clone + Debug + PartialEq + Serialize + DeserializeOwned;
    /// How long the lock may go ungranted, with acquires attempted and no
    /// fault active, before a check counts it as stuck (`deadlock`); `expires`
    /// is false for a lock without a TTL (a client adapter's `no-ttl`), which
    /// a dead holder's key cannot hold up for a TTL.
    fn deadlock_after(&self, expires: bool) -> Duration;
    /// What a reader shows of the plan.
    fn outline(&self) -> Outline;
    /// Whether the lock of the config named `config` keeps its key for the
    /// plan's TTL, so a hold that lasts longer outlived the key (false for
    /// a name the plan does not know).
    fn lease_is_ttl(config: &str) -> bool;
    /// Whether the plan's writes happen inside the lock's transaction, which
    /// the release commits (the checker then counts a write at its commit).
    fn writes_commit_with_release(&self) -> bool {
        false
    }
}

/// A plan as a reader of stored runs shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Outline {
    pub config: String,
    /// The nemesis and where it strikes: `pause@read`, or `pause`.
    pub nemesis: String,
    pub seed: u64,
    pub workers: u64,
    pub time_limit: Duration,
    pub ttl: Duration,
}

/// `run.json`: everything needed to understand or repeat the run. Fields
/// newer than a stored run read as their defaults; `promise` is required,
/// the mark of a lockstorm run folder.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(bound = "")]
pub struct RunRecord<P: Plan> {
    #[serde(default)]
    pub lockstorm: String,
    #[serde(default)]
    pub redis: String,
    /// The PostgreSQL server's version, when the storage was PostgreSQL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgres: Option<String>,
    /// etcd's version (`etcd --version`), when the lock was etcd's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd: Option<String>,
    /// ZooKeeper's version, when the lock was ZooKeeper's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zookeeper: Option<String>,
    /// Where the nodes ran (older runs: not recorded, always local).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendRecord>,
    #[serde(default)]
    pub started: String,
    pub promise: Promise,
    #[serde(default)]
    pub options: P,
    #[serde(default)]
    pub nodes: Vec<NodeRecord>,
    #[serde(default)]
    pub worker_pids: Vec<u32>,
    /// None only in a record that lacks the key (hand-written, or from a
    /// tool that is not lockstorm); every run writes one, perhaps empty.
    #[serde(default)]
    pub schedule: Option<Vec<P::Step>>,
    #[serde(default)]
    pub interrupted: bool,
    /// How far into the run it was interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_at_ms: Option<u64>,
    /// When (history time) every worker was ready: the schedule's `at_ms`
    /// and the time limit count from here. None in a run stopped before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers_ready_ms: Option<u64>,
    /// The client adapter the run tested, as it introduced itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientRecord>,
    /// The storage adapter that kept the counter (`--storage-cmd`), as it
    /// introduced itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_adapter: Option<StorageAdapterRecord>,
    /// Why a client (or storage) adapter broke the protocol, ending the run early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter_broken: Option<String>,
    /// Requests the workers sent through the fault proxy (`None`: the run
    /// had none, and workers reached the nodes directly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxied_requests: Option<u64>,
    /// A deployment's servers (`--target`): node address → the version its
    /// `INFO server` reports (`redis 7.2.4`, `valkey 8.0.1`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub target_servers: std::collections::BTreeMap<String, String>,
}

impl<P: Plan> RunRecord<P> {
    /// What the run's history is checked against: its promise, and the
    /// `deadlock` threshold its options (and its client's TTL) give.
    pub fn settings(&self) -> checker::Settings {
        let after = self.options.deadlock_after(self.expires());
        checker::Settings::new(self.promise)
            .deadlock_after(after)
            .writes_commit_with_release(self.options.writes_commit_with_release())
    }

    /// Whether the lock's key expires: false for a client adapter that
    /// declares `no-ttl` (its library holds while its session lives).
    pub fn expires(&self) -> bool {
        self.client.as_ref().is_none_or(ClientRecord::expires)
    }

    /// How long a grant lasts if its holder never renews it: the TTL, for a
    /// lock that keeps its key that long (`None` for one that renews, has
    /// no key, or has no TTL), so a hold past it outlived its key.
    pub fn lease(&self) -> Option<Duration> {
        let o = self.options.outline();
        (P::lease_is_ttl(&o.config) && self.expires()).then_some(o.ttl)
    }
}

/// A node as `run.json` records it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeRecord {
    pub name: String,
    pub role: String,
    pub addr: String,
    /// Its PID on its host (this machine's, unless `host` names another).
    pub pid: u32,
    /// The host it ran on, as `--nodes` named it (none: this machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// The backend a run used, as `run.json` records it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BackendRecord {
    /// `local`, `docker` or `ssh` (`--nodes`).
    pub kind: String,
    /// The hosts of an `ssh` backend, as `--nodes` named them; node `n<i>`
    /// runs on the i-th (round the list), Sentinels on the hosts after the
    /// data nodes', the storage node on the last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// The image the containers ran, and its id (docker only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// The `lockstorm.run` label on the run's containers (docker only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
}

/// What run.json says of the client a run tested.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientRecord {
    /// The shipped adapter's name, or `custom`.
    pub name: String,
    pub command: String,
    /// The library and version, as the adapter said at `init`.
    pub library: String,
    pub features: Vec<String>,
    /// What the worker's check before each write asks.
    pub check: String,
    /// The library settings the adapter chose over the library's defaults
    /// (its `init` reply's `options`): what the findings depend on besides
    /// the library.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub options: std::collections::BTreeMap<String, String>,
    /// The key the library stores the lock under, where it is not the
    /// run's own (its `init` reply's `key`): the one the observer watched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// What run.json says of the storage adapter a run tested.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageAdapterRecord {
    pub command: String,
    /// The storage and its version, as the adapter said at `init`.
    pub storage: String,
}

/// The adapter feature of a library whose lock has no TTL: it holds while
/// its holder's session lives (docs/protocol.md).
pub const NO_TTL: &str = "no-ttl";

impl ClientRecord {
    /// Whether the library's lock expires (it did not declare [`NO_TTL`]).
    pub fn expires(&self) -> bool {
        !self.features.iter().any(|f| f == NO_TTL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{write_json, ReadError, StoredRun};

    /// A plan as another tool might write one: the store asks no more of it.
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
    #[serde(default)]
    struct Options {
        config: String,
        workers: u64,
    }

    impl Plan for Options {
        type Step = String;
        fn deadlock_after(&self, expires: bool) -> Duration {
            Duration::from_secs(self.workers + u64::from(expires))
        }
        fn outline(&self) -> Outline {
            Outline {
                config: self.config.clone(),
                nemesis: "none".into(),
                seed: 0,
                workers: self.workers,
                time_limit: Duration::ZERO,
                ttl: Duration::ZERO,
            }
        }
        fn lease_is_ttl(_: &str) -> bool {
            false
        }
    }

    #[test]
    fn a_stored_run_reads_back_typed_and_an_older_record_loads_with_defaults() {
        let tmp = tempfile::tempdir().unwrap();
        let run = StoredRun::open(tmp.path());
        assert!(
            matches!(run.record::<Options>(), Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound)
        );
        let older = r#"{"promise": "data-safety", "options": {"config": "fenced"}}"#;
        std::fs::write(run.run_json(), older).unwrap();
        let record = run.record::<Options>().unwrap();
        assert_eq!(record.promise, Promise::DataSafety);
        assert_eq!(record.options.config, "fenced");
        assert_eq!(record.options.workers, Options::default().workers);
        assert_eq!((record.schedule.clone(), record.interrupted), (None, false));
        let settings = record.settings();
        assert_eq!(settings.deadlock_after, Some(Duration::from_secs(1)));
        // A client that declares no TTL: the threshold has none in it.
        let untimed = RunRecord {
            client: Some(ClientRecord {
                features: vec!["check".into(), NO_TTL.into()],
                ..ClientRecord::default()
            }),
            ..record.clone()
        };
        assert!(!untimed.expires() && record.expires());
        assert_eq!(untimed.settings().deadlock_after, Some(Duration::ZERO));
        write_json(
            &run.run_json(),
            &RunRecord {
                schedule: Some(vec!["pause".to_string()]),
                ..record
            },
        )
        .unwrap();
        let again = run.record::<Options>().unwrap().schedule;
        assert_eq!(again, Some(vec!["pause".to_string()]));
        std::fs::write(run.run_json(), r#"{"options": {}}"#).unwrap();
        assert!(
            matches!(run.record::<Options>(), Err(ReadError::Json(e)) if e.is_data()),
            "no promise: not a run record"
        );
    }
}
