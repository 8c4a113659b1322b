//! `pause`: SIGSTOP the lock holder in its critical section, for longer than
//! its TTL. `pause-node`: SIGSTOP a lock node.
//!
//! The holder is frozen right after it has read the counter (well under a
//! millisecond after it acquired): Kleppmann's GC-pause window, where the
//! write that follows the pause is the stale one.

use crate::process::Suspended;
use crate::runner::Env;
use serde_json::{json, Value};
use std::time::Duration;

/// Waits for the next holder to enter its critical section, then freezes it.
pub async fn holder(env: &mut Env, duration: Duration) {
    let Some(holder) = env.await_holder("pause").await else {
        return;
    };
    let Some(pid) = env.workers.get(holder.worker) else {
        return;
    };
    let target = json!({"target": checker::history::worker_name(holder.worker), "pid": pid, "process": holder.process});
    suspend_for(env, "pause", pid, duration, target, None).await;
}

/// Freezes the node the lock lives on (the primary, for `replicated`).
pub async fn node(env: &mut Env, duration: Duration) {
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
        "pause-node",
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
    pid: u32,
    duration: Duration,
    target: Value,
    node: Option<&str>,
) {
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
    env.journal.record(&format!("start-{fault}"), start, node);
    env.sleep(duration).await;
    drop(paused);
    env.journal.record(&format!("stop-{fault}"), target, node);
}
