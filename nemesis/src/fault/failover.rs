//! `failover`: the classic race, made reliable. Partition the primary from
//! its replicas, let a worker acquire on it (the key never reaches a
//! replica), SIGKILL it, keep the partition until Sentinel (or, for
//! `cluster`, the cluster's vote) has promoted a replica — which lacks the
//! key — then heal and restart the old primary, which comes back a replica.
//!
//! Healing right after the kill would not lose the key: the dead primary's
//! kernel still retransmits its send buffer to the replicas. And a release
//! made during the partition never reaches the replicas either, so the
//! fault first keeps the partition for one TTL: every lock key the replicas
//! still have from before it has then expired, and cannot hide the race.

use crate::cluster::BoxFuture;
use crate::fault::kill::restart;
use crate::names::{skip_event, Fault};
use crate::package::{Package, Shape, RESTART_MARGIN};
use crate::runner::{Env, FaultParams};
use crate::verify;
use checker::history::fault;
use serde_json::json;
use std::time::Duration;
use tokio::time::Instant;

pub struct Failover;

impl Package for Failover {
    fn acts_on_nodes(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        Fault::Failover.name()
    }
    fn supports(&self, shape: &Shape) -> Result<(), String> {
        match shape.fails_over {
            true => Ok(()),
            false => Err(format!(
                "needs replicas that take over, and config {} has none: use --config replicated or cluster",
                shape.config
            )),
        }
    }
    /// One TTL of partition before the kill, Sentinel's promotion, the restart.
    fn duration(&self, p: &FaultParams) -> Duration {
        p.lock_ttl + p.promotion + p.kill_down + RESTART_MARGIN
    }
    fn slow(&self) -> bool {
        true
    }
    fn needs_firewall(&self) -> bool {
        true
    }
    fn run<'a>(&'a self, env: &'a mut Env, p: &'a FaultParams) -> BoxFuture<'a, ()> {
        Box::pin(run(env, p.lock_ttl))
    }
}

/// How long Sentinel (or a cluster) gets to promote a replica before the
/// fault gives up.
pub(crate) const PROMOTION_TIMEOUT: Duration = Duration::from_secs(30);

async fn run(env: &mut Env, lock_ttl: Duration) {
    let Some(primary) = env.cluster.primary().await else {
        env.journal.record(
            &skip_event(Failover.name()),
            json!({"reason": "no primary known"}),
            None,
        );
        return;
    };
    let name = primary.name.clone();
    if commanded(env, &name).await {
        return;
    }
    let replicas = env.cluster.replicas_of(&name);
    let began = env.journal.now_ns();
    if let Err(e) = env.cluster.partition(&name, &replicas).await {
        let reason = json!({"reason": e.to_string()});
        env.journal
            .record(&skip_event(Failover.name()), reason, Some(&name));
        return;
    }
    // Both directions are cut: the replicas cannot reach the primary, nor it them.
    let seen = verify::cut(env, &verify::both_ways(&name, &replicas)).await;
    let value = json!({"target": name, "pid": primary.pid, "cut-from": replicas});
    let start = verify::attach(value, seen);
    env.journal
        .record_at(began, &Fault::Failover.start_event(), start, Some(&name));
    env.sleep(lock_ttl).await;

    // A lock taken now lives on the primary alone. With `--wait-replicas`
    // no acquisition succeeds here; the failover goes ahead regardless.
    let holder = env.await_holder(Failover.name()).await;
    if env.stopping() {
        let _ = env.cluster.heal().await;
        // A cut and a grant, no kill: no failover, whatever the cut met.
        let value = json!({"target": name, "healed": "run ending", fault::INTERRUPTED: "the run ended before the kill"});
        env.journal
            .record(&Fault::Failover.stop_event(), value, Some(&name));
        return;
    }
    let killed = env.cluster.kill(&name).await;
    let killed_at = Instant::now();
    let value = json!({"target": name, "holder": holder.map(|h| h.process), "error": killed.as_ref().err().map(|e| e.to_string())});
    let seen = match &killed {
        Ok(was) => verify::gone_anywhere(env, std::slice::from_ref(was)).await,
        Err(e) => Err(format!("killing {name} failed: {e}")),
    };
    env.journal
        .record(fault::KILLED, verify::attach(value, seen), Some(&name));

    let promoted = tokio::select! {
        p = env.cluster.await_promotion(&name, PROMOTION_TIMEOUT) => p,
        _ = env.stop.wait_for(|s| *s) => None,
    };
    let after_ms = killed_at.elapsed().as_millis() as u64;
    // The run's end before the vote cut the failover short: no evidence,
    // but no failure of one either (an earlier failover of the run stands).
    let ended = promoted.is_none() && env.stopping();
    let value = match &promoted {
        Some(new) => Some(new.with_epoch(json!({"promoted": new.node, "after_ms": after_ms}))),
        None if ended => None,
        // No failover happened: the run did not test one, whatever it saw.
        // (Sentinel skips a replica cut off from its primary for more than
        // ten times down-after, so a long wait for a holder can leave none
        // eligible.)
        None => Some(verify::attach(
            json!({"promoted": null, "after_ms": after_ms}),
            Err(format!(
                "no replica was promoted within {after_ms} ms of the kill"
            )),
        )),
    };
    if let Some(value) = value {
        let new = promoted.as_ref().map(|p| p.node.as_str());
        env.journal.record(fault::PROMOTED, value, new);
    }

    if let Err(e) = env.cluster.heal().await {
        env.journal
            .record(fault::HEAL_FAILED, json!({"error": e.to_string()}), None);
    }
    let why = |ms| format!("the run ended {ms} ms after the kill, before a replica was promoted");
    restart(
        env,
        killed.as_ref().unwrap_or(&primary),
        &Fault::Failover.stop_event(),
        ended.then(|| (fault::INTERRUPTED, json!(why(after_ms)))),
    )
    .await;
}

