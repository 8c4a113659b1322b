//! One run: provision nodes, start workers and the nemesis, stop them all,
//! take the final read, check the history and store the results.

use crate::error::{Context, Error, Result};
use crate::interrupt::Interrupt;
use crate::journal::HistoryWriter;
use crate::options::{RunOptions, RunPlan};
use crate::record::RunRecord;
use crate::topology::Topology;
use crate::{logging, workers};
use backend::Provisioner;
use checker::history::{f, OpType, Process};
use checker::History;
use checker::{Results, Validity};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use store::{write_json, RunDir};
use tokio::sync::watch;
use tokio::time::Instant;
use workloads::adapter::{AdapterSpec, Hello};
use workloads::clock::RunClock;
use workloads::install::Prepared;
use workloads::storage::StorageKind;
use workloads::{Config, Outcome, WorkerSpec};

pub struct RunOutcome {
    pub dir: PathBuf,
    pub record: RunRecord,
    pub results: Results,
    /// An invalid run's first breach, told (`None` for a run that broke no
    /// promise, or one read back from its folder).
    pub first_breach: Option<checker::Explanation>,
}

/// Runs one test. Every process it starts is gone when it returns, on every
/// path: orderly shutdown first, and the nodes' and workers' drop guards (plus
/// the kernel's parent-death signal) behind it.
///
/// What can be checked without starting anything is checked before the run's
/// folder is made; a run that fails before it records anything leaves no
/// folder. The error is the caller's to show: it goes to harness.log only.
pub async fn run(options: RunOptions) -> Result<RunOutcome> {
    let wanted = options.nodes.address_block;
    let mut plan = options.resolve()?;
    let block = crate::blocks::claim_one(wanted)?;
    plan.address_block = block.block();
    let outcome = run_plan(plan).await?;
    // The user's own run becomes its pair's `latest`; a matrix cell, run
    // through `run_plan`, leaves the link to the user.
    store::layout::link_latest(&outcome.dir)?;
    Ok(outcome)
}

/// How long the workers have to set up their clients before the clock
/// starts without the late ones: an adapter's own `init` budget, and a few
/// seconds for its worker to start.
const READY_WITHIN: Duration = Duration::from_secs(workloads::adapter::INIT_BUDGET.as_secs() + 5);

/// Runs a plan already resolved, in the address block its caller holds
/// (the matrix resolves each of its runs once).
pub async fn run_plan(options: RunPlan) -> Result<RunOutcome> {
    crate::topology::needs_firewall(&options)?;
    // Set up before the run's folder exists: the first use installs the
    // shipped adapters' environment.
    let client = match &options.client {
        Some(client) => Some(crate::clients::prepare(client)?),
        None => None,
    };
    let backend = backend::provision(
        options.backend,
        options.image.as_deref(),
        options.config == Config::Replicated,
    )
    .await?;
    let outcome = run_on(&options, client, backend.clone()).await;
    // Whatever of the run is left on the backend goes, on every path.
    backend.finish().await;
    outcome
}

async fn run_on(
    options: &RunPlan,
    client: Option<Prepared>,
    backend: Arc<dyn Provisioner>,
) -> Result<RunOutcome> {
    let interrupt = Interrupt::catch().context(|| "catching stop signals".into())?;
    let dir = RunDir::create(&options.results, &options.name())?;
    let log = std::fs::File::create(dir.harness_log()).and_then(|log| Ok((log.try_clone()?, log)));
    let (mut errors, log) = match log {
        Ok(logs) => logs,
        Err(e) => {
            dir.discard();
            return Err(e).context(|| "creating harness.log".into());
        }
    };
    logging::attach(log);
    let outcome = run_in(options, client, backend, &dir, &interrupt).await;
    logging::detach();
    match outcome {
        Err(e) if !dir.history().exists() => {
            dir.discard();
            Err(match e {
                // Its log went with the folder: the message quotes the node.
                Error::Backend(backend::Error::Node { name, message, .. }) => {
                    Error::NodeStart { name, message }
                }
                e => e,
            })
        }
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(errors, "ERROR run failed: {e}");
            Err(e)
        }
        Ok(outcome) => own_adapters_folder(options, outcome),
    }
}

