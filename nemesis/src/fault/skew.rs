//! `clock`: jump lock nodes' wall clocks forward past the TTL while a client
//! holds the lock (their copies of the key expire early), optionally skew the
//! holder's own lease clock, then set every clock right again.

use crate::cluster::BoxFuture;
use crate::cluster::Targets;
use crate::names::Fault;
use crate::package::{needs_lock_node, Package, Shape};
use crate::runner::{Env, FaultParams};
use crate::verify;
use serde_json::json;
use std::time::Duration;

pub struct Clock;

impl Package for Clock {
    fn acts_on_nodes(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        Fault::Clock.name()
    }
    fn supports(&self, shape: &Shape) -> Result<(), String> {
        needs_lock_node(shape)
    }
    fn duration(&self, p: &FaultParams) -> Duration {
        p.hold
    }
    fn needs_time_shim(&self) -> bool {
        true
    }
    fn run<'a>(&'a self, env: &'a mut Env, p: &'a FaultParams) -> BoxFuture<'a, ()> {
        Box::pin(jump(
            env,
            p.targets,
            p.clock_jump_ns,
            p.holder_skew_ns,
            p.hold,
        ))
    }
}

async fn jump(env: &mut Env, targets: Targets, jump_ns: i64, skew_ns: i64, hold: Duration) {
    let Some(holder) = env.await_holder(Clock.name()).await else {
        return;
    };
    let nodes: Vec<String> = env
        .cluster
        .targets(targets)
        .await
        .into_iter()
        .map(|n| n.name)
        .collect();
    let began = env.journal.now_ns();
    let moved = jump_nodes(env, &nodes, jump_ns).await;
    if skew_ns != 0 {
        env.skew(holder.worker, skew_ns, 1.0);
    }
    let value = json!({"targets": nodes, "jump_ms": jump_ns / 1_000_000, "holder": holder.process, "holder_skew_ms": skew_ns / 1_000_000});
    let start = verify::attach(value.clone(), moved);
    env.journal
        .record_at(began, &Fault::Clock.start_event(), start, None);
    env.sleep(hold).await;
    let back = jump_nodes(env, &nodes, 0).await;
    if skew_ns != 0 {
        env.skew(holder.worker, 0, 1.0);
    }
    env.journal.record(
        &Fault::Clock.stop_event(),
        verify::attach(value, back),
        None,
    );
}

/// Sets every node in `nodes` to `offset_ns` from real time and reads their
/// clocks back: the evidence, or why the jump cannot be shown to have happened.
pub(crate) async fn jump_nodes(
    env: &Env,
    nodes: &[String],
    offset_ns: i64,
) -> Result<serde_json::Value, String> {
    // Every node is set even when one fails: a heal must reach them all.
    let mut failed = None;
    for node in nodes {
        if let Err(e) = env.cluster.set_clock(node, offset_ns, 1.0) {
            let value = json!({"target": node, "error": e.to_string()});
            env.journal.record("clock-failed", value, Some(node));
            failed.get_or_insert(format!("setting {node}'s clock: {e}"));
        }
    }
    match failed {
        Some(why) => Err(why),
        None => verify::clocks(env, nodes, offset_ns).await,
    }
}
