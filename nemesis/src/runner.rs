//! What a fault's package acts through: [`Env`] (the cluster, the workers'
//! PIDs in [`Live`], [`WorkerControl`], the [`Journal`] its events go to,
//! the proxy), [`FaultParams`], and what the harness tells it of the
//! workers ([`AtPoint`], a parked worker; [`Holder`]). It imports none of
//! the faults, so every package can import it. `play.rs` runs the schedule.

use crate::cluster::Cluster;
use crate::cluster::Targets;
use checker::history::fault::{AT, DECIDED, PROCESS, SEEN};
use checker::Point;
use serde_json::{json, Value};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::watch;

/// The latest worker seen inside its critical section: it holds the lock and
/// has read the counter, so its write comes next. `seq` grows with each one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Holder {
    pub seq: u64,
    pub worker: usize,
    pub process: u64,
}

/// Where the nemesis writes its `start-…`/`stop-…` events; the harness stamps
/// them with the run clock and puts them in the history.
pub trait Journal: Send + Sync {
    /// The run clock now (history time, ns).
    fn now_ns(&self) -> u64;
    /// Records an event stamped `time`: a fault's start is stamped when its
    /// act began, though it is recorded once the act's evidence is in, so
    /// nothing the fault caused precedes it.
    fn record_at(&self, time: u64, f: &str, value: Value, node: Option<&str>);
    /// Records an event stamped now.
    fn record(&self, f: &str, value: Value, node: Option<&str>) {
        self.record_at(self.now_ns(), f, value, node)
    }
}

/// Worker index → something of its current process. A crashed worker's
/// replacement takes its index, so the harness updates these as it goes.
#[derive(Debug)]
pub struct Live<T>(Arc<RwLock<Vec<T>>>);

impl<T> Clone for Live<T> {
    fn clone(&self) -> Self {
        Live(self.0.clone())
    }
}

impl<T: Clone> Live<T> {
    pub fn new(items: Vec<T>) -> Self {
        Live(Arc::new(RwLock::new(items)))
    }
    pub fn get(&self, index: usize) -> Option<T> {
        self.read().get(index).cloned()
    }
    pub fn set(&self, index: usize, item: T) {
        let mut items = self.0.write().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = items.get_mut(index) {
            *slot = item;
        }
    }
    pub fn len(&self) -> usize {
        self.read().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn snapshot(&self) -> Vec<T> {
        self.read().clone()
    }
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<T>> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// A worker parked at an armed strike point, as the harness heard it.
/// `seq` grows with each one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AtPoint {
    pub seq: u64,
    pub worker: usize,
    /// The client process id it was using.
    pub process: u64,
    pub point: Point,
    pub arm: u64,
    /// How the worker saw the point, when it could not see it exactly.
    pub how: Option<String>,
    /// Whether an adapter's library had already decided when it froze.
    pub decided: Option<bool>,
    /// The lock value whose appearance froze an adapter.
    pub seen: Option<String>,
}

impl Default for AtPoint {
    fn default() -> Self {
        AtPoint {
            seq: 0,
            worker: 0,
            process: 0,
            point: Point::Checked,
            arm: 0,
            how: None,
            decided: None,
            seen: None,
        }
    }
}

/// A worker parked at a strike point, ready to be struck.
pub(crate) struct Struck {
    pub parked: AtPoint,
    pub pid: u32,
    /// The value of the fault's events.
    pub target: Value,
}

/// How the nemesis reaches running workers: the harness sends each a control
/// message (workloads' `ControlMessage`). A worker already gone is skipped.
pub trait WorkerControl: Send + Sync {
    /// Skews worker `worker`'s lease clock `offset_ns` off real time, running
    /// at `rate`.
    fn skew(&self, worker: usize, offset_ns: i64, rate: f64);
    /// Arms `point` on every worker: the first to reach it parks there.
    fn arm(&self, point: Point, arm: u64);
    /// Ends arm `arm` on every worker: disarmed, or a parked one goes on.
    fn release(&self, arm: u64);
    /// The nemesis holds worker process `pid` from history time `since_ns`
    /// (parked at a strike point) until it kills it: its death dates from
    /// then, whenever the harness sees it.
    fn doomed(&self, _pid: u32, _since_ns: u64) {}
}

/// What the nemesis may act on.
pub struct Env {
    /// Worker index → PID of its current process.
    pub workers: Live<u32>,
    /// The workers' lease clocks and strike points.
    pub worker_control: Arc<dyn WorkerControl>,
    /// The latest worker parked at an armed strike point.
    pub parked: watch::Receiver<AtPoint>,
    /// The lock's nodes. The storage node is never part of it.
    pub cluster: Arc<dyn Cluster>,
    pub holders: watch::Receiver<Holder>,
    pub journal: Arc<dyn Journal>,
    /// How long to wait for a holder before a holder fault goes ahead without one.
    pub arm_timeout: Duration,
    /// Turns true when the run ends: every fault heals at once.
    pub stop: watch::Receiver<bool>,
    /// The fault proxy every worker's connections go through, when a fault
    /// (or background latency) asked for it.
    pub net: Option<proxy::Fabric>,
}

/// How each fault behaves, from the run's options.
#[derive(Clone, Copy, Debug)]
pub struct FaultParams {
    pub pause: Duration,
    pub node_pause: Duration,
    pub kill_down: Duration,
    /// `kill` restarts its node as soon as the topology marks it down
    /// (the vote for its replica begins), not after `kill_down`.
    pub restart_at_vote: bool,
    /// How long Sentinel takes to notice a dead primary and promote a replica
    /// (down-after plus failover timeout).
    pub promotion: Duration,
    /// How long a primary is silent before Sentinel (or the cluster) doubts
    /// it: `--down-after-ms`.
    pub down_after: Duration,
    /// Which lock nodes node faults hit (Redlock).
    pub targets: Targets,
    /// How far `clock` jumps node clocks, and for how long.
    pub clock_jump_ns: i64,
    /// How far `clock` sets the holder's lease clock (0: leave it).
    pub holder_skew_ns: i64,
    /// How long `clock` and `partition` last.
    pub hold: Duration,
    /// The lock's TTL: how long a key can outlive the partition that hid its deletion.
    pub lock_ttl: Duration,
    /// Where a fault that strikes a worker lands (this step's point).
    pub at: Point,
    /// Least quiet time after a fault. A fault that waited for a holder ends
    /// later than the schedule planned; the next one still waits this long.
    pub quiet: Duration,
}

impl Env {
    /// Sleeps for `d`, or less if the run ends first. Returns false if it ended.
    pub(crate) async fn sleep(&mut self, d: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(d) => true,
            _ = self.stop.wait_for(|s| *s) => false,
        }
    }

