//! `kill`: SIGKILL the nodes the lock lives on right after a worker has
//! acquired it, and restart them after `--restart-ms` — empty, unless
//! persistence is on. On Redlock, `--targets` chooses how many of the
//! holder's nodes die.

use crate::cluster::BoxFuture;
use crate::names::{skip_event, Fault};
use crate::package::{needs_lock_node, Package, Shape, RESTART_MARGIN};
use crate::runner::{Env, FaultParams};
use crate::verify;
use crate::NodeRef;
use serde_json::{json, Value};
use std::time::Duration;

pub struct Kill;

impl Package for Kill {
    fn acts_on_nodes(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        Fault::Kill.name()
    }
    fn supports(&self, shape: &Shape) -> Result<(), String> {
        needs_lock_node(shape)
    }
    fn duration(&self, p: &FaultParams) -> Duration {
        // Marked down after its silence and the doubts' gossip: within
        // twice the silence on an idle machine (1.3–1.7 s for 1 s).
        match p.restart_at_vote {
            true => p.down_after * 2 + RESTART_MARGIN,
            false => p.kill_down + RESTART_MARGIN,
        }
    }
    fn slow(&self) -> bool {
        true
    }
    fn can_target_storage(&self) -> bool {
        true
    }
    fn run<'a>(&'a self, env: &'a mut Env, p: &'a FaultParams) -> BoxFuture<'a, ()> {
        Box::pin(nodes(env, p))
    }
}

/// `p.promotion`: how long after a kill a replica may still be voted in;
/// watched past the restart, as the cluster's vote can end after the node
/// is back.
async fn nodes(env: &mut Env, p: &FaultParams) {
    let Some(holder) = env.await_holder(Kill.name()).await else {
        return;
    };
    let nodes = env.cluster.targets(p.targets).await;
    if nodes.is_empty() {
        env.journal.record(
            &skip_event(Kill.name()),
            json!({"reason": "no node to kill"}),
            None,
        );
        return;
    }
    let began = env.journal.now_ns();
    // The node's time down, and a promotion's, count from the SIGKILL, not
    // from after its evidence is gathered and recorded (which a busy
    // machine stretched to 1.4 s, past the vote a 300 ms restart beats).
    let down = std::time::Instant::now();
    let mut killed = Vec::new();
    for node in &nodes {
        match env.cluster.kill(&node.name).await {
            Ok(was) => killed.push(was),
            Err(e) => {
                let reason = json!({"target": node.name, "reason": e.to_string()});
                env.journal
                    .record(&skip_event(Kill.name()), reason, Some(&node.name));
            }
        }
    }
    let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    let pids: Vec<_> = killed
        .iter()
        .map(|n| json!({"target": n.name, "pid": n.pid}))
        .collect();
    let value = json!({"targets": names, "killed": pids, "holder": holder.process});
    let value = verify::attach(value, verify::gone_anywhere(env, &killed).await);
    env.journal
        .record_at(began, &Fault::Kill.start_event(), value, single(&names));
    // Restart even when the run is ending: every fault heals before the final read.
    let watched = match killed.as_slice() {
        [was] if env.cluster.fails_over() => Some(was.name.clone()),
        _ => None,
    };
    let (promoted, at_vote) = stay_down(env, p, watched.as_deref(), down).await;
    for was in &killed {
        let at_vote = at_vote
            .clone()
            .map(|v| (checker::history::fault::AT_VOTE, v));
        restart(env, was, &Fault::Kill.stop_event(), at_vote).await;
    }
    // A vote begun while the node was down can end after it is back (its
    // peers had marked it failed): the history must have that promotion too.
    // A node back before its peers marked it down faces no vote, and the
    // fault ends (watching it to the failover timeout made each such kill
    // last 6 s, not the 0.8 s the schedule plans).
    if let (Some(name), false) = (&watched, promoted) {
        if at_vote.is_some() || vote_began(env, name, p.down_after).await {
            let until = p.promotion.max(p.kill_down);
            promotion(env, name, down, until, "the kill").await;
        }
    }
}

/// Whether the topology marks `node`, just restarted, down within `within`:
/// a mark from before the restart stays (a cluster keeps its `fail` flag
/// for twice the node timeout), and one can still land while its peers
/// have yet to hear from it again.
async fn vote_began(env: &mut Env, node: &str, within: Duration) -> bool {
    marked_down_by(env, node, within).await.is_some()
}

