//! The worker loop, run inside each worker process: acquire → read → work →
//! write counter+1 → release, emitting every step as a history event on
//! stdout. A separate process per worker so SIGSTOP freezes it like a GC pause.

use crate::adapter::{AdapterSpec, GiveUp, Group, StorageInit, Warn};
use crate::clock::{monotonic_ns, LockClock, RunClock};
use crate::lock::{self, Grant, LockClient, LockParams, Renewal};
use crate::recorder::Recorder;
use crate::storage::{self, AdapterStorage, Storage, StorageKind};
use crate::strike::{Hook, Parked, Strikes};
use crate::{Config, Outcome};
use checker::history::{self, error, f, Event, OpType, Process};
use checker::Point;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Everything a worker process needs, handed over as one JSON argument.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerSpec {
    pub config: Config,
    /// 0-based; also the worker's first process id, unless `first_process`.
    pub index: u64,
    /// How many workers the run has: after an `info` a worker continues as
    /// process `id + workers`, so ids never collide.
    pub workers: u64,
    /// The first process id of a replacement for a crashed worker: beyond
    /// every id the dead one used (same index modulo `workers`).
    #[serde(default)]
    pub first_process: Option<u64>,
    pub lock_nodes: Vec<String>,
    /// The names of `lock_nodes`, same order, for the history.
    #[serde(default)]
    pub lock_node_names: Vec<String>,
    #[serde(default)]
    pub sentinels: Vec<String>,
    /// The name the Sentinels watch the primary under (`lockstorm` on
    /// nodes lockstorm started).
    #[serde(default = "crate::lock::primary_name")]
    pub master: String,
    /// `WAIT` for this many replicas after acquiring (0: don't).
    #[serde(default)]
    pub wait_replicas: u32,
    /// The worker's own loopback address, which partitions single out.
    #[serde(default)]
    pub source: Option<std::net::Ipv4Addr>,
    pub storage_node: String,
    /// What the storage node runs.
    #[serde(default)]
    pub storage: StorageKind,
    /// The run's keys (`lockstorm:` on nodes lockstorm started).
    #[serde(default)]
    pub keys: crate::Keys,
    /// How to log in to the lock's nodes: set for a deployment lockstorm
    /// did not start (the password stays in the environment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<crate::conn::Login>,
    /// How to log in to the storage, when it is a deployment's node
    /// (`--storage-target`); `None` on lockstorm's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_login: Option<crate::conn::Login>,
    pub ttl_ms: u64,
    pub work_ms: u64,
    pub acquire_timeout_ms: u64,
    pub op_timeout_ms: u64,
    pub validity_check: bool,
    pub seed: u64,
    /// CLOCK_MONOTONIC at the run's start, in ns.
    pub run_start_ns: u64,
    /// The client adapter that is the lock client, if the run tests one.
    #[serde(default)]
    pub adapter: Option<AdapterSpec>,
    /// The storage adapter that keeps the counter (`--storage-cmd`), if
    /// the run tests one; `storage_node` is then only what its `init` names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_adapter: Option<AdapterSpec>,
}

/// One line of a worker's stdout, the pipe from a worker to the harness:
/// written by the worker ([`Emitter`]) and parsed once by the harness, by
/// its `line` tag (`{"line":"event",…}`). The pipe is internal; the history
/// is what the harness makes of its `Event`s, written in its own format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "line", rename_all = "kebab-case")]
pub enum WorkerLine {
    /// A history event, for the harness to number and record.
    Event(Event),
    /// The worker parked at an armed strike point: for the nemesis, not the
    /// history.
    Parked(Parked),
    /// The client (or storage) adapter broke the protocol (why): the run ends, and the
    /// worker exits with [`ADAPTER_BROKEN`] right after.
    AdapterBroken { why: String },
    /// Something for the harness's log that ends nothing.
    Warning { warning: String },
    /// The worker's clients are set up (its adapter answered `init`) and
    /// its first cycle starts: the harness starts the run's clock and its
    /// faults once every worker has said so.
    Ready,
}

/// The exit status of a worker whose client (or storage) adapter broke the protocol.
pub const ADAPTER_BROKEN: i32 = 3;

impl WorkerSpec {
    pub fn first_process(&self) -> u64 {
        self.first_process.unwrap_or(self.index)
    }

