//! `clock`: jump lock nodes' wall clocks forward past the TTL while a client
//! holds the lock (their copies of the key expire early), optionally skew the
//! holder's own lease clock, then set every clock right again.

use crate::fault::Targets;
use crate::runner::Env;
use crate::verify;
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
    let moved = jump_nodes(env, &nodes, jump_ns).await;
    if skew_ns != 0 {
        env.skew(holder.worker, skew_ns, 1.0);
    }
    let value = json!({"targets": nodes, "jump_ms": jump_ns / 1_000_000, "holder": holder.process, "holder_skew_ms": skew_ns / 1_000_000});
    env.journal
        .record("start-clock", verify::attach(value.clone(), moved), None);
    env.sleep(hold).await;
    let back = jump_nodes(env, &nodes, 0).await;
    if skew_ns != 0 {
        env.skew(holder.worker, 0, 1.0);
    }
    env.journal
        .record("stop-clock", verify::attach(value, back), None);
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
