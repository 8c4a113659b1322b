//! Worker processes: `lockstorm worker --spec …`, one per `--workers`. Their
//! stdout carries [`WorkerLine`]s: history events, and a line when one stops
//! at an armed strike point, or its client adapter broke; their stdin
//! carries control messages ([`ControlMessage`], one line each).
//!
//! Each worker index has a supervisor for the whole run: a worker that dies
//! before it is told to stop is recorded as crashed (its op in flight
//! completed as `info`) and replaced under a process id it never used.

use crate::error::{Context, Result};
use crate::journal::HistoryWriter;
use checker::history::{error, f, Event, OpType, Process};
use checker::Point;
use nemesis::{process, AtPoint, Live};
use serde_json::json;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Child;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use workloads::worker::{ControlMessage, ADAPTER_BROKEN};
use workloads::{WorkerLine, WorkerSpec};

struct Worker {
    pid: u32,
    child: Child,
    /// Messages for the worker's stdin; closing it is a stop too.
    control: mpsc::UnboundedSender<ControlMessage>,
    /// Ends when the worker's stdout closes, with what it recorded.
    reader: JoinHandle<Seen>,
}

/// What the harness saw a worker record: enough to close its books if it dies.
#[derive(Default)]
struct Seen {
    /// The highest process id it used.
    last_process: Option<u64>,
    /// Its op in flight: an invoke not yet completed.
    in_flight: Option<Event>,
    /// The token of the lock it believes it holds.
    holding: Option<String>,
}

impl Seen {
    fn on_event(&mut self, e: &Event) {
        let Process::Client(p) = e.process else {
            return;
        };
        self.last_process = self.last_process.max(Some(p));
        match e.kind {
            OpType::Invoke => self.in_flight = Some(e.clone()),
            _ => self.in_flight = None,
        }
        match (e.kind, e.f.as_str()) {
            (OpType::Ok, f::ACQUIRE) => self.holding = e.token.clone(),
            (OpType::Invoke, f::RELEASE) => self.holding = None,
            _ => {}
        }
    }
}