    /// The worker's name in the history (`stall`) and the nemesis's targets.
    pub fn name(&self) -> String {
        checker::history::worker_name(self.index)
    }

    /// Clock drift allowance for a lease, as in Redlock: TTL·1% + 2 ms.
    pub fn drift(&self) -> Duration {
        lock::redlock::drift(Duration::from_millis(self.ttl_ms))
    }
}

/// Writes [`WorkerLine`]s as JSON lines, flushed one by one so the harness sees each
/// step as it happens. Shared with the stall monitor's thread, one whole
/// line at a time.
struct Emitter<W: Write> {
    out: Arc<Mutex<W>>,
    clock: RunClock,
}

impl<W: Write> Emitter<W> {
    fn emit(&self, event: Event) {
        self.line(&WorkerLine::Event(event));
    }

    fn line(&self, item: &WorkerLine) {
        let mut line = serde_json::to_vec(item).expect("lines always serialise");
        line.push(b'\n');
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        // The harness reading our stdout is gone: nobody can record what we
        // do any more, so stop at once, and take the group along as the
        // harness would have.
        if out.write_all(&line).and_then(|_| out.flush()).is_err() {
            kill_own_group();
            std::process::exit(0);
        }
    }

    fn event(&self, p: u64, kind: OpType, op: &str) -> Event {
        Event::new(self.clock.now(), Process::Client(p), kind, op)
    }
}

/// One message the harness sends a running worker, one line each on its
/// stdin: `stop`, `skew <offset-ns> <rate>`, `arm <point> <id>` or
/// `release <id>`. Written by [`Display`] and read by [`FromStr`], here only.
///
/// [`Display`]: std::fmt::Display
/// [`FromStr`]: std::str::FromStr
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ControlMessage {
    /// Finish the cycle in progress and exit (closing stdin does too).
    Stop,
    /// Set the lease clock `offset_ns` off the monotonic clock, running at
    /// `rate` (the clock nemesis, client side).
    Skew { offset_ns: i64, rate: f64 },
    /// Park at `point` when next there, and say so (the nemesis strikes).
    Arm { point: Point, arm: u64 },
    /// Arm `arm` is over: disarm it, or go on if parked on it.
    Release { arm: u64 },
}

impl std::fmt::Display for ControlMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlMessage::Stop => f.write_str("stop"),
            ControlMessage::Skew { offset_ns, rate } => write!(f, "skew {offset_ns} {rate}"),
            ControlMessage::Arm { point, arm } => write!(f, "arm {point} {arm}"),
            ControlMessage::Release { arm } => write!(f, "release {arm}"),
        }
    }
}

impl std::str::FromStr for ControlMessage {
    type Err = String;
    fn from_str(line: &str) -> Result<Self, String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["stop"] => Ok(ControlMessage::Stop),
            ["skew", offset, rate] => match (offset.parse(), rate.parse()) {
                (Ok(offset_ns), Ok(rate)) => Ok(ControlMessage::Skew { offset_ns, rate }),
                _ => Err(format!("a skew needs an offset in ns and a rate: {line}")),
            },
            ["arm", point, arm] => match (point.parse(), arm.parse()) {
                (Ok(point), Ok(arm)) => Ok(ControlMessage::Arm { point, arm }),
                _ => Err(format!("an arm needs a strike point and an id: {line}")),
            },
            ["release", arm] => arm
                .parse()
                .map(|arm| ControlMessage::Release { arm })
                .map_err(|_| format!("a release needs an id: {line}")),
            _ => Err(format!("not a control message: {line}")),
        }
    }
}

/// What the harness can tell a running worker on its stdin.
pub struct Control {
    /// Set by [`ControlMessage::Stop`], or when the harness closes the pipe.
    pub stop: Arc<AtomicBool>,
    /// Skewed by [`ControlMessage::Skew`].
    pub clock: Arc<LockClock>,
    /// Armed and released by [`ControlMessage::Arm`] and [`ControlMessage::Release`].
    pub strikes: Strikes,
}

