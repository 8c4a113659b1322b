//! Scenarios where two faults act together, as in Kleppmann's critique of
//! Redlock: each leaves the holder with a bare majority and then takes one
//! node of it away with a clock jump.

use crate::runner::Env;
use crate::skew::jump_nodes;
use serde_json::json;
use std::time::Duration;

/// The holder's side reaches n1–n3, the other side n3–n5. After one TTL (so
/// keys from before the split have expired everywhere) a worker acquires on
/// its side; n3's clock then jumps past the TTL, and the other side can take
/// n3 with its own two nodes.
pub async fn split_clock(env: &mut Env, ttl: Duration, jump_ns: i64, hold: Duration) {
    let nodes = env.cluster.lock_nodes();
    if nodes.len() < 5 {
        env.journal.record(
            "skip-partition+clock",
            json!({"reason": "needs five lock nodes"}),
            None,
        );
        return;
    }
    // Even workers keep n1–n3, odd workers keep n3–n5; n3 is shared.
    let links: Vec<(usize, String)> = (0..env.workers.len())
        .flat_map(|w| {
            let lost = if w % 2 == 0 {
                [&nodes[3], &nodes[4]]
            } else {
                [&nodes[0], &nodes[1]]
            };
            lost.into_iter().map(move |n| (w, n.clone()))
        })
        .collect();
    if let Err(e) = env.cluster.cut_workers(&links) {
        env.journal.record(
            "skip-partition+clock",
            json!({"reason": e.to_string()}),
            None,
        );
        return;
    }
    env.journal
        .record("start-partition", json!({"cut": links}), None);
    env.sleep(ttl).await;
    if let Some(holder) = env.await_holder("partition+clock").await {
        let shared = vec![nodes[2].clone()];
        jump_nodes(env, &shared, jump_ns);
        let value =
            json!({"targets": shared, "jump_ms": jump_ns / 1_000_000, "holder": holder.process});
        env.journal.record("start-clock", value.clone(), None);
        env.sleep(hold).await;
        jump_nodes(env, &shared, 0);
        env.journal.record("stop-clock", value, None);
    }
    if let Err(e) = env.cluster.heal() {
        env.journal
            .record("heal-failed", json!({"error": e.to_string()}), None);
    }
    env.journal
        .record("stop-partition", json!({"cut": links}), None);
}

/// The holder has its key on all five nodes; n1 and n2 are killed and
/// restarted empty at once (no persistence), leaving it n3–n5; n3's clock
/// then jumps past the TTL, and another worker takes n1–n3.
pub async fn kill_clock(env: &mut Env, down: Duration, jump_ns: i64, hold: Duration) {
    let nodes = env.cluster.lock_nodes();
    if nodes.len() < 5 {
        env.journal.record(
            "skip-kill+clock",
            json!({"reason": "needs five lock nodes"}),
            None,
        );
        return;
    }
    let Some(holder) = env.await_holder("kill+clock").await else {
        return;
    };
    let killed = &nodes[..2];
    for n in killed {
        if let Err(e) = env.cluster.kill(n).await {
            env.journal.record(
                "kill-failed",
                json!({"target": n, "error": e.to_string()}),
                Some(n),
            );
        }
    }
    env.journal.record(
        "start-kill",
        json!({"targets": killed, "holder": holder.process}),
        None,
    );
    tokio::time::sleep(down).await;
    for n in killed {
        crate::kill::restart(env, n, "stop-kill").await;
    }
    let shared = vec![nodes[2].clone()];
    jump_nodes(env, &shared, jump_ns);
    let value =
        json!({"targets": shared, "jump_ms": jump_ns / 1_000_000, "holder": holder.process});
    env.journal.record("start-clock", value.clone(), None);
    env.sleep(hold).await;
    jump_nodes(env, &shared, 0);
    env.journal.record("stop-clock", value, None);
}
