//! One run: provision nodes, start workers and the nemesis, stop them all,
//! take the final read, check the history and store the results.

use crate::error::{Context, Error, Result};
use crate::interrupt::Interrupt;
use crate::journal::HistoryWriter;
use crate::options::{RunOptions, RunPlan};
use crate::record::RunRecord;
use crate::topology::{Topology, STORAGE};
use crate::{logging, workers};
use backend::Provisioner;
use checker::history::{f, OpType, Process};
use checker::History;
use checker::{Results, Validity};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use store::{write_json, RunDir};
use tokio::sync::watch;
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
    pub first_breach: Option<story::Explanation>,
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
    let topology = tokio::select! {
        t = Topology::start(options, backend.clone(), &nodes) => Arc::new(t?),
        _ = interrupt.wait() => return interrupted_at_startup(
            options,
            &*backend,
            dir,
            "the run was interrupted by a signal while its nodes started, before any worker ran",
        ),
    };
    tracing::info!(
        "{} nodes up on the {} backend in {:.2} s",
        topology.records().await.len(),
        backend.record().kind,
        started.elapsed().as_secs_f64()
    );
    // On a deployment lockstorm did not start, its keys are checked before
    // the first write and removed after the last, whatever ended the run;
    // keys it found there are not its own, and stay.
    let mut servers = Default::default();
    if let Some(target) = topology.target() {
        // Read only, before the first write: what in the deployment can
        // break a lock, beside the run that shows what does.
        let audited = crate::audit::for_run(target, options.ttl, &dir.path).await;
        match audited {
            Ok(seen) => {
                tracing::info!("audit of {target}: {}", seen.summary);
                servers = seen.servers;
            }
            Err(e) => tracing::warn!("audit of {target} failed: {e}"),
        }
        let nodes = crate::observer::data_nodes(&topology.observed());
        let mut checked = deployment::own_keys::preflight(target, nodes, &options.keys).await;
        if let (Ok(()), Some(storage)) = (&checked, topology.storage_target()) {
            let node = vec![(STORAGE.to_string(), storage.endpoints[0].clone())];
            checked = deployment::own_keys::preflight(storage, node, &options.keys).await;
        }
        if let Err(e) = checked {
            topology.shutdown().await;
            return Err(e.into());
        }
    }
    let outcome = run_workload(
        options, client, &*backend, dir, &topology, interrupt, servers,
    )
    .await;
    if let Some(target) = topology.target() {
        let nodes = crate::observer::data_nodes(&topology.observed());
        let mut removed = deployment::own_keys::clean(target, nodes, &options.keys).await;
        if let Some(storage) = topology.storage_target() {
            let node = vec![(STORAGE.to_string(), storage.endpoints[0].clone())];
            removed += deployment::own_keys::clean(storage, node, &options.keys).await;
        }
        tracing::info!(
            "removed {removed} key(s) of {}* from {target}",
            options.keys.prefix
        );
    }
    topology.shutdown().await;
    outcome
}