/// Reads control lines on a thread of its own, so a worker in the middle of
/// a step still hears them.
pub fn watch_control(input: impl BufRead + Send + 'static) -> Control {
    let control = Control {
        stop: Arc::new(AtomicBool::new(false)),
        clock: Arc::new(LockClock::default()),
        strikes: Strikes::default(),
    };
    let (stop, clock) = (control.stop.clone(), control.clock.clone());
    let strikes = control.strikes.clone();
    std::thread::spawn(move || {
        for line in input.lines() {
            let Ok(line) = line else { break };
            // A line that is no message is ignored, as it always was.
            match line.parse() {
                Ok(ControlMessage::Stop) => break,
                Ok(ControlMessage::Skew { offset_ns, rate }) => clock.set(offset_ns, rate),
                Ok(ControlMessage::Arm { point, arm }) => strikes.arm(point, arm),
                Ok(ControlMessage::Release { arm }) => strikes.release(arm),
                Err(_) => {}
            }
        }
        // A stopping worker parks nowhere: it must finish its cycle.
        strikes.release_all();
        stop.store(true, Ordering::SeqCst);
    });
    control
}

struct Worker<W: Write> {
    spec: WorkerSpec,
    emitter: Emitter<W>,
    lock: Box<dyn LockClient>,
    storage: Box<dyn Storage>,
    rng: ChaCha8Rng,
    process: u64,
    cycle: u64,
    clock: Arc<LockClock>,
    /// An op of this cycle hit an error (not one of the `ANSWERS`).
    errored: bool,
    backoff: Backoff,
    /// Parks the worker at an armed strike point (shared with the lock client).
    strike: Hook,
}

/// Refusals that are the lock's or the storage's answer, not a failure to
/// reach them, and a library's "cannot say": a cycle that meets one needs
/// no back-off.
const ANSWERS: [&str; 5] = [
    error::LOCK_BUSY,
    error::NOT_HELD,
    error::STALE_FENCE,
    error::LEASE_EXPIRED,
    error::UNKNOWN,
];

/// The wait between tries of an acquire the lock refused as busy, within
/// the op (ms, at random).
const BUSY_RETRY_MS: std::ops::RangeInclusive<u64> = 10..=50;
/// The wait after an acquire that stayed busy to its timeout, before the
/// next cycle (ms, at random).
const AFTER_BUSY_MS: std::ops::RangeInclusive<u64> = 10..=300;

/// Capped exponential back-off after cycles that hit an error (a node down
/// fails every op at once), with jitter so workers do not retry in step.
#[derive(Default)]
struct Backoff {
    failures: u32,
}

impl Backoff {
    const FIRST_MS: u64 = 20;
    const CAP_MS: u64 = 1000;

    /// The wait after one more failed cycle: half fixed, half random, so
    /// a worker never retries faster than one cycle per `CAP_MS / 2`
    /// once the cap is reached.
    fn next(&mut self, rng: &mut impl Rng) -> Duration {
        let max = (Self::FIRST_MS << self.failures.min(16)).min(Self::CAP_MS);
        self.failures = self.failures.saturating_add(1);
        Duration::from_millis(rng.random_range(max / 2..=max))
    }

    fn reset(&mut self) {
        self.failures = 0;
    }
}

