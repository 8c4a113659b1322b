//! `pause`: SIGSTOP a worker at a strike point (`--at`, by default after its
//! last lease check, right before its write: Kleppmann's GC-pause window,
//! where the write that follows the pause is the stale one), for longer
//! than its TTL. `pause-node`: SIGSTOP a lock node.

use crate::cluster::{BoxFuture, Targets};
use crate::names::{skip_event, Fault};
use crate::package::{needs_lock_node, Package, Shape};
use crate::process::Suspended;
use crate::runner::{Env, FaultParams, Struck};
use checker::Point;
use serde_json::{json, Value};
use std::time::Duration;

pub struct Pause;

impl Package for Pause {
    fn name(&self) -> &'static str {
        Fault::Pause.name()
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

impl Package for PauseNode {
    fn acts_on_nodes(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        Fault::PauseNode.name()
    }
    fn supports(&self, shape: &Shape) -> Result<(), String> {
        needs_lock_node(shape)
    }
    fn duration(&self, p: &FaultParams) -> Duration {
        p.node_pause
    }
    fn can_target_storage(&self) -> bool {
        true
    }
    fn run<'a>(&'a self, env: &'a mut Env, p: &'a FaultParams) -> BoxFuture<'a, ()> {
        Box::pin(node(env, p.node_pause, p.targets))
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
            env.journal.record(&skip_event(Pause.name()), reason, None);
            return;
        }
    };
    let seen = crate::verify::stopped(pid).await;
    env.journal.record(
        &Fault::Pause.start_event(),
        crate::verify::attach(target.clone(), seen),
        None,
    );
    // Queued while it is frozen: it goes on from the point once resumed.
    env.release(&parked);
    env.sleep(duration).await;
    drop(paused);
    env.journal.record(&Fault::Pause.stop_event(), target, None);
}

/// Freezes the node the lock lives on (the primary, for `replicated`), or
/// the storage node (`--targets storage`).
async fn node(env: &mut Env, duration: Duration, targets: Targets) {
    let node = match targets {
        Targets::Storage => env.cluster.targets(targets).await.into_iter().next(),
        _ => env.cluster.primary().await,
    };
    let Some(node) = node else {
        env.journal.record(
            &skip_event(PauseNode.name()),
            json!({"reason": "no primary known"}),
            None,
        );
        return;
    };
    let target = json!({"target": node.name, "pid": node.pid});
    if let Some(host) = env.cluster.host_of(&node.name) {
        return suspend_there(env, host, node.pid, duration, target, &node.name).await;
    }
    suspend_for(
        env,
        Fault::PauseNode,
        node.pid,
        duration,
        target,
        Some(&node.name),
    )
    .await;
}

/// As [`suspend_for`], on the node's host: its process group there (the
/// node leads one), seen stopped there.
async fn suspend_there(
    env: &mut Env,
    host: std::sync::Arc<dyn crate::cluster::Host>,
    pid: u32,
    duration: Duration,
    target: Value,
    node: &str,
) {
    let fault = Fault::PauseNode;
    let began = env.journal.now_ns();
    if let Err(e) = host.suspend_group(pid).await {
        let reason = json!({"pid": pid, "host": host.name(), "reason": e.to_string()});
        env.journal
            .record(&skip_event(fault.name()), reason, Some(node));
        return;
    }
    let seen = crate::verify::group_stopped_on(host.as_ref(), pid).await;
    let start = crate::verify::attach(target.clone(), seen);
    env.journal
        .record_at(began, &fault.start_event(), start, Some(node));
    env.sleep(duration).await;
    let resumed = host.resume_group(pid).await;
    let mut stop = target;
    // A node left stopped makes the rest of the run another test than the
    // one it claims: not a verdict about this fault.
    if let Err(e) = resumed {
        stop[checker::history::fault::UNVERIFIED] = json!(format!(
            "{node} on {} was not resumed ({e}): the run went on with it stopped",
            host.name()
        ));
    }
    env.journal.record(&fault.stop_event(), stop, Some(node));
}

async fn suspend_for(
    env: &mut Env,
    fault: Fault,
    pid: u32,
    duration: Duration,
    target: Value,
    node: Option<&str>,
) {
    let began = env.journal.now_ns();
    // Its children too: a PostgreSQL server's backends serve on their own.
    let paused = match Suspended::tree(pid) {
        Ok(p) => p,
        Err(e) => {
            let reason = json!({"pid": pid, "reason": e.to_string()});
            env.journal.record(&skip_event(fault.name()), reason, node);
            return;
        }
    };
    let seen = crate::verify::tree_stopped(pid, paused.children()).await;
    let start = crate::verify::attach(target.clone(), seen);
    env.journal
        .record_at(began, &fault.start_event(), start, node);
    env.sleep(duration).await;
    drop(paused);
    env.journal.record(&fault.stop_event(), target, node);
}