/// A deployment lockstorm did not start fails over by the user's command
/// (a cloud's test failover, `SENTINEL FAILOVER`, …), once a worker holds
/// the lock; the Sentinels naming another primary in time is the evidence.
/// False when there is no command: lockstorm's own failover goes ahead.
async fn commanded(env: &mut Env, name: &str) -> bool {
    let began = env.journal.now_ns();
    let holder = env.await_holder(Failover.name()).await;
    let Some(ran) = env.cluster.run_command(Failover.name(), name).await else {
        return false;
    };
    let value = json!({"target": name, "by": "fault command", "holder": holder.map(|h| h.process)});
    let ran_ok = ran
        .clone()
        .map(|out| json!({"command": "exited 0", "output": out}));
    env.journal.record_at(
        began,
        &Fault::Failover.start_event(),
        verify::attach(value, ran_ok),
        Some(name),
    );
    let promoted = match ran {
        Ok(_) => tokio::select! {
            p = env.cluster.await_promotion(name, PROMOTION_TIMEOUT) => p,
            _ = env.stop.wait_for(|s| *s) => None,
        },
        Err(_) => None,
    };
    let value = match &promoted {
        Some(new) => {
            // The failover lasts until the old primary stops being one: a
            // failover that leaves it running (Sentinel's own, a cloud's
            // test failover) has two primaries until the Sentinels demote
            // it, and a client still connected to it keeps locking there.
            let old = demotion(env, name).await;
            verify::attach(
                json!({"target": name, "promoted": new.node, "old_primary": old}),
                Ok(json!({"sentinel": "named a new primary", "primary": new.node})),
            )
        }
        None => verify::attach(
            json!({"target": name, "promoted": null}),
            Err(format!(
                "the Sentinels named no primary other than {name} within {PROMOTION_TIMEOUT:?} of the fault command"
            )),
        ),
    };
    env.journal.record(
        &Fault::Failover.stop_event(),
        value,
        promoted.as_ref().map(|p| p.node.as_str()),
    );
    true
}

/// How long the old primary may stay one after the promotion before the
/// fault ends regardless (Sentinel polls it every 10 s).
const DEMOTION_TIMEOUT: Duration = Duration::from_secs(30);

/// Waits until the old primary `name` is no longer a primary (a replica, or
/// gone), the run ends or [`DEMOTION_TIMEOUT`] passes; says which.
pub(crate) async fn demotion(env: &Env, name: &str) -> serde_json::Value {
    let began = Instant::now();
    loop {
        match env.cluster.role_of(name).await.as_deref() {
            Some("master") => {}
            // A replica, or no answer: it takes no more writes.
            seen => {
                let ms = began.elapsed().as_millis() as u64;
                return json!({"demoted_after_ms": ms, "role": seen});
            }
        }
        if env.stopping() || began.elapsed() > DEMOTION_TIMEOUT {
            let ms = began.elapsed().as_millis() as u64;
            return json!({"still_primary_after_ms": ms});
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
