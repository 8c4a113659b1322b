//! One run, as a chain of named phases in the spirit of Jepsen's
//! `core/run!`. The nodes start (where they come from, lockstorm's own or
//! a `--target`, is the topology's `Deployment`, which the phases ask and
//! never branch on), then each phase in its own file, a method of `Run`,
//! what they all share: `prepare` the clients, `start` the workers, play
//! the `faults`, `stop`, and `judge` and store. A signal before any worker
//! ran ends the run through `unless_interrupted`; one during it, in
//! `faults`.

use crate::error::{Context, Error, Result};
use crate::interrupt::Interrupt;
use crate::logging;
use crate::options::{RunOptions, RunPlan};
use crate::record::RunRecord;
use crate::topology::Topology;
use backend::Provisioner;
use checker::History;
use checker::{Results, Validity};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use store::{write_json, RunDir};
use workloads::install::Prepared;
use workloads::storage::StorageKind;
use workloads::Config;

mod faults;
mod judge;
mod prepare;
mod start;
mod stop;

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
    let sentinel = options.config == Config::Replicated;
    let backend = match options.hosts.is_empty() {
        true => backend::provision(options.backend, options.image.as_deref(), sentinel).await?,
        false => {
            let setup = backend::remote::Setup {
                sentinel,
                data_nodes: crate::topology::data_nodes(options.config),
                cuts: options.cuts_with_iptables(),
                install: options.install,
            };
            let key = options.ssh_key.as_deref();
            backend::remote::connect(&options.hosts, key, setup).await? as _
        }
    };
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

impl Run<'_> {
    /// The run once its nodes are up and checked: its phases, in order.
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

/// The worker's spec speaks milliseconds, as its command line does.
fn millis(d: Duration) -> u64 {
    d.as_millis() as u64
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
        zookeeper: options
            .config
            .locks_in_zookeeper()
            .then(backend::zookeeper::version),
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
