//! Scenarios where two faults act together, as in Kleppmann's critique of
//! Redlock: each leaves the holder with a bare majority and then takes one
//! node of it away with a clock jump.

use crate::cluster::BoxFuture;
use crate::fault::skew::jump_nodes;
use crate::names::{skip_event, Action, Fault};
use crate::package::{Package, Shape, RESTART_MARGIN};
use crate::runner::{Env, FaultParams, Holder};
use crate::verify;
use serde_json::json;
use std::time::Duration;

/// Both scenarios need a bare majority to take a node from.
fn needs_five_nodes(shape: &Shape) -> Result<(), String> {
    match shape.lock_nodes >= 5 {
        true => Ok(()),
        false => Err(format!(
            "is a Redlock scenario that needs five lock nodes, and config {} has {}: use --config redlock",
            shape.config, shape.lock_nodes
        )),
    }
}

pub struct SplitClock;

impl Package for SplitClock {
    fn acts_on_nodes(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        Action::SplitClock.name()
    }
    fn supports(&self, shape: &Shape) -> Result<(), String> {
        needs_five_nodes(shape)
    }
    /// One TTL of split before the jump, then the jump.
    fn duration(&self, p: &FaultParams) -> Duration {
        p.lock_ttl + p.hold
    }
    fn slow(&self) -> bool {
        true
    }
    fn needs_proxy(&self) -> bool {
        true
    }
    fn needs_time_shim(&self) -> bool {
        true
    }
    fn run<'a>(&'a self, env: &'a mut Env, p: &'a FaultParams) -> BoxFuture<'a, ()> {
        Box::pin(split_clock(env, p.lock_ttl, p.clock_jump_ns, p.hold))
    }
}

pub struct KillClock;

impl Package for KillClock {
    fn acts_on_nodes(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        Action::KillClock.name()
    }
    fn supports(&self, shape: &Shape) -> Result<(), String> {
        needs_five_nodes(shape)
    }
    /// The restart, then the jump.
    fn duration(&self, p: &FaultParams) -> Duration {
        p.kill_down + RESTART_MARGIN + p.hold
    }
    fn slow(&self) -> bool {
        true
    }
    fn needs_time_shim(&self) -> bool {
        true
    }
    fn run<'a>(&'a self, env: &'a mut Env, p: &'a FaultParams) -> BoxFuture<'a, ()> {
        Box::pin(kill_clock(env, p.kill_down, p.clock_jump_ns, p.hold))
    }
}

/// The holder's side reaches n1–n3, the other side n3–n5. After one TTL (so
/// keys from before the split have expired everywhere) a worker acquires on
/// its side; n3's clock then jumps past the TTL, and the other side can take
/// n3 with its own two nodes.
async fn split_clock(env: &mut Env, ttl: Duration, jump_ns: i64, hold: Duration) {
    let Some(nodes) = five_nodes(env, SplitClock.name()) else {
        return;
    };
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
    let Some(net) = crate::fault::partition::start(env, SplitClock.name(), &links, json!({})).await
    else {
        return;
    };
    env.sleep(ttl).await;
    if let Some(holder) = env.await_holder(SplitClock.name()).await {
        jump_one_node(env, &nodes[2], jump_ns, holder, hold).await;
    }
    crate::fault::partition::heal(env, &net, &links);
}

/// The holder has its key on all five nodes; n1 and n2 are killed and
/// restarted empty at once (no persistence), leaving it n3–n5; n3's clock
/// then jumps past the TTL, and another worker takes n1–n3.
async fn kill_clock(env: &mut Env, down: Duration, jump_ns: i64, hold: Duration) {
    let Some(nodes) = five_nodes(env, KillClock.name()) else {
        return;
    };
    let Some(holder) = env.await_holder(KillClock.name()).await else {
        return;
    };
    let targets = &nodes[..2];
    let began = env.journal.now_ns();
    let mut killed = Vec::new();
    for n in targets {
        match env.cluster.kill(n).await {
            Ok(was) => killed.push(was),
            Err(e) => {
                let value = json!({"target": n, "error": e.to_string()});
                env.journal.record("kill-failed", value, Some(n));
            }
        }
    }
    let value = json!({"targets": targets, "holder": holder.process});
    let value = verify::attach(value, verify::gone_anywhere(env, &killed).await);
    env.journal
        .record_at(began, &Fault::Kill.start_event(), value, None);
    tokio::time::sleep(down).await;
    for was in &killed {
        crate::fault::kill::restart(env, was, &Fault::Kill.stop_event(), None).await;
    }
    jump_one_node(env, &nodes[2], jump_ns, holder, hold).await;
}

/// The lock nodes, if there are the five these scenarios need.
fn five_nodes(env: &Env, scenario: &str) -> Option<Vec<String>> {
    let nodes = env.cluster.lock_nodes();
    if nodes.len() < 5 {
        let reason = json!({"reason": "needs five lock nodes"});
        env.journal.record(&skip_event(scenario), reason, None);
        return None;
    }
    Some(nodes)
}

/// Jumps `node`'s clock for `hold`, then sets it right.
async fn jump_one_node(env: &mut Env, node: &str, jump_ns: i64, holder: Holder, hold: Duration) {
    let shared = vec![node.to_string()];
    let began = env.journal.now_ns();
    let moved = jump_nodes(env, &shared, jump_ns).await;
    let value =
        json!({"targets": shared, "jump_ms": jump_ns / 1_000_000, "holder": holder.process});
    let start = verify::attach(value.clone(), moved);
    env.journal
        .record_at(began, &Fault::Clock.start_event(), start, None);
    env.sleep(hold).await;
    let back = jump_nodes(env, &shared, 0).await;
    env.journal.record(
        &Fault::Clock.stop_event(),
        verify::attach(value, back),
        None,
    );
}