/// Runs cycles until `stop` is set, then finishes the cycle in progress (so
/// no lock is left held) and returns.
pub fn run(spec: WorkerSpec, out: impl Write + Send + 'static, control: Control) {
    let Control {
        stop,
        clock,
        strikes,
    } = control;
    // Before the adapter starts, so no child of it can miss the signal.
    kill_group_when_orphaned();
    let harness = nix::unistd::getppid();
    let first = spec.first_process();
    let out = Arc::new(Mutex::new(out));
    let run_clock = RunClock::from_start(spec.run_start_ns);
    // Every writer of stdout shares it, one whole line at a time.
    let emitter = || Emitter {
        out: out.clone(),
        clock: run_clock,
    };
    let calls = Callbacks::new(emitter, strikes);
    let renewals = emitter();
    let recorder = Recorder::new(run_clock, move |e| renewals.emit(e));
    let lock = lock::client(
        spec.config,
        &lock_params(&spec, clock.clone(), &calls, recorder),
    );
    let storage = open_storage(&spec, lock.as_ref(), &calls);
    let stalls = emitter();
    let _monitor = crate::stall::watch(spec.name(), run_clock, move |s| stalls.emit(s.event()));
    emitter().line(&WorkerLine::Ready);
    let mut worker = Worker {
        lock,
        storage,
        // Seeded by the first process id, so a replacement draws other tokens.
        rng: ChaCha8Rng::seed_from_u64(spec.seed ^ first.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        process: first,
        cycle: 0,
        clock,
        errored: false,
        backoff: Backoff::default(),
        strike: calls.strike,
        emitter: Emitter {
            out,
            clock: run_clock,
        },
        spec,
    };
    while !stop.load(Ordering::SeqCst) {
        worker.errored = false;
        worker.cycle(&stop);
        match worker.errored {
            true => std::thread::sleep(worker.backoff.next(&mut worker.rng)),
            false => worker.backoff.reset(),
        }
    }
    if nix::unistd::getppid() != harness {
        // Stopped because the harness died and closed our stdin: it will
        // not kill the group, and its SIGTERM may not have been handled yet.
        kill_own_group();
    }
}

/// What a worker's clients call back: parking at an armed strike point,
/// giving up on a broken adapter, and warning. Each says so on stdout.
struct Callbacks {
    strike: Hook,
    give_up: GiveUp,
    warn: Warn,
}

impl Callbacks {
    fn new<W: Write + Send + 'static>(emitter: impl Fn() -> Emitter<W>, strikes: Strikes) -> Self {
        let strike = {
            let announce = emitter();
            Hook::new(strikes, move |parked| {
                announce.line(&WorkerLine::Parked(parked))
            })
        };
        let give_up: GiveUp = {
            let announce = emitter();
            Arc::new(move |why: String| {
                eprintln!("{why}");
                announce.line(&WorkerLine::AdapterBroken { why });
                std::process::exit(ADAPTER_BROKEN);
            })
        };
        let warn: Warn = {
            let announce = emitter();
            Arc::new(move |warning: String| {
                eprintln!("{warning}");
                announce.line(&WorkerLine::Warning { warning });
            })
        };
        Callbacks {
            strike,
            give_up,
            warn,
        }
    }
}

/// What the lock client of `spec`'s worker is made with.
fn lock_params(
    spec: &WorkerSpec,
    clock: Arc<LockClock>,
    calls: &Callbacks,
    recorder: Recorder,
) -> LockParams {
    LockParams {
        nodes: spec.lock_nodes.clone(),
        storage_node: spec.storage_node.clone(),
        keys: spec.keys.clone(),
        login: spec.login.clone(),
        sentinels: spec.sentinels.clone(),
        master: spec.master.clone(),
        ttl: Duration::from_millis(spec.ttl_ms),
        op_timeout: Duration::from_millis(spec.op_timeout_ms),
        acquire_timeout: Duration::from_millis(spec.acquire_timeout_ms),
        wait_replicas: spec.wait_replicas,
        clock,
        source: spec.source,
        strike: calls.strike.clone(),
        worker: spec.index,
        recorder,
        adapter: spec.adapter.clone(),
        give_up: calls.give_up.clone(),
        warn: calls.warn.clone(),
    }
}

/// The storage the worker writes the counter to: the lock's own if it
/// brings one, else the storage adapter's or lockstorm's.
fn open_storage(spec: &WorkerSpec, lock: &dyn LockClient, calls: &Callbacks) -> Box<dyn Storage> {
    // A library that hands out fencing tokens gets the storage that checks
    // them, as the fenced config does: a stale token is refused there, not
    // accepted and then reported as stale-fence-accepted.
    let fenced = spec.config.fenced() || lock.fences();
    let op_timeout = Duration::from_millis(spec.op_timeout_ms);
    lock.storage()
        .unwrap_or_else(|| match &spec.storage_adapter {
            Some(adapter) => {
                let init = StorageInit {
                    worker: Some(spec.index),
                    key: spec.keys.counter(),
                    node: spec.storage_node.clone(),
                    fenced,
                };
                // In the worker's group, as its lock adapter: a pause or crash
                // of the worker strikes its storage client too.
                let started = AdapterStorage::start(
                    adapter,
                    init,
                    op_timeout,
                    Group::Worker,
                    calls.give_up.clone(),
                    calls.warn.clone(),
                );
                match started {
                    Ok(storage) => Box::new(storage),
                    Err(f) => {
                        (calls.give_up)(f.to_string());
                        // `give_up` ends the process; this is for one that did not.
                        panic!("the storage adapter did not start: {f}");
                    }
                }
            }
            None => storage::open(
                spec.storage,
                &spec.storage_node,
                &spec.keys,
                op_timeout,
                spec.storage_login.clone(),
                fenced,
                &spec.name(),
            ),
        })
}

