//! One run: provision nodes, start workers and the nemesis, stop them all,
//! take the final read, check the history and store the results.

use crate::error::{Context, Error, Result};
use crate::journal::HistoryWriter;
use crate::node::{self, RedisNode};
use crate::options::RunOptions;
use crate::store::{write_json, RunDir};
use crate::topology::{NodeRecord, Topology};
use crate::{logging, workers};
use checker::history::{f, OpType, Process};
use checker::verdict::{Promise, Results, Validity};
use checker::History;
use nemesis::{Action, Fault, FaultParams, ScheduleSpec, Step};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use workloads::clock::RunClock;
use workloads::storage::Storage;
use workloads::{Config, Outcome, WorkerSpec};

/// `run.json`: everything needed to understand or repeat the run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunRecord {
    pub lockstorm: String,
    pub redis: String,
    pub started: String,
    pub promise: Promise,
    pub options: RunOptions,
    pub nodes: Vec<NodeRecord>,
    pub worker_pids: Vec<u32>,
    pub schedule: Vec<Step>,
    #[serde(default)]
    pub interrupted: bool,
}

pub struct RunOutcome {
    pub dir: PathBuf,
    pub record: RunRecord,
    pub results: Results,
}

/// Runs one test. Every process it starts is gone when it returns, on every
/// path: orderly shutdown first, and the nodes' and workers' drop guards (plus
/// the kernel's parent-death signal) behind it.
pub async fn run(options: RunOptions) -> Result<RunOutcome> {
    let options = options.resolve()?;
    let server = node::find_redis_server()?;
    let dir = RunDir::create(&options.results, &options.name())?;
    let log = std::fs::File::create(dir.harness_log()).context(|| "creating harness.log".into())?;
    logging::attach(log);
    let outcome = run_in(&options, &server, &dir).await;
    if let Err(e) = &outcome {
        tracing::error!("run failed: {e}");
    }
    logging::detach();
    outcome
}

async fn run_in(
    options: &RunOptions,
    server: &std::path::Path,
    dir: &RunDir,
) -> Result<RunOutcome> {
    tracing::info!(
        "run {} seed {} in {}",
        options.name(),
        options.seed(),
        dir.path.display()
    );
    let sentinel = match options.config {
        Config::Replicated => Some(node::find_redis_sentinel()?),
        _ => None,
    };
    let topology = Arc::new(Topology::start(options, server, sentinel, &dir.nodes()).await?);
    let outcome = run_workload(options, server, dir, &topology).await;
    topology.shutdown().await;
    outcome
}