fn spawn(spec: &WorkerSpec, ctx: &Shared) -> Result<Worker> {
    let index = spec.index as usize;
    let log_path = ctx.run_dir.join("workers").join(log_name(spec));
    std::fs::create_dir_all(log_path.parent().expect("has a parent"))
        .context(|| format!("creating {}", log_path.display()))?;
    let log =
        std::fs::File::create(&log_path).context(|| format!("creating {}", log_path.display()))?;
    let spec_json = serde_json::to_string(spec).expect("specs always serialise");
    let mut cmd = std::process::Command::new(&ctx.exe);
    // A deployment's password reaches a worker (and its adapter) only when
    // the worker logs in to a deployment; lockstorm's own nodes have none.
    if spec.login.is_none() {
        cmd.env_remove(workloads::conn::PASSWORD_ENV);
    }
    cmd.args(["worker", "--spec", &spec_json])
        .current_dir(&ctx.run_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log);
    // SIGTERM, not SIGKILL, if the harness dies: the worker then kills its
    // whole group (its adapter's children too), which the kernel would not.
    process::isolate_run(&mut cmd);
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let mut child = cmd.spawn().context(|| format!("starting worker {index}"))?;
    let pid = child.id().expect("a just-spawned child has a pid");
    let stdout = child.stdout.take().expect("stdout is piped");
    let history = ctx.history.clone();
    let parked = ctx.parked.clone();
    let broken = ctx.broken.clone();
    let ready = ctx.ready.clone();
    let first_process = spec.first_process();
    let reader = tokio::spawn(async move {
        let mut seen = Seen::default();
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            match serde_json::from_str::<WorkerLine>(&line) {
                Ok(WorkerLine::Event(event)) => {
                    seen.on_event(&event);
                    history.append(event, Some(index));
                }
                Ok(WorkerLine::Parked(at)) => {
                    let process = seen.last_process.unwrap_or(first_process);
                    parked.send_modify(|p| {
                        *p = AtPoint {
                            seq: p.seq + 1,
                            worker: index,
                            process,
                            point: at.point,
                            arm: at.arm,
                            how: at.how,
                            decided: at.decided,
                            seen: at.seen,
                        }
                    });
                }
                Ok(WorkerLine::AdapterBroken { why }) => {
                    broken.send_replace(Some(format!("worker {index}: {why}")));
                }
                Ok(WorkerLine::Warning { warning }) => {
                    tracing::warn!("worker {index}: {warning}")
                }
                Ok(WorkerLine::Ready) => {
                    ready.send_if_modified(|ready| {
                        ready
                            .get_mut(index)
                            .is_some_and(|r| !std::mem::replace(r, true))
                    });
                }
                Err(e) => {
                    tracing::warn!(
                        "worker {index} wrote a line that is not a worker line ({e}): {line}"
                    )
                }
            }
        }
        seen
    });
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let (control, mut messages) = mpsc::unbounded_channel::<ControlMessage>();
    tokio::spawn(async move {
        while let Some(message) = messages.recv().await {
            if stdin
                .write_all(format!("{message}\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
        }
    });
    Ok(Worker {
        pid,
        control,
        child,
        reader,
    })
}

/// `worker-3.log`; a replacement's log is named after its first process id.
fn log_name(spec: &WorkerSpec) -> String {
    match spec.first_process {
        None => format!("{}.log", spec.name()),
        Some(p) => format!("{}-from-{p}.log", spec.name()),
    }
}

/// What every supervisor needs.
struct Shared {
    exe: PathBuf,
    run_dir: PathBuf,
    history: Arc<HistoryWriter>,
    pids: Live<u32>,
    controls: Live<mpsc::UnboundedSender<ControlMessage>>,
    /// The latest worker parked at an armed strike point, for the nemesis.
    parked: watch::Sender<AtPoint>,
    /// Why a worker's client adapter broke the protocol, once one has.
    broken: Arc<watch::Sender<Option<String>>>,
    /// Worker index → whether it (or a replacement) has said it is ready.
    ready: Arc<watch::Sender<Vec<bool>>>,
    doomed: Doomed,
}

/// Worker index → its current control channel: how the nemesis skews a
/// worker's lease clock and arms strike points; and the workers it is about
/// to kill.
#[derive(Clone)]
pub struct Controls(Live<mpsc::UnboundedSender<ControlMessage>>, Doomed);

/// Worker pid → the history time from which the nemesis holds it until it
/// kills it: its `crash` is dated then, not when the harness saw it die.
/// A lock its death frees at once (a PostgreSQL session's) may be taken
/// again before the harness notices, and the dead held nothing by then.
type Doomed = Arc<std::sync::Mutex<std::collections::HashMap<u32, u64>>>;

impl Controls {
    fn broadcast(&self, message: ControlMessage) {
        for control in self.0.snapshot() {
            let _ = control.send(message);
        }
    }
}

impl nemesis::WorkerControl for Controls {
    fn skew(&self, worker: usize, offset_ns: i64, rate: f64) {
        if let Some(control) = self.0.get(worker) {
            let _ = control.send(ControlMessage::Skew { offset_ns, rate });
        }
    }
    fn arm(&self, point: Point, arm: u64) {
        self.broadcast(ControlMessage::Arm { point, arm });
    }
    fn release(&self, arm: u64) {
        self.broadcast(ControlMessage::Release { arm });
    }
    fn doomed(&self, pid: u32, since_ns: u64) {
        let mut doomed = self.1.lock().unwrap_or_else(|e| e.into_inner());
        doomed.insert(pid, since_ns);
    }
}

/// The run's workers, each index kept alive by its supervisor until [`Pool::stop`].
pub struct Pool {
    /// Worker index → PID of its current process, for the nemesis.
    pub pids: Live<u32>,
    /// Worker index → its current control channel, for the nemesis.
    pub controls: Controls,
    parked: watch::Receiver<AtPoint>,
    broken: Arc<watch::Sender<Option<String>>>,
    ready: Arc<watch::Sender<Vec<bool>>>,
    stop: watch::Sender<Option<Duration>>,
    supervisors: Vec<JoinHandle<()>>,
}

impl Pool {
    /// Starts one worker per spec; fails if any cannot start.
    pub fn start(
        specs: Vec<WorkerSpec>,
        exe: &Path,
        run_dir: &Path,
        history: Arc<HistoryWriter>,
    ) -> Result<Pool> {
        let (parked_tx, parked) = watch::channel(AtPoint::default());
        let broken = Arc::new(watch::Sender::new(None));
        let ready = Arc::new(watch::Sender::new(vec![false; specs.len()]));
        let mut ctx = Shared {
            exe: exe.to_path_buf(),
            run_dir: run_dir.to_path_buf(),
            history,
            pids: Live::new(Vec::new()),
            controls: Live::new(Vec::new()),
            parked: parked_tx,
            broken: broken.clone(),
            ready: ready.clone(),
            doomed: Doomed::default(),
        };
        let first: Vec<Worker> = specs
            .iter()
            .map(|spec| spawn(spec, &ctx))
            .collect::<Result<_>>()?;
        ctx.pids = Live::new(first.iter().map(|w| w.pid).collect());
        ctx.controls = Live::new(first.iter().map(|w| w.control.clone()).collect());
        let ctx = Arc::new(ctx);
        let (stop, stopping) = watch::channel(None);
        let supervisors = specs
            .into_iter()
            .zip(first)
            .map(|(spec, w)| tokio::spawn(supervise(spec, w, ctx.clone(), stopping.clone())))
            .collect();
        Ok(Pool {
            pids: ctx.pids.clone(),
            controls: Controls(ctx.controls.clone(), ctx.doomed.clone()),
            parked,
            broken,
            ready,
            stop,
            supervisors,
        })
    }

    /// Workers parked at an armed strike point, as they announce themselves.
    pub fn parked(&self) -> watch::Receiver<AtPoint> {
        self.parked.clone()
    }

    /// Why a client adapter broke the protocol, once one has: the run ends.
    pub fn broken(&self) -> watch::Receiver<Option<String>> {
        self.broken.subscribe()
    }

    /// Returns once every worker has set up its clients and started
    /// cycling (an adapter's interpreter may take seconds to import its
    /// library on a busy machine), or after `within`: how long that took,
    /// and how many were still not ready.
    pub async fn ready(&self, within: Duration) -> (Duration, usize) {
        let started = std::time::Instant::now();
        let mut ready = self.ready.subscribe();
        let _ = tokio::time::timeout(within, ready.wait_for(|r| r.iter().all(|&r| r))).await;
        let late = ready.borrow().iter().filter(|&&r| !r).count();
        (started.elapsed(), late)
    }

    /// Asks every worker to finish its cycle and exit; one that has not exited
    /// within `grace` is resumed (it may be stopped) and killed. Returns once
    /// every worker is reaped and its last event recorded.
    pub async fn stop(self, grace: Duration) {
        let _ = self.stop.send(Some(grace));
        for s in self.supervisors {
            let _ = s.await;
        }
    }
}

/// Keeps worker `spec.index` running until the pool stops, replacing it
/// each time it dies.
async fn supervise(
    mut spec: WorkerSpec,
    mut w: Worker,
    ctx: Arc<Shared>,
    mut stopping: watch::Receiver<Option<Duration>>,
) {
    let index = spec.index as usize;
    loop {
        let exited = tokio::select! {
            () = exited(w.pid) => Ok(()),
            // No grace if the pool was dropped without a stop.
            grace = stopping.wait_for(Option::is_some) => Err(grace.map_or(Duration::ZERO, |g| g.unwrap_or_default())),
        };
        if let Err(grace) = exited {
            return stop(w, &spec, grace, &ctx).await;
        }
        let status = reap(&mut w).await;
        let seen = w.reader.await.unwrap_or_default();
        let status = match status {
            Ok(status) => status,
            Err(e) => {
                tracing::error!("worker {index}: waiting for it failed ({e}); not replaced");
                return;
            }
        };
        let doomed = ctx.doomed.lock().unwrap_or_else(|e| e.into_inner());
        let since = doomed.get(&w.pid).copied();
        drop(doomed);
        let last = record_crash(&ctx.history, &spec, w.pid, status, &seen, since);
        if status.code() == Some(ADAPTER_BROKEN) {
            // Its adapter would break again: the run is ending (see `Pool::broken`).
            tracing::error!("worker {index}: its adapter broke the protocol; not replaced");
            return;
        }
        if seen.last_process.is_none() {
            // It died before doing anything: a broken worker, which a
            // replacement would repeat at once.
            tracing::error!("worker {index} died before its first event ({status}); not replaced");
            return;
        }
        spec.first_process = Some(last + spec.workers);
        let dead_pid = w.pid;
        w = match spawn(&spec, &ctx) {
            Ok(w) => w,
            Err(e) => {
                tracing::error!("worker {index}: starting its replacement failed: {e}");
                return;
            }
        };
        tracing::warn!(
            "worker {index} (pid {}) died ({status}); replaced by pid {} as process {}",
            dead_pid,
            w.pid,
            last + spec.workers
        );
        ctx.pids.set(index, w.pid);
        ctx.controls.set(index, w.control.clone());
    }
}

/// Waits until the worker has exited, leaving it unreaped for [`reap`].
async fn exited(pid: u32) {
    // A thread of its own: tokio's wait would reap it.
    let _ = tokio::task::spawn_blocking(move || process::wait_exited(pid)).await;
}

/// Kills what is left of an exited (or stopping) worker's process group,
/// then reaps the worker: its adapter, and any child the adapter left in the
/// group, do not outlive it. In this order: the worker leads the group, and
/// until it is reaped its pid, which is the group's id, cannot be reused;
/// reaped first, the id could name a new group (a replacement worker's,
/// even) by the time of the kill.
async fn reap(w: &mut Worker) -> std::io::Result<ExitStatus> {
    let _ = process::kill_group(w.pid);
    w.child.wait().await
}

async fn stop(mut w: Worker, spec: &WorkerSpec, grace: Duration, ctx: &Shared) {
    let index = spec.index;
    let _ = w.control.send(ControlMessage::Stop);
    let status = match tokio::time::timeout(grace, exited(w.pid)).await {
        Ok(()) => Ok(reap(&mut w).await),
        Err(elapsed) => Err(elapsed),
    };
    match status {
        Ok(Ok(status)) if status.success() => {}
        Ok(Ok(status)) => {
            tracing::warn!("worker {index} died while finishing its cycle ({status})");
            let seen = w.reader.await.unwrap_or_default();
            record_crash(&ctx.history, spec, w.pid, status, &seen, None);
            return;
        }
        Ok(Err(e)) => tracing::warn!("worker {index}: waiting for it failed ({e})"),
        Err(_) => {
            tracing::warn!("worker {index} did not stop within {grace:?}: killing it");
            // Its whole group: a client adapter goes with it.
            let _ = reap(&mut w).await;
        }
    }
    let _ = w.reader.await;
}

/// Completes the dead process's op in flight as `info` and records the
/// `crash` (with the token it held, so its hold ends there), dated when the
/// nemesis took hold of it to kill it (`since`), else now. Returns the last
/// process id the dead worker used.
fn record_crash(
    history: &HistoryWriter,
    spec: &WorkerSpec,
    pid: u32,
    status: ExitStatus,
    seen: &Seen,
    since: Option<u64>,
) -> u64 {
    let index = spec.index as usize;
    let last = seen.last_process.unwrap_or(spec.first_process());
    let mut now = history.now(Process::harness(), OpType::Info, f::CRASH);
    now.time = since.map_or(now.time, |t| t.min(now.time));
    if let Some(invoke) = &seen.in_flight {
        let mut completion = invoke.clone().with_error(error::CRASHED);
        completion.kind = OpType::Info;
        completion.time = now.time;
        history.append(completion, Some(index));
    }
    let mut value = json!({"worker": index, "process": last, "pid": pid});
    match (status.signal(), status.code()) {
        (Some(signal), _) => value["signal"] = json!(signal),
        (None, code) => value["status"] = json!(code),
    }
    let mut crash = now.with_value(value);
    crash.token = seen.holding.clone();
    history.append(crash, None);
    last
}
