//! Start the workers: the history and its stall watch, the fault proxy,
//! the observer and the worker pool; run.json as the run begins; and the
//! watchers of failovers and of nodes that die by themselves.

use super::prepare::Clients;
use super::{millis, new_record, Run};
use crate::clients::HarnessStorage;
use crate::error::{Context, Error, Result};
use crate::journal::HistoryWriter;
use crate::options::RunPlan;
use crate::record::RunRecord;
use crate::topology::Topology;
use crate::workers;
use checker::history::Process;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use store::write_json;
use tokio::sync::watch;
use workloads::clock::RunClock;
use workloads::WorkerSpec;

/// The run under way: what starting the workers made, for the phases
/// after it.
pub(super) struct Running {
    pub(super) clock: RunClock,
    pub(super) history: Arc<HistoryWriter>,
    pub(super) holders: watch::Receiver<nemesis::Holder>,
    pub(super) stalls: workloads::stall::Monitor,
    pub(super) net: Option<nemesis::proxy::Fabric>,
    pub(super) observer: Option<crate::observer::Observer>,
    pub(super) pool: workers::Pool,
    pub(super) record: RunRecord,
    pub(super) steps: Vec<nemesis::Step>,
    pub(super) harness_storage: Option<HarnessStorage>,
    pub(super) watchers: Watchers,
}

/// The watchers of Sentinel's failovers and of nodes that die by themselves.
pub(super) struct Watchers {
    /// Turns true when they are to stop.
    stop: Arc<AtomicBool>,
    failovers: Option<std::thread::JoinHandle<()>>,
    deaths: tokio::task::JoinHandle<()>,
}

impl Watchers {
    fn start(topology: &Arc<Topology>, history: &Arc<HistoryWriter>) -> Watchers {
        let stop = Arc::new(AtomicBool::new(false));
        Watchers {
            failovers: topology.watch_failovers(history.clone(), stop.clone()),
            deaths: topology.watch_deaths(history.clone(), stop.clone()),
            stop,
        }
    }

    pub(super) async fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(w) = self.failovers {
            let _ = w.join();
        }
        let _ = self.deaths.await;
    }
}

impl Run<'_> {
    /// The history and its stall watch, the fault proxy, the observer and
    /// the workers; run.json as the run begins; the watchers of failovers
    /// and of nodes that die by themselves.
    pub(super) async fn start_workers(
        &self,
        clients: Clients,
        servers: BTreeMap<String, String>,
    ) -> Result<Running> {
        let (options, topology, dir) = (self.options, self.topology, self.dir);
        let clock = RunClock::starting_now();
        let (history, holders) = HistoryWriter::create(&dir.history(), clock, late_events(options))
            .context(|| "creating history.jsonl".into())?;
        let history = Arc::new(history);
        let stalls = {
            let history = history.clone();
            let who = Process::harness().to_string();
            workloads::stall::watch(who, clock, move |s| history.append(s.event(), None))
        };
        let exe = std::env::current_exe().context(|| "finding the lockstorm binary".into())?;
        let net = crate::proxied::start(options, topology).await?;
        let specs = self.worker_specs(clock, net.as_ref())?;
        let observer = self.start_observer(clients.library_key, &history).await?;
        let pool = workers::Pool::start(specs, &exe, &dir.path, history.clone())?;

        let steps = options.schedule();
        let mut record = new_record(options, self.backend);
        record.client = clients.client;
        record.storage_adapter = clients.storage;
        record.nodes = topology.records().await;
        record.target_servers = servers;
        record.worker_pids = pool.pids.snapshot();
        record.schedule = Some(steps.clone());
        write_json(&dir.run_json(), &record)?;

        Ok(Running {
            watchers: Watchers::start(topology, &history),
            clock,
            history,
            holders,
            stalls,
            net,
            observer,
            pool,
            record,
            steps,
            harness_storage: clients.harness_storage,
        })
    }

    /// Every worker's spec, through the fault proxy if the run has one.
    fn worker_specs(
        &self,
        clock: RunClock,
        net: Option<&nemesis::proxy::Fabric>,
    ) -> Result<Vec<WorkerSpec>> {
        (0..self.options.workers)
            .map(|index| {
                let name = checker::history::worker_name(index);
                let spec = WorkerSpec {
                    adapter: self.adapter(&name),
                    storage_adapter: self.storage_adapter(&name)?,
                    ..self.worker_spec(index, clock)
                };
                Ok(match net {
                    Some(net) => crate::proxied::route(spec, net, self.topology),
                    None => spec,
                })
            })
            .collect()
    }

    /// The observer on every lock node, with each worker's address to name
    /// who sent what, on nodes the run may watch (a lock that is
    /// PostgreSQL's or etcd's has no key to watch); its start waits for
    /// every node's setup, off the runtime's threads.
    async fn start_observer(
        &self,
        library_key: Option<String>,
        history: &Arc<HistoryWriter>,
    ) -> Result<Option<crate::observer::Observer>> {
        let (options, topology) = (self.options, self.topology);
        let nodes = topology.observed();
        if !topology.deployment().owned() || nodes.is_empty() {
            return Ok(None);
        }
        let key = library_key.unwrap_or_else(|| options.keys.lock());
        let senders = crate::observer::Senders {
            workers: (0..options.workers)
                .map(|i| topology.addresses.worker(i))
                .collect(),
            nodes: nodes
                .iter()
                .filter_map(|n| match n.addr.ip() {
                    std::net::IpAddr::V4(ip) => Some(ip),
                    std::net::IpAddr::V6(_) => None,
                })
                .collect(),
        };
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        tracing::info!(target: "observer", "observing the lock key {key} on {}", names.join(", "));
        let history = history.clone();
        tokio::task::spawn_blocking(move || {
            crate::observer::Observer::start(nodes, key, senders, history)
        })
        .await
        .map(Some)
        .map_err(|e| Error::Io {
            context: "starting the observer".into(),
            source: std::io::Error::other(e),
        })
    }

    /// Worker `index`'s spec, its adapters apart.
    fn worker_spec(&self, index: u64, clock: RunClock) -> WorkerSpec {
        let (options, topology) = (self.options, self.topology);
        let deployment = topology.deployment();
        WorkerSpec {
            config: options.config,
            index,
            workers: options.workers,
            lock_nodes: topology.lock_addrs(),
            lock_node_names: topology.lock_names(),
            sentinels: topology.sentinel_addrs(),
            master: options.master(),
            login: deployment.login(),
            storage_login: deployment.storage_login(),
            wait_replicas: options.wait_replicas,
            source: topology.worker_source(index),
            storage_node: topology.storage_addr.clone(),
            storage: options.storage,
            keys: options.keys.clone(),
            ttl_ms: millis(options.ttl),
            work_ms: millis(options.work),
            acquire_timeout_ms: millis(options.acquire_timeout),
            op_timeout_ms: millis(options.op_timeout),
            validity_check: !options.no_validity_check,
            seed: options.seed,
            run_start_ns: clock.start_ns(),
            first_process: None,
            adapter: None,
            storage_adapter: None,
        }
    }
}

/// How late a worker's event can reach the journal: a pause holds it back.
fn late_events(options: &RunPlan) -> Duration {
    options.pause.max(options.node_pause) + Duration::from_secs(1)
}