/// A `--client-cmd` run's folder is named after the library its adapter
/// named at `init` (`single.my-lock-1.0-pause/`), once the run has ended,
/// so the runs of several adapters do not share `single.custom-pause/`.
/// Its nodes ran inside it, so it cannot move before they are gone.
fn own_adapters_folder(options: &RunPlan, mut outcome: RunOutcome) -> Result<RunOutcome> {
    if !matches!(options.client, Some(crate::clients::Client::Cmd(_))) {
        return Ok(outcome);
    }
    let library = outcome.record.client.as_ref().map(|c| c.library.as_str());
    let Some(slug) = library.and_then(store::layout::slug) else {
        return Ok(outcome);
    };
    outcome.dir = store::layout::regroup(&outcome.dir, &options.name_as(&slug))?;
    Ok(outcome)
}

async fn run_in(
    options: &RunPlan,
    client: Option<Prepared>,
    backend: Arc<dyn Provisioner>,
    dir: &RunDir,
    interrupt: &Interrupt,
) -> Result<RunOutcome> {
    tracing::info!(
        "run {} seed {} in {}",
        options.name(),
        options.seed,
        dir.path.display()
    );
    // Dropping a half-started topology kills its nodes and removes its chain.
    let nodes = dir.nodes();
    let started = std::time::Instant::now();
    let starting = Topology::start(options, backend.clone(), &nodes);
    let topology = match unless_interrupted(interrupt, "its nodes started", starting).await {
        Ok(topology) => Arc::new(topology),
        Err(halt) => return halted(options, &*backend, dir, halt),
    };
    tracing::info!(
        "{} nodes up on the {} backend in {:.2} s",
        topology.records().await.len(),
        backend.record().kind,
        started.elapsed().as_secs_f64()
    );
    let run = Run {
        options,
        backend: &*backend,
        dir,
        topology: &topology,
        interrupt,
        client,
    };
    // On a deployment lockstorm did not start, its keys are checked before
    // the first write and removed after the last, whatever ended the run;
    // keys it found there are not its own, and stay.
    let deployment = topology.deployment();
    let outcome = match deployment.preflight(options, &dir.path).await {
        Ok(servers) => {
            let outcome = run.phases(servers).await;
            deployment.clean(&options.keys).await;
            outcome
        }
        Err(e) => Err(e),
    };
    topology.shutdown().await;
    outcome
}

/// What the phases of one run share: its plan, its backend, its folder,
/// its nodes, its stop signals and the client adapter it tests.
struct Run<'a> {
    options: &'a RunPlan,
    backend: &'a dyn Provisioner,
    dir: &'a RunDir,
    topology: &'a Arc<Topology>,
    interrupt: &'a Interrupt,
    client: Option<Prepared>,
}

/// Why a run ended before any worker ran.
enum Halt {
    Failed(Error),
    /// A stop signal, while what it names was under way.
    Interrupted(&'static str),
}

impl From<Error> for Halt {
    fn from(e: Error) -> Halt {
        Halt::Failed(e)
    }
}

/// `work`, unless a stop signal comes first: then the work is dropped (a
/// half-started topology kills its nodes) and the run ends before any
/// worker ran, `during` saying while what.
async fn unless_interrupted<T>(
    interrupt: &Interrupt,
    during: &'static str,
    work: impl std::future::Future<Output = Result<T>>,
) -> Result<T, Halt> {
    tokio::select! {
        biased;
        done = work => Ok(done?),
        _ = interrupt.wait() => Err(Halt::Interrupted(during)),
    }
}

/// The outcome of a run that ended before any worker ran.
fn halted(
    options: &RunPlan,
    backend: &dyn Provisioner,
    dir: &RunDir,
    halt: Halt,
) -> Result<RunOutcome> {
    match halt {
        Halt::Failed(e) => Err(e),
        Halt::Interrupted(during) => {
            let why = format!(
                "the run was interrupted by a signal while {during}, before any worker ran"
            );
            interrupted_at_startup(options, backend, dir, &why)
        }
    }
}

/// What preparing the clients found, for the phases after it.
#[derive(Default)]
struct Clients {
    client: Option<store::ClientRecord>,
    storage: Option<store::StorageAdapterRecord>,
    /// The key the adapter's library stores the lock under, if it prefixes
    /// the run's: what the observer watches.
    library_key: Option<String>,
    /// The storage adapter's own instance, kept for the final read.
    harness_storage: Option<crate::clients::HarnessStorage>,
}

/// The run under way: what starting the workers made, for the phases
/// after it.
struct Running {
    clock: RunClock,
    history: Arc<HistoryWriter>,
    holders: watch::Receiver<nemesis::Holder>,
    stalls: workloads::stall::Monitor,
    net: Option<nemesis::proxy::Fabric>,
    observer: Option<crate::observer::Observer>,
    pool: workers::Pool,
    record: RunRecord,
    steps: Vec<nemesis::Step>,
    harness_storage: Option<crate::clients::HarnessStorage>,
    watchers: Watchers,
}

/// The watchers of Sentinel's failovers and of nodes that die by themselves.
struct Watchers {
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

