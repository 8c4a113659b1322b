//! `kill`: SIGKILL the nodes the lock lives on right after a worker has
//! acquired it, and restart them after `--restart-ms` — empty, unless
//! persistence is on. On Redlock, `--targets` chooses how many of the
//! holder's nodes die.

use crate::fault::Targets;
use crate::runner::Env;
use serde_json::json;
use std::time::Duration;

pub async fn nodes(env: &mut Env, targets: Targets, down_for: Duration) {
    let Some(holder) = env.await_holder("kill").await else {
        return;
    };
    let nodes = env.cluster.targets(targets).await;
    if nodes.is_empty() {
        env.journal
            .record("skip-kill", json!({"reason": "no node to kill"}), None);
        return;
    }
    let mut killed = Vec::new();
    for node in &nodes {
        match env.cluster.kill(&node.name).await {
            Ok(pid) => killed.push(json!({"target": node.name, "pid": pid})),
            Err(e) => {
                let reason = json!({"target": node.name, "reason": e.to_string()});
                env.journal.record("skip-kill", reason, Some(&node.name));
            }
        }
    }
    let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    let value = json!({"targets": names, "killed": killed, "holder": holder.process});
    env.journal.record("start-kill", value, single(&names));
    // Restart even when the run is ending: every fault heals before the final read.
    env.sleep(down_for).await;
    for name in names {
        restart(env, name, "stop-kill").await;
    }
}

fn single<'a>(names: &[&'a str]) -> Option<&'a str> {
    match names {
        [one] => Some(one),
        _ => None,
    }
}

/// Restarts `name` and records `f` with the new pid, or why it failed.
pub(crate) async fn restart(env: &Env, name: &str, f: &str) {
    let value = match env.cluster.restart(name).await {
        Ok(node) => json!({"target": name, "pid": node.pid}),
        Err(e) => json!({"target": name, "error": e}),
    };
    env.journal.record(f, value, Some(name));
}