/// A worker leads its own process group, its client adapter in it, and
/// whatever the adapter started that stayed there. When the harness dies
/// the kernel sends the worker SIGTERM (its parent-death signal), and a
/// stopped worker whose group the harness's death orphans gets SIGHUP then
/// SIGCONT: on either, the worker kills its whole group, itself included.
/// A SIGKILL of the worker alone would leave the adapter's children
/// running. A worker started by hand outside a group of its own keeps the
/// default signal handling: its group is someone else's.
fn kill_group_when_orphaned() {
    use tokio::signal::unix::{signal, SignalKind};
    if !leads_group() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    else {
        eprintln!("cannot watch for SIGTERM: the worker's group may outlive the harness");
        return;
    };
    // Registered here, not on the thread: the adapter starts when this returns.
    let signals = {
        let _entered = runtime.enter();
        signal(SignalKind::terminate()).and_then(|t| Ok((t, signal(SignalKind::hangup())?)))
    };
    let Ok((mut term, mut hup)) = signals else {
        eprintln!("cannot watch for SIGTERM: the worker's group may outlive the harness");
        return;
    };
    std::thread::spawn(move || {
        runtime.block_on(async {
            tokio::select! {
                _ = term.recv() => {}
                _ = hup.recv() => {}
            }
        });
        kill_own_group();
    });
}

fn leads_group() -> bool {
    nix::unistd::getpgrp() == nix::unistd::getpid()
}

/// SIGKILL to the worker's group, itself included, if it leads one: for a
/// worker whose harness is gone, which would have killed the group.
fn kill_own_group() {
    if leads_group() {
        let _ = process::kill_group(std::process::id());
    }
}

impl<W: Write> Worker<W> {
    fn emit(&mut self, kind: OpType, op: &str, build: impl FnOnce(Event) -> Event) {
        let event = build(self.emitter.event(self.process, kind, op));
        self.emitter.emit(event);
    }

    /// Emits the completion of an op and, after an `info`, moves to a fresh
    /// process id (Jepsen's convention: the old one may still be in flight).
    fn complete<T>(&mut self, op: &str, outcome: &Outcome<T>, build: impl FnOnce(Event) -> Event) {
        let (kind, err) = match outcome {
            Outcome::Ok(_) => (OpType::Ok, None),
            Outcome::Fail(e) => (OpType::Fail, Some(e.clone())),
            Outcome::Info(e) => (OpType::Info, Some(e.clone())),
        };
        self.emit(kind, op, |e| {
            let e = build(e);
            match err {
                Some(err) => e.with_error(err),
                None => e,
            }
        });
        if kind == OpType::Info {
            self.process += self.spec.workers;
        }
        self.errored |= match outcome {
            Outcome::Ok(_) => false,
            Outcome::Fail(e) | Outcome::Info(e) => {
                !ANSWERS.contains(&checker::history::error::kind(e))
            }
        };
    }

    fn cycle(&mut self, stop: &AtomicBool) {
        self.cycle += 1;
        let token = format!(
            "{}-{}-{:06x}",
            self.spec.first_process(),
            self.cycle,
            self.rng.random::<u32>() & 0xff_ffff
        );
        let Some((grant, lease_start)) = self.acquire(&token, stop) else {
            return;
        };
        self.strike.at(Point::Acquired);
        self.critical_section(grant, lease_start);
        self.emit(OpType::Invoke, f::RELEASE, |e| e.with_token(token.as_str()));
        if !self.lock.marks().contains(&Point::Releasing) {
            self.strike.at(Point::Releasing);
        }
        let released = self.lock.release(&token);
        self.complete(f::RELEASE, &released, |e| e.with_token(token.as_str()));
    }

