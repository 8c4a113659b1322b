//! `crash`: SIGKILL a worker's whole process group at a strike point. The
//! harness records the death (`crash`, with the lock it still held) and
//! starts a replacement under a new process id; the lock it held lives on
//! until its TTL, or forever if it died before giving its key an expiry.

use crate::cluster::BoxFuture;
use crate::names::Fault;
use crate::package::{Package, Shape};
use crate::process;
use crate::runner::{Env, FaultParams, Struck};
use checker::Point;
use serde_json::json;
use std::time::Duration;

/// How long the harness may take to notice the death and start a replacement.
const REPLACED_WITHIN: Duration = Duration::from_secs(5);

pub struct Crash;

impl Package for Crash {
    fn name(&self) -> &'static str {
        Fault::Crash.name()
    }
    fn supports(&self, _: &Shape) -> Result<(), String> {
        Ok(())
    }
    /// The kill is at once; the replacement takes a moment to start.
    fn duration(&self, _: &FaultParams) -> Duration {
        Duration::from_secs(1)
    }
    fn strikes(&self) -> bool {
        true
    }
    fn run<'a>(&'a self, env: &'a mut Env, p: &'a FaultParams) -> BoxFuture<'a, ()> {
        Box::pin(crash(env, p.at))
    }
}

async fn crash(env: &mut Env, at: Point) {
    let Some(Struck {
        parked,
        pid,
        target,
    }) = env.strike(Crash.name(), at).await
    else {
        return;
    };
    // Recorded before the kill, so it precedes everything the death
    // causes (the harness completes the op in flight and records `crash`,
    // dated here: the worker is parked at the point from now on).
    let since = env.journal.now_ns();
    env.worker_control.doomed(pid, since);
    env.journal
        .record_at(since, &Fault::Crash.start_event(), target.clone(), None);
    let killed = process::kill_group(pid);
    // The others are disarmed; the dead one needs nothing.
    env.release(&parked);
    let seen = match killed {
        Ok(()) => replaced(env, parked.worker, pid).await,
        Err(e) => Err(format!("SIGKILL to pid {pid}'s group failed: {e}")),
    };
    env.journal.record(
        &Fault::Crash.stop_event(),
        crate::verify::attach(target, seen),
        None,
    );
}

/// The evidence of a crash: the worker's index runs a new pid, and the old
/// one is gone (reaped by the harness).
async fn replaced(env: &Env, worker: usize, pid: u32) -> Result<serde_json::Value, String> {
    let deadline = tokio::time::Instant::now() + REPLACED_WITHIN;
    loop {
        let now = env.workers.get(worker);
        if now.is_some_and(|p| p != pid) && process::state(pid).is_none() {
            return Ok(json!({"pid": pid, "gone": true, "replacement": now}));
        }
        if tokio::time::Instant::now() > deadline {
            let state = process::state(pid).map_or("gone".to_string(), |c| c.to_string());
            return Err(format!(
                "{REPLACED_WITHIN:?} after SIGKILL, pid {pid} is in state {state} and worker {worker} runs pid {now:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