    pub(crate) fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Skews worker `worker`'s lease clock (the worker may already be gone).
    pub(crate) fn skew(&self, worker: usize, offset_ns: i64, rate: f64) {
        self.worker_control.skew(worker, offset_ns, rate);
        let value = json!({"worker": worker, "offset_ms": offset_ns / 1_000_000, "rate": rate});
        self.journal.record("skew", value, None);
    }

    /// Waits for the next worker to enter its critical section. `None` (and
    /// a `skip-<fault>` note) if none does within the arm timeout or the run ends.
    pub(crate) async fn await_holder(&mut self, fault: &str) -> Option<Holder> {
        self.holders.borrow_and_update();
        let next = tokio::select! {
            next = tokio::time::timeout(self.arm_timeout, self.holders.changed()) => next,
            _ = self.stop.wait_for(|s| *s) => return None,
        };
        if !matches!(next, Ok(Ok(()))) {
            let reason = json!({"reason": "no worker held the lock in time"});
            self.journal
                .record(&format!("no-holder-{fault}"), reason, None);
            return None;
        }
        Some(*self.holders.borrow_and_update())
    }

    /// Arms `point` on every worker and waits for the first to park there.
    /// `None` (and a `no-holder-<fault>` note) if none does within the arm
    /// timeout or the run ends; every worker is then disarmed. The caller
    /// strikes the parked worker, then calls [`Env::release`].
    pub(crate) async fn await_strike(&mut self, fault: &str, point: Point) -> Option<AtPoint> {
        // Unique in the process, so a late message of an old arm never
        // matches a new one.
        static ARMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let arm = ARMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        self.parked.borrow_and_update();
        self.worker_control.arm(point, arm);
        let parked = tokio::select! {
            p = tokio::time::timeout(self.arm_timeout, self.parked.wait_for(|p| p.arm == arm)) => p.ok().and_then(Result::ok).map(|p| p.clone()),
            _ = self.stop.wait_for(|s| *s) => None,
        };
        if parked.is_none() {
            self.worker_control.release(arm);
            if !self.stopping() {
                let reason = json!({"reason": format!("no worker reached {point} in time")});
                self.journal
                    .record(&format!("no-holder-{fault}"), reason, None);
            }
        }
        parked
    }

    /// Arms `point`, waits for a worker to park there, and returns it with
    /// its current pid and the value its fault events carry (target, pid,
    /// struck process, point). `None` if none parked, or it is gone.
    pub(crate) async fn strike(&mut self, fault: &str, point: Point) -> Option<Struck> {
        let parked = self.await_strike(fault, point).await?;
        let Some(pid) = self.workers.get(parked.worker) else {
            self.release(&parked);
            return None;
        };
        let mut target = json!({
            "target": checker::history::worker_name(parked.worker),
            "pid": pid,
            PROCESS: parked.process,
            AT: point,
        });
        if let Some(how) = &parked.how {
            target["how"] = json!(how);
        }
        if let Some(decided) = parked.decided {
            target[DECIDED] = json!(decided);
        }
        if let Some(seen) = &parked.seen {
            target[SEEN] = json!(seen);
        }
        Some(Struck {
            parked,
            pid,
            target,
        })
    }

    /// Ends a strike's arm everywhere: the others are disarmed, and the
    /// struck worker goes on when it next runs.
    pub(crate) fn release(&self, parked: &AtPoint) {
        self.worker_control.release(parked.arm);
    }
}