    /// One acquire op, retrying with jitter until the lock is granted or the
    /// deadline passes. Returns the grant and the lock-clock time at which the
    /// successful attempt was sent (the lease cannot have started earlier).
    fn acquire(&mut self, token: &str, stop: &AtomicBool) -> Option<(Grant, i64)> {
        self.emit(OpType::Invoke, f::ACQUIRE, |e| e.with_token(token));
        let deadline = monotonic_ns() + self.spec.acquire_timeout_ms * 1_000_000;
        loop {
            let sent = self.clock.now_ns();
            let sent_at = self.emitter.clock.now();
            let outcome: Outcome<()> = match self.lock.try_acquire(token) {
                Outcome::Ok(Some(grant)) => {
                    if !self.lock.marks().contains(&Point::Acquiring) {
                        self.strike.at(Point::Acquiring);
                    }
                    let done = Outcome::Ok(());
                    let value = self.granted_by(&grant, sent_at);
                    self.complete(f::ACQUIRE, &done, |e| {
                        e.with_token(token)
                            .with_fence(grant.fence)
                            .with_value(value)
                    });
                    return Some((grant, sent));
                }
                Outcome::Info(e) => Outcome::Info(e),
                Outcome::Ok(None) => Outcome::Fail(error::LOCK_BUSY.to_string()),
                Outcome::Fail(e) => Outcome::Fail(e),
            };
            // Only a busy lock is retried within the op: any other refusal
            // (a node down, too few replicas) is this op's answer, recorded
            // as such; the next cycle tries again.
            let busy = matches!(&outcome, Outcome::Fail(e) if e == error::LOCK_BUSY);
            let give_up = !busy || monotonic_ns() >= deadline || stop.load(Ordering::SeqCst);
            if give_up {
                self.complete(f::ACQUIRE, &outcome, |e| e.with_token(token));
                // A longer random back-off after a refused round, as Redlock
                // advises: clients that retry in step split the votes forever.
                // Any other refusal is an error: the cycle's back-off follows.
                if busy {
                    let backoff = self.rng.random_range(AFTER_BUSY_MS);
                    std::thread::sleep(Duration::from_millis(backoff));
                }
                return None;
            }
            std::thread::sleep(Duration::from_millis(self.rng.random_range(BUSY_RETRY_MS)));
        }
    }

    /// An acquire `ok`'s value: `"attempt_sent"`, when its winning attempt
    /// was sent (history ns); `"nodes"` for a lock granted by several nodes;
    /// `"client_token"` for an adapter's library that shows its own.
    fn granted_by(&self, grant: &Grant, sent_at: u64) -> serde_json::Value {
        let mut value = serde_json::Map::new();
        value.insert(history::ATTEMPT_SENT.into(), sent_at.into());
        if !grant.nodes.is_empty() {
            let name = |&i: &usize| {
                let names = &self.spec.lock_node_names;
                names.get(i).or(self.spec.lock_nodes.get(i)).cloned()
            };
            let nodes: Vec<String> = grant.nodes.iter().filter_map(name).collect();
            value.insert("nodes".into(), nodes.into());
        }
        if let Some(token) = &grant.client_token {
            value.insert(checker::history::CLIENT_TOKEN.into(), token.clone().into());
        }
        value.into()
    }

    fn critical_section(&mut self, grant: Grant, lease_start: i64) {
        let fence = grant.fence;
        self.emit(OpType::Invoke, f::READ, |e| e.with_fence(fence));
        let read = self.storage.read(fence);
        self.complete(f::READ, &read, |e| match &read {
            Outcome::Ok(v) => e.with_value((*v).into()).with_fence(fence),
            _ => e.with_fence(fence),
        });
        let Outcome::Ok(value) = read else { return };
        self.strike.at(Point::Read);

        std::thread::sleep(Duration::from_millis(self.spec.work_ms));

        let next = value + 1;
        let refused = match self.spec.validity_check {
            true => self.refusal(lease_start),
            false => None,
        };
        // The write's invoke is stamped when the request leaves: a worker
        // frozen at `checked` is frozen before it, so a stale write shows
        // as sent after the rival's grant (the checker's unsafe-action).
        let invoke = |w: &mut Self| {
            w.emit(OpType::Invoke, f::WRITE, |e| {
                e.with_value(next.into()).with_fence(fence)
            })
        };
        let write = match refused {
            Some(why) => {
                invoke(self);
                Outcome::Fail(why)
            }
            None => {
                // The gap no check closes: the lease was valid a moment ago.
                self.strike.at(Point::Checked);
                invoke(self);
                self.storage.write(next, fence)
            }
        };
        self.complete(f::WRITE, &write, |e| {
            e.with_value(next.into()).with_fence(fence)
        });
    }

