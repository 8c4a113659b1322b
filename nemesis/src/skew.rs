//! `clock`: jump lock nodes' wall clocks forward past the TTL while a client
//! holds the lock (their copies of the key expire early), optionally skew the
//! holder's own lease clock, then set every clock right again.

use crate::fault::Targets;
use crate::runner::Env;
use serde_json::json;
use std::time::Duration;

pub async fn jump(env: &mut Env, targets: Targets, jump_ns: i64, skew_ns: i64, hold: Duration) {
    let Some(holder) = env.await_holder("clock").await else {
        return;
    };
    let nodes: Vec<String> = env
        .cluster
        .targets(targets)
        .await
        .into_iter()
        .map(|n| n.name)
        .collect();
    jump_nodes(env, &nodes, jump_ns);
    if skew_ns != 0 {
        env.skew(holder.worker, skew_ns, 1.0);
    }
    let value = json!({"targets": nodes, "jump_ms": jump_ns / 1_000_000, "holder": holder.process, "holder_skew_ms": skew_ns / 1_000_000});
    env.journal.record("start-clock", value.clone(), None);
    env.sleep(hold).await;
    jump_nodes(env, &nodes, 0);
    if skew_ns != 0 {
        env.skew(holder.worker, 0, 1.0);
    }
    env.journal.record("stop-clock", value, None);
}

/// Sets every node in `nodes` to `offset_ns` from real time; failures are
/// recorded, not fatal (a node may be down for a kill).
pub(crate) fn jump_nodes(env: &Env, nodes: &[String], offset_ns: i64) {
    for node in nodes {
        if let Err(e) = env.cluster.set_clock(node, offset_ns, 1.0) {
            let value = json!({"target": node, "error": e.to_string()});
            env.journal.record("clock-failed", value, Some(node));
        }
    }
}
