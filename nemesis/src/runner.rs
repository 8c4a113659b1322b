//! Runs a schedule against a live run and heals every fault before returning.

use crate::{pause, Fault, Step};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

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
    fn record(&self, f: &str, value: Value, node: Option<&str>);
}

/// What the nemesis may act on.
pub struct Env {
    /// Worker index → PID.
    pub workers: Vec<u32>,
    /// The lock's nodes by name → PID. The storage node is never here.
    pub lock_nodes: Vec<(String, u32)>,
    pub holders: watch::Receiver<Holder>,
    pub journal: Arc<dyn Journal>,
    /// How long to wait for a holder before skipping a holder fault.
    pub arm_timeout: Duration,
    /// Turns true when the run ends: every fault heals at once.
    pub stop: watch::Receiver<bool>,
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
}

/// Runs `steps` relative to `start` until they are done or the run ends.
pub async fn run(steps: Vec<Step>, mut env: Env, start: Instant) {
    for step in steps {
        let wait =
            (start + Duration::from_millis(step.at_ms)).saturating_duration_since(Instant::now());
        if !env.sleep(wait).await {
            return;
        }
        let duration = Duration::from_millis(step.duration_ms);
        match step.fault {
            Fault::Pause => pause::holder(&mut env, duration).await,
            Fault::PauseNode => pause::node(&mut env, duration).await,
        }
        if env.stopping() {
            return;
        }
    }
}