    async fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(w) = self.failovers {
            let _ = w.join();
        }
        let _ = self.deaths.await;
    }
}

/// The nemesis at play, until it is told to heal.
struct Faults {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Run<'_> {
    /// The run after its nodes are up, as a chain of phases (Jepsen's
    /// `core/run!`): prepare the clients, start the workers, play the
    /// faults, stop, judge, store.
    async fn phases(&self, servers: BTreeMap<String, String>) -> Result<RunOutcome> {
        let clients = match self.prepare_clients().await {
            Ok(clients) => clients,
            Err(halt) => return halted(self.options, self.backend, self.dir, halt),
        };
        let mut running = self.start_workers(clients, servers).await?;
        let faults = self.play_faults(&mut running).await;
        let record = self.stop(running, faults).await?;
        let (results, history) = self.judge(&record)?;
        self.store(record, results, history)
    }

    /// Before any worker starts: the client adapter started once against
    /// the nodes, and the storage adapter's own instance, which resets the
    /// counter.
    async fn prepare_clients(&self) -> Result<Clients, Halt> {
        let mut clients = Clients::default();
        if let Some(spec) = self.adapter("preflight") {
            let hello = self.check_adapter(&spec).await?;
            let chosen = self
                .options
                .client
                .as_ref()
                .expect("a prepared client was chosen");
            clients.client = Some(crate::clients::record(chosen, &spec, &hello));
            clients.library_key = hello.key.clone();
        }
        if let Some(spec) = self.storage_adapter("harness")? {
            let storage = crate::clients::HarnessStorage {
                spec,
                init: workloads::adapter::StorageInit {
                    worker: None,
                    key: self.options.keys.counter(),
                    node: self.topology.storage_addr.clone(),
                    // Its one read, the final one, carries no fence.
                    fenced: false,
                },
                op_timeout: self.options.op_timeout,
                broken: Default::default(),
            };
            let named = self.reset_storage(&storage).await?;
            clients.storage = Some(crate::clients::storage_record(&storage.spec, &named));
            clients.harness_storage = Some(storage);
        }
        Ok(clients)
    }

    /// The client adapter's `init` against the running nodes, and what the
    /// deployment asks of its lock while it holds it once.
    async fn check_adapter(&self, spec: &AdapterSpec) -> Result<Hello, Halt> {
        let (options, topology) = (self.options, self.topology);
        let init = spec.init(
            &topology.lock_addrs(),
            &topology.sentinel_addrs(),
            millis(options.ttl),
            millis(options.acquire_timeout),
            0,
            options.keys.lock(),
        );
        let checked = spec.clone();
        let leader = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let held = topology.deployment().adapter_key_check(&options.keys);
        let check = tokio::task::spawn_blocking({
            let leader = leader.clone();
            move || {
                let held = held
                    .as_ref()
                    .map(|h| h as &dyn Fn() -> std::result::Result<(), String>);
                crate::clients::preflight(&checked, init, &leader, held)
            }
        });
        let check = async {
            check
                .await
                .map_err(|e| Error::Adapter(format!("the adapter check failed: {e}")))?
        };
        // Left behind on a signal, the check's thread ends with the process
        // (the runtime does not wait for it); its adapter's group goes now.
        let during = "its client adapter started";
        unless_interrupted(self.interrupt, during, check)
            .await
            .inspect_err(|halt| {
                let pid = leader.load(Ordering::SeqCst);
                if matches!(halt, Halt::Interrupted(_)) && pid != 0 {
                    let _ = nemesis::process::kill_group(pid);
                }
            })
    }

    /// The storage adapter's own instance resets the counter: what storage
    /// it named.
    async fn reset_storage(
        &self,
        storage: &crate::clients::HarnessStorage,
    ) -> Result<String, Halt> {
        let check = tokio::task::spawn_blocking({
            let storage = storage.clone();
            move || storage.reset()
        });
        let check = async {
            check
                .await
                .map_err(|e| Error::Adapter(format!("the storage adapter check failed: {e}")))?
        };
        // Left behind on a signal, the check's thread ends with the process,
        // and its adapter (its own group) with the harness.
        unless_interrupted(self.interrupt, "its storage adapter started", check).await
    }

