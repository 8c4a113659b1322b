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
    env.holders.borrow_and_update();
    let next = tokio::select! {
        next = tokio::time::timeout(env.arm_timeout, env.holders.changed()) => next,
        _ = env.stop.wait_for(|s| *s) => return,
    };
    if !matches!(next, Ok(Ok(()))) {
        let reason = json!({"reason": "no worker held the lock in time"});
        env.journal.record("skip-pause", reason, None);
        return;
    }
    let holder = *env.holders.borrow_and_update();
    let Some(&pid) = env.workers.get(holder.worker) else {
        return;
    };
    let target = json!({"target": format!("worker-{}", holder.worker), "pid": pid, "process": holder.process});
    suspend_for(env, "pause", pid, duration, target, None).await;
}

/// Freezes the first lock node for `duration`.
pub async fn node(env: &mut Env, duration: Duration) {
    let Some((name, pid)) = env.lock_nodes.first().cloned() else {
        return;
    };
    let target = json!({"target": name, "pid": pid});
    suspend_for(env, "pause-node", pid, duration, target, Some(&name)).await;
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
    env.journal
        .record(&format!("start-{fault}"), target.clone(), node);
    env.sleep(duration).await;
    drop(paused);
    env.journal.record(&format!("stop-{fault}"), target, node);
}
