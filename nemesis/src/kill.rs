//! `kill`: SIGKILL the node the lock lives on right after a worker has
//! acquired it, and restart it after `--restart-ms` — empty, unless
//! persistence is on.

use crate::runner::Env;
use serde_json::json;
use std::time::Duration;

pub async fn primary(env: &mut Env, down_for: Duration) {
    let Some(holder) = env.await_holder("kill").await else {
        return;
    };
    let Some(node) = env.cluster.primary().await else {
        env.journal
            .record("skip-kill", json!({"reason": "no primary known"}), None);
        return;
    };
    let pid = match env.cluster.kill(&node.name).await {
        Ok(pid) => pid,
        Err(e) => {
            let reason = json!({"target": node.name, "reason": e.to_string()});
            env.journal.record("skip-kill", reason, Some(&node.name));
            return;
        }
    };
    let value = json!({"target": node.name, "pid": pid, "holder": holder.process});
    env.journal.record("start-kill", value, Some(&node.name));
    // Restart even when the run is ending: every fault heals before the final read.
    env.sleep(down_for).await;
    restart(env, &node.name, "stop-kill").await;
}

/// Restarts `name` and records `f` with the new pid, or why it failed.
pub(crate) async fn restart(env: &Env, name: &str, f: &str) {
    let value = match env.cluster.restart(name).await {
        Ok(node) => json!({"target": name, "pid": node.pid}),
        Err(e) => json!({"target": name, "error": e}),
    };
    env.journal.record(f, value, Some(name));
}