    /// The client adapter's spec for `name` (a worker, or the preflight),
    /// if the run tests one.
    fn adapter(&self, name: &str) -> Option<AdapterSpec> {
        let client = self.client.as_ref()?;
        let stderr = self.dir.path.join("clients").join(format!("{name}.stderr"));
        let mut spec = client.spec(self.options.config, stderr);
        self.topology
            .deployment()
            .adapter_login(&mut spec, self.options);
        Some(spec)
    }

    /// The storage adapter's spec for `name`, if the run keeps its counter
    /// through one.
    fn storage_adapter(&self, name: &str) -> Result<Option<AdapterSpec>> {
        match &self.options.storage_cmd {
            Some(cmd) => {
                let stderr = self.dir.path.join("storage").join(format!("{name}.stderr"));
                Ok(Some(cmd.spec(stderr)?))
            }
            None => Ok(None),
        }
    }

    /// The history and its stall watch, the fault proxy, the observer and
    /// the workers; run.json as the run begins; the watchers of failovers
    /// and of nodes that die by themselves.
    async fn start_workers(
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

    /// The nemesis, set to play the schedule once every worker is ready,
    /// and the run waited out; the nemesis is handed back still playing.
    async fn play_faults(&self, running: &mut Running) -> Faults {
        let (stop, stop_rx) = watch::channel(false);
        let env = nemesis::Env {
            workers: running.pool.pids.clone(),
            worker_control: Arc::new(running.pool.controls.clone()),
            parked: running.pool.parked(),
            cluster: self.topology.clone(),
            holders: running.holders.clone(),
            journal: running.history.clone(),
            arm_timeout: self.options.nemesis_interval.max(self.options.ttl),
            stop: stop_rx,
            net: running.net.clone(),
        };
        // The schedule and the time limit start once every worker is ready, as
        // Jepsen opens its clients before its generator runs: five adapters
        // importing their libraries on a busy machine took seconds, and a fault
        // due before any worker cycled found no one to strike.
        let (go, started) = tokio::sync::oneshot::channel();
        let (steps, params) = (
            std::mem::take(&mut running.steps),
            self.options.fault_params(),
        );
        let task = tokio::spawn(async move {
            if let Ok(start) = started.await {
                nemesis::play(steps, env, params, start).await;
            }
        });
        self.wait_out(running, go).await;
        Faults { stop, task }
    }

    /// Until the time limit, counted from when every worker is ready (or
    /// [`READY_WITHIN`] passed), unless a signal or an adapter that broke
    /// the protocol ends the run first; the record says which.
    async fn wait_out(&self, running: &mut Running, go: tokio::sync::oneshot::Sender<Instant>) {
        let options = self.options;
        let Running {
            pool,
            clock,
            history,
            record,
            ..
        } = running;
        let title = options.name();
        let mut broken = pool.broken();
        let ready_at = std::cell::Cell::new(None);
        let run = async {
            let (took, late) = pool.ready(READY_WITHIN).await;
            match late {
                0 => tracing::info!("workers ready in {:.2} s", took.as_secs_f64()),
                n => tracing::warn!(
                    "{n} of {} workers not ready after {:.0} s: starting the clock without them",
                    options.workers,
                    took.as_secs_f64()
                ),
            }
            ready_at.set(Some(clock.now() / 1_000_000));
            let _ = go.send(Instant::now());
            crate::progress::wait(&title, options.time_limit, || history.snapshot()).await
        };
        tokio::select! {
            _ = run => {}
            _ = self.interrupt.wait() => record.interrupted_at_ms = Some(clock.now() / 1_000_000),
            why = async {
                match broken.wait_for(Option::is_some).await {
                    Ok(why) => why.clone().unwrap_or_default(),
                    // Every supervisor has ended: nothing more can break.
                    Err(_) => std::future::pending().await,
                }
            } => {
                tracing::error!("an adapter broke the protocol: {why}; ending the run");
                record.adapter_broken = Some(why);
            }
        }
        record.workers_ready_ms = ready_at.get();
    }

    /// Heals first, so no worker is left stopped and no node down, then
    /// lets the workers finish their cycles; the observer and the proxy
    /// stop, the final read is taken, and the history is closed.
    async fn stop(&self, running: Running, faults: Faults) -> Result<RunRecord> {
        if !self.interrupt.happened() {
            tracing::info!("time limit reached: healing faults and stopping workers");
        }
        let _ = faults.stop.send(true);
        faults.task.await.map_err(Error::NemesisTask)?;
        let Running {
            clock,
            history,
            stalls,
            net,
            observer,
            pool,
            mut record,
            harness_storage,
            watchers,
            ..
        } = running;
        stop_workers(pool, self.options, self.interrupt).await;
        // After the workers' last releases, before the final read: the
        // observer's events all fall inside the workers' part of the history.
        if let Some(observer) = observer {
            let _ = tokio::task::spawn_blocking(move || observer.stop()).await;
        }
        if let Some(net) = &net {
            record.proxied_requests = Some(net.requests());
            net.shutdown().await;
        }
        self.final_read(&history, harness_storage, &mut record)
            .await;
        watchers.stop().await;
        drop(stalls);
        history
            .finish()
            .context(|| "writing history.jsonl".into())?;
        // A signal during the stop or the check counts too: the run was cut short.
        record.interrupted = self.interrupt.happened();
        if record.interrupted && record.interrupted_at_ms.is_none() {
            record.interrupted_at_ms = Some(clock.now() / 1_000_000);
        }
        Ok(record)
    }

    /// The harness's read of the counter, once every worker has stopped;
    /// a storage adapter that broke the protocol there is why the run ended.
    async fn final_read(
        &self,
        history: &HistoryWriter,
        harness_storage: Option<crate::clients::HarnessStorage>,
        record: &mut RunRecord,
    ) {
        let (options, topology) = (self.options, self.topology);
        read_counter(
            history,
            options.storage,
            &topology.storage_addr,
            &options.keys,
            topology.deployment().storage_login(),
            harness_storage.clone(),
        )
        .await;
        if let (None, Some(storage)) = (&record.adapter_broken, &harness_storage) {
            record.adapter_broken = storage.broken.lock().map(|b| b.clone()).unwrap_or_default();
        }
    }

    /// Checks the history as stored on disk, the same way `lockstorm check`
    /// does, and holds the verdict to what the run could show.
    fn judge(&self, record: &RunRecord) -> Result<(Results, History)> {
        let path = self.dir.history();
        let file = std::fs::File::open(&path).context(|| format!("opening {}", path.display()))?;
        let history =
            History::from_jsonl(std::io::BufReader::new(file)).map_err(|e| Error::BadInput {
                path: path.clone(),
                message: e.to_string(),
            })?;
        let mut results = checker::check(&history, record.settings());
        crate::check::judge_run(&mut results, record);
        Ok((results, history))
    }

    /// results.json, the pictures and run.json as the run ended; an invalid
    /// run's first breach, told.
    fn store(&self, record: RunRecord, results: Results, history: History) -> Result<RunOutcome> {
        let (options, dir) = (self.options, self.dir);
        write_json(&dir.results_json(), &results)?;
        // Pictures are evidence, not the verdict: a failure to draw is logged.
        let setup = report::plot::Setup {
            workers: options.workers,
            lease: record.lease(),
        };
        if let Err(e) =
            report::plot::render(&dir.path, &history, &results, setup, &options.heading())
        {
            tracing::warn!("drawing the run's pictures failed: {e:#}");
        }
        write_json(&dir.run_json(), &record)?;
        tracing::info!("verdict {:?}", results.valid);
        let first_breach = (results.valid == checker::Validity::False)
            .then(|| crate::explain::first_breach(&history, &results, &record))
            .flatten();
        Ok(RunOutcome {
            dir: dir.path.clone(),
            record,
            results,
            first_breach,
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

/// Lets the workers finish their cycles, unless a signal says to stop: then
/// they get [`SIGNAL_GRACE`] and are killed (each recorded as a crash, its
/// op in flight as `info`), so a long critical section is not waited out.
async fn stop_workers(pool: workers::Pool, options: &RunPlan, interrupt: &Interrupt) {
    let pids = pool.pids.clone();
    let grace = match interrupt.happened() {
        true => SIGNAL_GRACE,
        false => stop_grace(options),
    };
    let stopping = pool.stop(grace);
    tokio::pin!(stopping);
    tokio::select! {
        _ = &mut stopping => return,
        _ = async {
            interrupt.wait().await;
            tokio::time::sleep(SIGNAL_GRACE).await;
        } => {}
    }
    tracing::warn!("stopping the workers now: a signal cut their last cycle short");
    for pid in pids.snapshot() {
        // Each worker leads its own group: its adapter goes with it. Only a
        // worker not yet reaped (a zombie holds its pid) is signalled, so
        // the group cannot be someone else's.
        if nemesis::process::parent(pid) == Some(std::process::id()) {
            let _ = nemesis::process::kill_group(pid);
        }
    }
    stopping.await;
}

/// How long workers may take to finish their cycle once a signal asked the
/// run to stop: a run stops within about two seconds of a signal.
const SIGNAL_GRACE: Duration = Duration::from_secs(1);

/// Long enough for a worker to finish the cycle it is in: an acquire that
/// retries to its deadline, the work, and a few requests that time out.
fn stop_grace(options: &RunPlan) -> Duration {
    options.acquire_timeout + options.work + 4 * options.op_timeout + Duration::from_secs(2)
}

/// The worker's spec speaks milliseconds, as its command line does.
fn millis(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// The harness reads the counter once every worker has stopped: through a
/// fresh instance of its storage adapter if the run has one, else from the
/// storage node.
async fn read_counter(
    history: &HistoryWriter,
    kind: StorageKind,
    storage: &str,
    keys: &workloads::Keys,
    login: Option<workloads::conn::Login>,
    adapter: Option<crate::clients::HarnessStorage>,
) {
    let harness = Process::harness();
    history.append(history.now(harness.clone(), OpType::Invoke, f::READ), None);
    let (addr, keys) = (storage.to_string(), keys.clone());
    let read = tokio::task::spawn_blocking(move || match adapter {
        Some(adapter) => adapter.read(),
        None => {
            let timeout = Duration::from_secs(5);
            workloads::storage::open(kind, &addr, &keys, timeout, login, false, "harness")
                .read(None)
        }
    })
    .await
    .unwrap_or_else(|e| Outcome::Info(e.to_string()));
    let event = history.now(harness, OpType::Ok, f::READ);
    let event = match read {
        Outcome::Ok(v) => event.with_value(v.into()),
        Outcome::Fail(e) => history
            .now(Process::harness(), OpType::Fail, f::READ)
            .with_error(e),
        Outcome::Info(e) => history
            .now(Process::harness(), OpType::Info, f::READ)
            .with_error(e),
    };
    history.append(event, None);
}

/// How late a worker's event can reach the journal: a pause holds it back.
fn late_events(options: &RunPlan) -> Duration {
    options.pause.max(options.node_pause) + Duration::from_secs(1)
}

/// A signal arrived before any worker ran (`why` says during what): nothing
/// ran, nothing is decided. The folder keeps run.json and results.json;
/// `latest` is left alone.
fn interrupted_at_startup(
    options: &RunPlan,
    backend: &dyn Provisioner,
    dir: &RunDir,
    why: &str,
) -> Result<RunOutcome> {
    let mut record = new_record(options, backend);
    record.interrupted = true;
    let mut results = checker::check(&History::default(), record.settings());
    mark_interrupted(&mut results, why);
    write_json(&dir.run_json(), &record)?;
    write_json(&dir.results_json(), &results)?;
    Ok(RunOutcome {
        dir: dir.path.clone(),
        record,
        results,
        first_breach: None,
    })
}

/// The record of a run about to start: nodes, workers and schedule empty.
fn new_record(options: &RunPlan, backend: &dyn Provisioner) -> RunRecord {
    RunRecord {
        lockstorm: env!("CARGO_PKG_VERSION").to_string(),
        redis: backend.redis_version(),
        postgres: (options.storage == StorageKind::Postgres).then(|| {
            backend::postgres::Programs::find().map_or_else(|e| e.to_string(), |p| p.version())
        }),
        etcd: options.config.locks_in_etcd().then(backend::etcd::version),
        backend: Some(backend.record()),
        started: chrono::Utc::now().to_rfc3339(),
        promise: options.config.promise(),
        options: options.clone(),
        nodes: Vec::new(),
        worker_pids: Vec::new(),
        schedule: Some(Vec::new()),
        interrupted: false,
        interrupted_at_ms: None,
        workers_ready_ms: None,
        client: None,
        storage_adapter: None,
        adapter_broken: None,
        proxied_requests: None,
        target_servers: Default::default(),
    }
}

/// An interrupted run decides nothing, whatever it saw so far (the counts
/// stay in the results).
fn mark_interrupted(results: &mut Results, why: &str) {
    results.notes.push(why.into());
    results.valid = Validity::Unknown;
}
