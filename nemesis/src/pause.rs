//! `pause`: SIGSTOP a worker at a strike point (`--at`, by default after its
//! last lease check, right before its write: Kleppmann's GC-pause window,
//! where the write that follows the pause is the stale one), for longer
//! than its TTL. `pause-node`: SIGSTOP a lock node.

use crate::cluster::BoxFuture;
use crate::package::{needs_lock_node, Package, Shape};
use crate::process::Suspended;
use crate::runner::{Env, FaultParams, Struck};
use checker::Point;
use serde_json::{json, Value};
use std::time::Duration;

pub struct Pause;

impl Pause {
    pub const START: &'static str = "start-pause";
    pub const STOP: &'static str = "stop-pause";
}

impl Package for Pause {
    fn name(&self) -> &'static str {
        "pause"
    }
    fn supports(&self, _: &Shape) -> Result<(), String> {
        Ok(())
    }
    fn duration(&self, p: &FaultParams) -> Duration {
        p.pause
    }
    fn strikes(&self) -> bool {
        true
    }
    fn run<'a>(&'a self, env: &'a mut Env, p: &'a FaultParams) -> BoxFuture<'a, ()> {
        Box::pin(holder(env, p.pause, p.at))
    }
}

pub struct PauseNode;

impl PauseNode {
    pub const START: &'static str = "start-pause-node";
    pub const STOP: &'static str = "stop-pause-node";
}

impl Package for PauseNode {
    fn name(&self) -> &'static str {
        "pause-node"
    }
    fn supports(&self, shape: &Shape) -> Result<(), String> {
        needs_lock_node(shape)
    }
    fn duration(&self, p: &FaultParams) -> Duration {
        p.node_pause
    }
    fn run<'a>(&'a self, env: &'a mut Env, p: &'a FaultParams) -> BoxFuture<'a, ()> {
        Box::pin(node(env, p.node_pause))
    }
}

/// Arms the strike point on every worker and freezes the first to park
/// there, with its whole process group.
async fn holder(env: &mut Env, duration: Duration, at: Point) {
    let Some(Struck {
        parked,
        pid,
        target,
    }) = env.strike(Pause.name(), at).await
    else {
        return;
    };
    let paused = match Suspended::group(pid) {
        Ok(p) => p,
        Err(e) => {
            env.release(&parked);
            let reason = json!({"pid": pid, "reason": e.to_string()});
            env.journal
                .record(&format!("skip-{}", Pause.name()), reason, None);
            return;
        }
    };
    let seen = crate::verify::stopped(pid).await;
    env.journal.record(
        Pause::START,
        crate::verify::attach(target.clone(), seen),
        None,
    );
    // Queued while it is frozen: it goes on from the point once resumed.
    env.release(&parked);
    env.sleep(duration).await;
    drop(paused);
    env.journal.record(Pause::STOP, target, None);
}

/// Freezes the node the lock lives on (the primary, for `replicated`).
async fn node(env: &mut Env, duration: Duration) {
    let Some(node) = env.cluster.primary().await else {
        env.journal.record(
            "skip-pause-node",
            json!({"reason": "no primary known"}),
            None,
        );
        return;
    };
    let target = json!({"target": node.name, "pid": node.pid});
    suspend_for(
        env,
        PauseNode.name(),
        (PauseNode::START, PauseNode::STOP),
        node.pid,
        duration,
        target,
        Some(&node.name),
    )
    .await;
}

async fn suspend_for(
    env: &mut Env,
    fault: &str,
    (start_event, stop_event): (&str, &str),
    pid: u32,
    duration: Duration,
    target: Value,
    node: Option<&str>,
) {
    let began = env.journal.now_ns();
    let paused = match Suspended::new(pid) {
        Ok(p) => p,
        Err(e) => {
            let reason = json!({"pid": pid, "reason": e.to_string()});
            env.journal.record(&format!("skip-{fault}"), reason, node);
            return;
        }
    };
    let seen = crate::verify::stopped(pid).await;
    let start = crate::verify::attach(target.clone(), seen);
    env.journal.record_at(began, start_event, start, node);
    env.sleep(duration).await;
    drop(paused);
    env.journal.record(stop_event, target, node);
}