async fn run_workload(
    options: &RunPlan,
    client: Option<Prepared>,
    backend: &dyn Provisioner,
    dir: &RunDir,
    topology: &Arc<Topology>,
    interrupt: &Interrupt,
    target_servers: std::collections::BTreeMap<String, String>,
) -> Result<RunOutcome> {
    let steps = options.schedule();
    let adapter = |name: &str| {
        let client = client.as_ref()?;
        let mut spec = client.spec(
            options.config,
            dir.path.join("clients").join(format!("{name}.stderr")),
        );
        deployment::reach::adapter_login(&mut spec, options.target.as_ref(), options.master());
        Some(spec)
    };
    let mut client_record = None;
    let mut storage_record = None;
    // The key the adapter's library stores the lock under, if it prefixes
    // the run's: what the observer watches.
    let mut library_key = None;
    if let Some(spec) = adapter("preflight") {
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
        // On a target that names a database, the adapter's lock must land
        // there: one told `db` in init that ignores it writes among the
        // user's keys in database 0.
        let in_db = topology
            .target()
            .filter(|t| t.db != 0)
            .map(|t| (t.clone(), crate::observer::data_nodes(&topology.observed())));
        let keys = options.keys.clone();
        let check = tokio::task::spawn_blocking({
            let leader = leader.clone();
            move || {
                let held = in_db.as_ref().map(|(target, nodes)| {
                    move || deployment::own_keys::holds_a_run_key(target, nodes, &keys)
                });
                let held = held
                    .as_ref()
                    .map(|h| h as &dyn Fn() -> std::result::Result<(), String>);
                crate::clients::preflight(&checked, init, &leader, held)
            }
        });
        // Left behind on a signal, the check's thread ends with the process
        // (the runtime does not wait for it); its adapter's group goes now.
        let hello = tokio::select! {
            biased;
            hello = check => hello
                .map_err(|e| Error::Adapter(format!("the adapter check failed: {e}")))??,
            _ = async {
                interrupt.wait().await;
                match leader.load(Ordering::SeqCst) {
                    0 => {}
                    pid => { let _ = nemesis::process::kill_group(pid); }
                }
            } => return interrupted_at_startup(
                options,
                backend,
                dir,
                "the run was interrupted by a signal while its client adapter started, before any worker ran",
            ),
        };
        let chosen = options
            .client
            .as_ref()
            .expect("a prepared client was chosen");
        client_record = Some(crate::clients::record(chosen, &spec, &hello));
        library_key = hello.key.clone();
    }
    // The storage adapter's own instance resets the counter before any
    // worker starts, and is kept for the final read.
    let storage_spec = |name: &str| match &options.storage_cmd {
        Some(cmd) => cmd
            .spec(dir.path.join("storage").join(format!("{name}.stderr")))
            .map(Some),
        None => Ok(None),
    };
    let mut harness_storage = None;
    if let Some(spec) = storage_spec("harness")? {
        let storage = crate::clients::HarnessStorage {
            spec,
            init: workloads::adapter::StorageInit {
                worker: None,
                key: options.keys.counter(),
                node: topology.storage_addr.clone(),
                // Its one read, the final one, carries no fence.
                fenced: false,
            },
            op_timeout: options.op_timeout,
            broken: Default::default(),
        };
        let check = tokio::task::spawn_blocking({
            let storage = storage.clone();
            move || storage.reset()
        });
        // Left behind on a signal, the check's thread ends with the process,
        // and its adapter (its own group) with the harness.
        let named = tokio::select! {
            biased;
            named = check => named
                .map_err(|e| Error::Adapter(format!("the storage adapter check failed: {e}")))??,
            _ = interrupt.wait() => return interrupted_at_startup(
                options,
                backend,
                dir,
                "the run was interrupted by a signal while its storage adapter started, before any worker ran",
            ),
        };
        storage_record = Some(crate::clients::storage_record(&storage.spec, &named));
        harness_storage = Some(storage);
    }
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
    let specs = (0..options.workers)
        .map(|index| {
            let name = checker::history::worker_name(index);
            Ok(WorkerSpec {
                adapter: adapter(&name),
                storage_adapter: storage_spec(&name)?,
                ..worker_spec(options, index, topology, clock)
            })
        })
        .map(|spec| match &net {
            Some(net) => spec.map(|spec| crate::proxied::route(spec, net, topology)),
            None => spec,
        })
        .collect::<Result<_>>()?;
    // The observer reads MONITOR and turns keyspace events on: on a
    // deployment lockstorm did not start it would see its owner's traffic
    // and change its config, so it watches only nodes lockstorm owns. A
    // lock that is PostgreSQL's has no key to watch.
    let observer = match options.target {
        None if !topology.observed().is_empty() => {
            let key = library_key.unwrap_or_else(|| options.keys.lock());
            Some(start_observer(options, topology, key, history.clone()).await?)
        }
        _ => None,
    };
    let pool = workers::Pool::start(specs, &exe, &dir.path, history.clone())?;

    let mut record = new_record(options, backend);
    record.client = client_record;
    record.storage_adapter = storage_record;
    record.nodes = topology.records().await;
    record.target_servers = target_servers;
    record.worker_pids = pool.pids.snapshot();
    record.schedule = Some(steps.clone());
    write_json(&dir.run_json(), &record)?;

    let watching = Arc::new(AtomicBool::new(false));
    let watcher = topology.watch_failovers(history.clone(), watching.clone());
    let deaths = topology.watch_deaths(history.clone(), watching.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    let env = nemesis::Env {
        workers: pool.pids.clone(),
        worker_control: Arc::new(pool.controls.clone()),
        parked: pool.parked(),
        cluster: topology.clone(),
        holders,
        journal: history.clone(),
        arm_timeout: options.nemesis_interval.max(options.ttl),
        stop: stop_rx,
        net: net.clone(),
    };
    // The schedule and the time limit start once every worker is ready, as
    // Jepsen opens its clients before its generator runs: five adapters
    // importing their libraries on a busy machine took seconds, and a fault
    // due before any worker cycled found no one to strike.
    let (go, started) = tokio::sync::oneshot::channel();
    let params = options.fault_params();
    let nemesis = tokio::spawn(async move {
        if let Ok(start) = started.await {
            nemesis::play(steps, env, params, start).await;
        }
    });

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
        let _ = go.send(tokio::time::Instant::now());
        crate::progress::wait(&title, options.time_limit, || history.snapshot()).await
    };
    tokio::select! {
        _ = run => {}
        _ = interrupt.wait() => record.interrupted_at_ms = Some(clock.now() / 1_000_000),
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

    if !interrupt.happened() {
        tracing::info!("time limit reached: healing faults and stopping workers");
    }
    // Heal first, so no worker is left stopped and no node down, then let
    // workers finish their cycles.
    let _ = stop_tx.send(true);
    nemesis.await.map_err(Error::NemesisTask)?;
    stop_workers(pool, options, interrupt).await;
    // After the workers' last releases, before the final read: the
    // observer's events all fall inside the workers' part of the history.
    if let Some(observer) = observer {
        let _ = tokio::task::spawn_blocking(move || observer.stop()).await;
    }
    if let Some(net) = &net {
        record.proxied_requests = Some(net.requests());
        net.shutdown().await;
    }
    let storage_login = options.storage_target.as_ref().map(|t| t.login());
    final_read(
        &history,
        options.storage,
        &topology.storage_addr,
        &options.keys,
        storage_login,
        harness_storage.clone(),
    )
    .await;
    if let (None, Some(storage)) = (&record.adapter_broken, &harness_storage) {
        record.adapter_broken = storage.broken.lock().map(|b| b.clone()).unwrap_or_default();
    }
    watching.store(true, Ordering::SeqCst);
    if let Some(w) = watcher {
        let _ = w.join();
    }
    let _ = deaths.await;
    drop(stalls);
    history
        .finish()
        .context(|| "writing history.jsonl".into())?;

    // A signal during the stop or the check counts too: the run was cut short.
    record.interrupted = interrupt.happened();
    if record.interrupted && record.interrupted_at_ms.is_none() {
        record.interrupted_at_ms = Some(clock.now() / 1_000_000);
    }
    let (results, history) = check_history(dir, &record)?;
    write_json(&dir.results_json(), &results)?;
    // Pictures are evidence, not the verdict: a failure to draw is logged.
    let setup = report::plot::Setup {
        workers: options.workers,
        lease: record.lease(),
    };
    if let Err(e) = report::plot::render(&dir.path, &history, &results, setup, &options.heading()) {
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

/// The observer on every lock node, with each worker's address to name who
/// sent what; its start waits for every node's setup, off the runtime's
/// threads.
async fn start_observer(
    options: &RunPlan,
    topology: &Topology,
    key: String,
    history: Arc<HistoryWriter>,
) -> Result<crate::observer::Observer> {
    let nodes = topology.observed();
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
    tokio::task::spawn_blocking(move || {
        crate::observer::Observer::start(nodes, key, senders, history)
    })
    .await
    .map_err(|e| Error::Io {
        context: "starting the observer".into(),
        source: std::io::Error::other(e),
    })
}

fn worker_spec(options: &RunPlan, index: u64, topology: &Topology, clock: RunClock) -> WorkerSpec {
    WorkerSpec {
        config: options.config,
        index,
        workers: options.workers,
        lock_nodes: topology.lock_addrs(),
        lock_node_names: topology.lock_names(),
        sentinels: topology.sentinel_addrs(),
        master: options.master(),
        login: options.target.as_ref().map(|t| t.login()),
        storage_login: options.storage_target.as_ref().map(|t| t.login()),
        wait_replicas: options.wait_replicas,
        // A deployment lockstorm did not start is reached from the host's
        // own address (protected mode takes 127.0.0.1, not 127.0.x.y).
        source: options
            .target
            .is_none()
            .then(|| topology.addresses.worker(index)),
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
async fn final_read(
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

/// Checks the history as stored on disk, the same way `lockstorm check` does.
fn check_history(dir: &RunDir, record: &RunRecord) -> Result<(Results, History)> {
    let path = dir.history();
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