    /// A careful holder's own check before it writes: why it must not, if
    /// it must not. The client's own view where it has one, else the lease
    /// on the worker's clock.
    fn refusal(&mut self, acquired: i64) -> Option<String> {
        match self.lock.own_view() {
            None => self.lease_refusal(acquired).map(String::from),
            Some(Outcome::Ok(true)) => None,
            Some(Outcome::Ok(false)) => Some(format!(
                "{}: the client says it no longer holds the lock",
                error::NOT_HELD
            )),
            Some(Outcome::Fail(e) | Outcome::Info(e)) => Some(format!("check-failed: {e}")),
        }
    }

    fn lease_refusal(&self, acquired: i64) -> Option<&'static str> {
        let lease = Lease {
            ttl: Duration::from_millis(self.spec.ttl_ms),
            drift: self.spec.drift(),
        };
        lease.refusal(self.lock.renewal(), acquired, self.clock.now_ns())
    }
}

/// The lease a holder judges its lock by, on its own (skewable) lock clock.
struct Lease {
    ttl: Duration,
    drift: Duration,
}

impl Lease {
    /// Pure: why a holder must not write at lock-clock time `now`, if it
    /// must not. A lock known lost is not held; otherwise the lease, from
    /// the later of the acquisition and the last renewal (each counted from
    /// when its request was sent), must still be within TTL − drift.
    fn refusal(&self, renewal: Renewal, acquired: i64, now: i64) -> Option<&'static str> {
        let start = match renewal {
            Renewal::Lost => return Some(error::NOT_HELD),
            Renewal::Unrenewed => acquired,
            Renewal::Renewed(at) => at.max(acquired),
        };
        let elapsed = Duration::from_nanos((now - start).max(0) as u64);
        (elapsed + self.drift >= self.ttl).then_some(error::LEASE_EXPIRED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_line_round_trips_and_says_what_it_is() {
        let event = Event::new(7, Process::Client(2), OpType::Ok, f::ACQUIRE)
            .with_token("t1")
            .with_value(serde_json::json!({"nodes": 5}));
        let lines = [
            (WorkerLine::Event(event.clone()), "event"),
            (
                WorkerLine::Parked(Parked {
                    point: Point::Releasing,
                    arm: 9,
                    how: Some("key seen".into()),
                    decided: Some(false),
                    seen: Some("t1".into()),
                }),
                "parked",
            ),
            (
                WorkerLine::AdapterBroken {
                    why: "reply to #3 is not JSON".into(),
                },
                "adapter-broken",
            ),
            (
                WorkerLine::Warning {
                    warning: "strays left".into(),
                },
                "warning",
            ),
        ];
        for (line, tag) in lines {
            let json = serde_json::to_string(&line).unwrap();
            assert!(!json.contains('\n'), "{json}");
            let value: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert_eq!(value["line"], tag, "{json}");
            assert_eq!(serde_json::from_str::<WorkerLine>(&json).unwrap(), line);
        }
        // The event inside is the history's, field for field, beside the tag.
        let json = serde_json::to_value(WorkerLine::Event(event.clone())).unwrap();
        let mut history = serde_json::to_value(&event).unwrap();
        history["line"] = "event".into();
        assert_eq!(json, history);
    }

    #[test]
    fn control_messages_round_trip_through_their_line() {
        let messages = [
            ControlMessage::Stop,
            ControlMessage::Skew {
                offset_ns: -3_000_000_000,
                rate: 1.0,
            },
            ControlMessage::Skew {
                offset_ns: 7,
                rate: 0.1 + 0.2,
            },
            ControlMessage::Arm {
                point: Point::Checked,
                arm: 3,
            },
            ControlMessage::Release { arm: 3 },
        ];
        for m in messages {
            let line = m.to_string();
            assert!(!line.contains('\n'), "{line:?}");
            assert_eq!(line.parse::<ControlMessage>(), Ok(m), "{line}");
        }
        assert_eq!(ControlMessage::Stop.to_string(), "stop");
        let skew = ControlMessage::Skew {
            offset_ns: -5,
            rate: 1.0,
        };
        assert_eq!(skew.to_string(), "skew -5 1");
        for bad in [
            "",
            "halt",
            "skew 1",
            "skew x 1",
            "stop now",
            "arm later 1",
            "release",
        ] {
            assert!(bad.parse::<ControlMessage>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_watcher_skews_the_clock_ignores_noise_and_stops() {
        let (reader, mut writer) = std::io::pipe().unwrap();
        let control = watch_control(std::io::BufReader::new(reader));
        let skew = ControlMessage::Skew {
            offset_ns: 1_000_000_000_000,
            rate: 1.0,
        };
        writeln!(writer, "noise\n{skew}\n{}", ControlMessage::Stop).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !control.stop.load(Ordering::SeqCst) {
            assert!(std::time::Instant::now() < deadline, "never stopped");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(control.clock.now_ns() > monotonic_ns() as i64 + 900_000_000_000);
    }

    #[test]
    fn the_lease_runs_from_the_latest_renewal_and_a_lost_lock_is_not_held() {
        let ms = |n: i64| n * 1_000_000;
        let lease = Lease {
            ttl: Duration::from_millis(1_000),
            drift: Duration::from_millis(12),
        };
        let check = |renewal, now| lease.refusal(renewal, ms(100), ms(now));
        assert_eq!(check(Renewal::Unrenewed, 1_087), None);
        assert_eq!(check(Renewal::Unrenewed, 1_088), Some(error::LEASE_EXPIRED));
        // Renewed at 900: good until 1 888, whatever the acquisition's age.
        assert_eq!(check(Renewal::Renewed(ms(900)), 1_887), None);
        let late = check(Renewal::Renewed(ms(900)), 1_888);
        assert_eq!(late, Some(error::LEASE_EXPIRED), "a frozen renewer");
        // A renewal cannot move the lease back before the acquisition.
        assert_eq!(
            check(Renewal::Renewed(ms(0)), 1_088),
            Some(error::LEASE_EXPIRED)
        );
        assert_eq!(check(Renewal::Lost, 101), Some(error::NOT_HELD));
    }

    #[test]
    fn the_protocol_page_states_the_back_off_the_worker_does() {
        let page = include_str!("../../docs/protocol.md");
        let (_, rule) = page
            .split_once("The kinds that need no back-off")
            .expect("the protocol page states which kinds need no back-off");
        let (rule, rest) = rule.split_once(". ").unwrap();
        let named: std::collections::BTreeSet<&str> = rule.split('`').skip(1).step_by(2).collect();
        assert_eq!(named, ANSWERS.into_iter().collect(), "{rule}");
        let range = |r: &std::ops::RangeInclusive<u64>| format!("{}–{} ms", r.start(), r.end());
        for said in [
            format!("every {}", range(&BUSY_RETRY_MS)),
            format!("waits {}", range(&AFTER_BUSY_MS)),
        ] {
            assert!(page.contains(&said), "the page says {said}");
        }
        let backoff = format!(
            "{} ms after the first such cycle, doubling\nto at most {} s",
            Backoff::FIRST_MS,
            Backoff::CAP_MS / 1000
        );
        assert!(rest.contains(&backoff), "{rest}");
    }

    #[test]
    fn the_backoff_doubles_to_its_cap_and_never_drops_below_half() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut b = Backoff::default();
        let waits: Vec<u64> = (0..10)
            .map(|_| b.next(&mut rng).as_millis() as u64)
            .collect();
        let max = |n: u32| (Backoff::FIRST_MS << n).min(Backoff::CAP_MS);
        for (n, &w) in waits.iter().enumerate() {
            assert!(
                (max(n as u32) / 2..=max(n as u32)).contains(&w),
                "{waits:?}"
            );
        }
        assert!(waits[9] >= Backoff::CAP_MS / 2, "{waits:?}");
        b.reset();
        assert!(b.next(&mut rng).as_millis() as u64 <= Backoff::FIRST_MS);
    }
}