async fn run_workload(
    options: &RunOptions,
    server: &std::path::Path,
    dir: &RunDir,
    topology: &Arc<Topology>,
) -> Result<RunOutcome> {
    let spec = schedule_spec(options);
    let steps = nemesis::schedule(&spec);
    if steps.is_empty() && !spec.actions.is_empty() {
        tracing::warn!(
            "no fault fits in --time-limit {} s (the shortest needs {} ms, plus {} ms to settle): raise --time-limit",
            options.time_limit,
            spec.actions.iter().map(|(_, ms)| ms).min().unwrap_or(&0),
            spec.settle_ms
        );
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
    let mut running = Vec::new();
    for index in 0..options.workers {
        let spec = worker_spec(options, index, topology, clock);
        running.push(workers::spawn(&spec, &exe, &dir.path, history.clone())?);
    }

    let mut record = RunRecord {
        lockstorm: env!("CARGO_PKG_VERSION").to_string(),
        redis: node::redis_version(server),
        started: chrono::Utc::now().to_rfc3339(),
        promise: options.config.promise(),
        options: options.clone(),
        nodes: topology.records().await,
        worker_pids: running.iter().map(|w| w.pid).collect(),
        schedule: steps.clone(),
        interrupted: false,
    };
    write_json(&dir.run_json(), &record)?;

    let watching = Arc::new(AtomicBool::new(false));
    let watcher = topology.watch_failovers(history.clone(), watching.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    let env = nemesis::Env {
        workers: running.iter().map(|w| w.pid).collect(),
        controls: running.iter().map(|w| w.control.clone()).collect(),
        cluster: topology.clone(),
        holders,
        journal: history.clone(),
        arm_timeout: Duration::from_millis(options.nemesis_interval_ms.max(options.ttl_ms())),
        stop: stop_rx,
    };
    let params = FaultParams {
        pause: Duration::from_millis(options.pause_ms.expect("resolved")),
        node_pause: Duration::from_millis(options.node_pause_ms.expect("resolved")),
        kill_down: Duration::from_millis(options.restart_ms),
        targets: options.targets,
        clock_jump_ns: options.clock_jump_ms.expect("resolved") * 1_000_000,
        holder_skew_ns: options.holder_skew_ms * 1_000_000,
        hold: Duration::from_millis(options.fault_ms.expect("resolved")),
        lock_ttl: Duration::from_millis(options.ttl_ms()),
        quiet: Duration::from_millis(options.nemesis_interval_ms / 2),
    };
    let nemesis = tokio::spawn(nemesis::runner::run(
        steps,
        env,
        params,
        tokio::time::Instant::now(),
    ));

    let limit = Duration::from_secs(options.time_limit);
    let title = options.name();
    record.interrupted = tokio::select! {
        _ = crate::progress::wait(&title, limit, || history.snapshot()) => false,
        _ = tokio::signal::ctrl_c() => true,
    };
    if record.interrupted {
        tracing::warn!(
            "interrupted: healing faults, stopping workers and checking what was recorded"
        );
    }

    // Heal first, so no worker is left stopped and no node down, then let
    // workers finish their cycles.
    let _ = stop_tx.send(true);
    nemesis
        .await
        .map_err(|e| Error::Harness(format!("nemesis task failed: {e}")))?;
    workers::stop_all(running, stop_grace(options)).await;
    watching.store(true, Ordering::SeqCst);
    if let Some(w) = watcher {
        let _ = w.join();
    }
    final_read(&history, &topology.storage).await;
    drop(stalls);
    history
        .finish()
        .context(|| "writing history.jsonl".into())?;

    let (results, history) = check_history(dir, record.promise, record.interrupted)?;
    write_json(&dir.results_json(), &results)?;
    // Pictures are evidence, not the verdict: a failure to draw is logged.
    let setup = crate::plot::Setup {
        workers: options.workers,
        lease: (options.config != Config::NoLock).then(|| Duration::from_millis(options.ttl_ms())),
    };
    if let Err(e) = crate::plot::render(&dir.path, &history, &results, setup) {
        tracing::warn!("drawing the run's pictures failed: {e:#}");
    }
    write_json(&dir.run_json(), &record)?;
    dir.link_latest()?;
    tracing::info!("verdict {:?}", results.valid);
    Ok(RunOutcome {
        dir: dir.path.clone(),
        record,
        results,
    })
}

/// Each fault the run asked for, with how long it is expected to last.
fn schedule_spec(options: &RunOptions) -> ScheduleSpec {
    let restart = options.restart_ms + 500;
    let hold = options.fault_ms.expect("resolved");
    let ttl = options.ttl_ms();
    let actions = options
        .nemesis
        .actions()
        .into_iter()
        .filter(|a| supported(options.config, *a))
        .map(|a| {
            let ms = match a {
                Action::Fault(Fault::Pause) => options.pause_ms.expect("resolved"),
                Action::Fault(Fault::PauseNode) => options.node_pause_ms.expect("resolved"),
                Action::Fault(Fault::Kill) => restart,
                Action::Fault(Fault::Failover) => {
                    ttl + options.down_after_ms + options.failover_timeout_ms + restart
                }
                Action::Fault(Fault::Clock | Fault::Partition) => hold,
                Action::SplitClock => ttl + hold,
                Action::KillClock => restart + hold,
            };
            (a, ms)
        })
        .collect();
    ScheduleSpec {
        seed: options.seed(),
        actions,
        interval_ms: options.nemesis_interval_ms,
        time_limit_ms: options.time_limit * 1000,
        settle_ms: ttl.max(1000),
    }
}

/// Whether `action` makes sense on `config` (`all` offers every action;
/// explicit choices were checked when the options were resolved).
fn supported(config: Config, action: Action) -> bool {
    match action {
        Action::Fault(Fault::Pause) => true,
        Action::Fault(Fault::Failover) => config == Config::Replicated,
        Action::Fault(_) => config.has_lock_node(),
        Action::SplitClock | Action::KillClock => config.lock_nodes() >= 5,
    }
}

fn worker_spec(
    options: &RunOptions,
    index: u64,
    topology: &Topology,
    clock: RunClock,
) -> WorkerSpec {
    WorkerSpec {
        config: options.config,
        index,
        workers: options.workers,
        lock_nodes: topology.lock_addrs(),
        lock_node_names: topology.lock_names(),
        sentinels: topology.sentinel_addrs(),
        wait_replicas: options.wait_replicas,
        source: Some(crate::topology::worker_ip(index)),
        storage_node: topology.storage.addr(),
        ttl_ms: options.ttl_ms(),
        work_ms: options.work_ms(),
        acquire_timeout_ms: options.acquire_timeout_ms.expect("resolved"),
        op_timeout_ms: options.op_timeout_ms,
        validity_check: !options.no_validity_check,
        seed: options.seed(),
        run_start_ns: clock.start_ns(),
    }
}

/// Long enough for a worker to finish the cycle it is in: an acquire that
/// retries to its deadline, the work, and a few requests that time out.
fn stop_grace(options: &RunOptions) -> Duration {
    let ms = options.acquire_timeout_ms.expect("resolved")
        + options.work_ms()
        + 4 * options.op_timeout_ms
        + 2000;
    Duration::from_millis(ms)
}

/// The harness reads the counter once every worker has stopped.
async fn final_read(history: &HistoryWriter, storage: &RedisNode) {
    let harness = Process::harness();
    history.append(history.now(harness.clone(), OpType::Invoke, f::READ), None);
    let addr = storage.addr();
    let read = tokio::task::spawn_blocking(move || {
        Storage::plain(&addr, Duration::from_secs(5)).read(None)
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
fn late_events(options: &RunOptions) -> Duration {
    let pause = options
        .pause_ms
        .expect("resolved")
        .max(options.node_pause_ms.expect("resolved"));
    Duration::from_millis(pause + 1000)
}

/// Checks the history as stored on disk, the same way `lockstorm check` does.
fn check_history(dir: &RunDir, promise: Promise, interrupted: bool) -> Result<(Results, History)> {
    let path = dir.history();
    let file = std::fs::File::open(&path).context(|| format!("opening {}", path.display()))?;
    let history =
        History::from_jsonl(std::io::BufReader::new(file)).map_err(|e| Error::BadInput {
            path: path.clone(),
            message: e.to_string(),
        })?;
    let mut results = checker::check(&history, promise);
    if interrupted {
        results
            .notes
            .push("the run was interrupted before its time limit".into());
        if results.valid == Validity::True {
            results.valid = Validity::Unknown;
        }
    }
    Ok((results, history))
}