/// Who marked `node` down within `within`, unless the run ends first.
async fn marked_down_by(env: &mut Env, node: &str, within: Duration) -> Option<String> {
    tokio::select! {
        s = env.cluster.await_marked_down(node, within) => s,
        _ = env.stop.wait_for(|s| *s) => None,
    }
}

/// Waits out the node's time down: `kill_down`, watching a node the
/// topology fails over (`watched`) for a promotion meanwhile; or, with
/// `--restart-at-vote`, until it is marked down. Returns whether a replica
/// took over, and when it was marked down.
async fn stay_down(
    env: &mut Env,
    p: &FaultParams,
    watched: Option<&str>,
    down: std::time::Instant,
) -> (bool, Option<Value>) {
    match watched {
        Some(name) if p.restart_at_vote => {
            (false, Some(marked_down(env, name, down, p.promotion).await))
        }
        Some(name) => {
            let promoted = promotion(env, name, down, p.kill_down, "the kill").await;
            env.sleep(p.kill_down.saturating_sub(down.elapsed())).await;
            (promoted, None)
        }
        None => {
            env.sleep(p.kill_down.saturating_sub(down.elapsed())).await;
            (false, None)
        }
    }
}

/// `--restart-at-vote`: waits (until `within` after `began`, or the run's
/// end) for the topology to mark `killed` down, and says when and who said
/// so, for the restart's event: the node comes back as its replica is being
/// voted in, a supervisor's quick restart met by a failover.
async fn marked_down(
    env: &mut Env,
    killed: &str,
    began: std::time::Instant,
    within: Duration,
) -> serde_json::Value {
    let said = marked_down_by(env, killed, within.saturating_sub(began.elapsed())).await;
    let after_ms = began.elapsed().as_millis() as u64;
    match said {
        Some(by) => json!({"marked_down": true, "after_ms": after_ms, "by": by}),
        None => json!({"marked_down": false, "after_ms": after_ms}),
    }
}

/// While `killed` is down (`down_for`), watches for a replica to take its
/// place, and records the promotion when one does: a key granted again
/// after it was granted on a replica that never received it. (No promotion
/// is no fault of the kill's: a node back before the vote is the other
/// story, an empty master.)
/// `since`: what began the wait at `began`, as the story tells it; the
/// watch lasts until `until` after it. Returns whether a replica took over.
pub(crate) async fn promotion(
    env: &mut Env,
    killed: &str,
    began: std::time::Instant,
    until: Duration,
    since: &str,
) -> bool {
    let promoted = tokio::select! {
        p = env.cluster.await_promotion(killed, until.saturating_sub(began.elapsed())) => p,
        _ = env.stop.wait_for(|s| *s) => None,
    };
    let Some(new) = promoted else {
        return false;
    };
    let after_ms = began.elapsed().as_millis() as u64;
    let value =
        json!({"promoted": new.node, "replaces": killed, "after_ms": after_ms, "since": since});
    env.journal.record(
        checker::history::fault::PROMOTED,
        new.with_epoch(value),
        Some(&new.node),
    );
    true
}

fn single<'a>(names: &[&'a str]) -> Option<&'a str> {
    match names {
        [one] => Some(one),
        _ => None,
    }
}

/// Restarts the killed node `was` and records `f` with the new pid and the
/// evidence that it is a new process. A failed restart leaves the run
/// without a node it relies on (or with a foreign server in its place), so
/// the event says `unverified` and the run cannot be valid.
/// `extra`: one more key of the event's value, the fault's own say.
pub(crate) async fn restart(env: &Env, was: &NodeRef, f: &str, extra: Option<(&str, Value)>) {
    let name = was.name.as_str();
    let value = match env.cluster.restart(name).await {
        Ok(node) => {
            let mut value = json!({"target": name, "pid": node.pid});
            if let Some((key, said)) = extra {
                value[key] = said;
            }
            verify::attach(value, verify::restarted(was, &node))
        }
        Err(e) => {
            let value = json!({"target": name, "error": e});
            verify::attach(value, Err(format!("restart of {name} failed: {e}")))
        }
    };
    env.journal.record(f, value, Some(name));
}
