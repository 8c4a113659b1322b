//! The two failovers a Redis Cluster's operator asks for, side by side:
//! `manual-failover` (`CLUSTER FAILOVER` on the slot master's replica: the
//! master stops taking writes until the replica has every one, then the
//! replica is voted in; nothing acknowledged is lost) and `takeover`
//! (`CLUSTER FAILOVER TAKEOVER`: the replica takes the slots at once,
//! without its master's say or a vote). Both strike while a worker holds.
//!
//! A takeover on loopback right after a grant would rarely find the
//! replica behind: the fault first cuts the master off from its replica
//! (as `failover` does, for one TTL, so keys the replica has from before
//! the cut expire), so the grant reaches only the master: the lag a replica
//! has under load or across a slow link, made certain. A coordinated
//! failover would not run under that cut: it needs its master's answer.

use crate::cluster::BoxFuture;
use crate::fault::failover::{demotion, PROMOTION_TIMEOUT};
use crate::names::{skip_event, Fault};
use crate::package::{Package, Shape};
use crate::runner::{Env, FaultParams};
use crate::verify;
use checker::history::fault;
use serde_json::json;
use std::time::Duration;
use tokio::time::Instant;

pub struct ManualFailover;
pub struct Takeover;

/// Both apply to lockstorm's own Redis Cluster only: on a deployment, the
/// user's command does it (`--fault-cmd failover=…`).
fn cluster_only(shape: &Shape, name: &str) -> Result<(), String> {
    match (shape.cluster, shape.owned) {
        (true, true) => Ok(()),
        (true, false) => Err(format!(
            "asks a replica of a Redis Cluster lockstorm started to take over: on your deployment, give the command as --fault-cmd failover=\"redis-cli -h <replica> CLUSTER FAILOVER\" and run --nemesis failover (not {name})"
        )),
        (false, _) => Err(format!(
            "asks a Redis Cluster's replica to take its master's slots, and config {} is not a cluster: use --config cluster or cluster-fenced",
            shape.config
        )),
    }
}

impl Package for ManualFailover {
    fn acts_on_nodes(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        Fault::ManualFailover.name()
    }
    fn supports(&self, shape: &Shape) -> Result<(), String> {
        cluster_only(shape, self.name())
    }
    /// The vote and the old master hearing of it: well within the time a
    /// failed master's replica waits to be voted in.
    fn duration(&self, p: &FaultParams) -> Duration {
        p.promotion
    }
    fn slow(&self) -> bool {
        true
    }
    fn run<'a>(&'a self, env: &'a mut Env, _: &'a FaultParams) -> BoxFuture<'a, ()> {
        Box::pin(coordinated(env))
    }
}

impl Package for Takeover {
    fn acts_on_nodes(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        Fault::Takeover.name()
    }
    fn supports(&self, shape: &Shape) -> Result<(), String> {
        cluster_only(shape, self.name())
    }
    /// One TTL of cut before the grant, then the takeover and the old
    /// master hearing of it.
    fn duration(&self, p: &FaultParams) -> Duration {
        p.lock_ttl + p.promotion
    }
    fn slow(&self) -> bool {
        true
    }
    fn needs_firewall(&self) -> bool {
        true
    }
    fn run<'a>(&'a self, env: &'a mut Env, p: &'a FaultParams) -> BoxFuture<'a, ()> {
        Box::pin(takeover(env, p.lock_ttl))
    }
}

/// The slot's master and its replica, or a `skip-<fault>` saying why not.
async fn pair(env: &Env, fault: Fault) -> Option<(String, String)> {
    let master = env.cluster.primary().await.map(|n| n.name);
    let replica = master
        .as_ref()
        .and_then(|m| env.cluster.replicas_of(m).into_iter().next());
    match (master, replica) {
        (Some(m), Some(r)) => Some((m, r)),
        (master, _) => {
            let reason = match master {
                None => "no master of the lock's slot known",
                Some(_) => "the slot's master has no replica",
            };
            env.journal
                .record(&skip_event(fault.name()), json!({"reason": reason}), None);
            None
        }
    }
}

async fn coordinated(env: &mut Env) {
    let Some((master, replica)) = pair(env, Fault::ManualFailover).await else {
        return;
    };
    let Some(holder) = env.await_holder(ManualFailover.name()).await else {
        return;
    };
    let began = env.journal.now_ns();
    let asked = env.cluster.hand_over(&replica, false).await;
    let value = json!({"target": master, "replica": replica, "command": "CLUSTER FAILOVER", "holder": holder.process});
    let seen = promoted_by(env, &master, asked, "the manual failover").await;
    env.journal.record_at(
        began,
        &Fault::ManualFailover.start_event(),
        verify::attach(value, seen.clone()),
        Some(&master),
    );
    let old = demotion(env, &master).await;
    env.journal.record(
        &Fault::ManualFailover.stop_event(),
        json!({"target": master, "old_primary": old}),
        Some(&master),
    );
}

async fn takeover(env: &mut Env, lock_ttl: Duration) {
    let Some((master, replica)) = pair(env, Fault::Takeover).await else {
        return;
    };
    let began = env.journal.now_ns();
    let cut_from = vec![replica.clone()];
    if let Err(e) = env.cluster.partition(&master, &cut_from).await {
        let reason = json!({"reason": e.to_string()});
        env.journal
            .record(&skip_event(Takeover.name()), reason, Some(&master));
        return;
    }
    let seen = verify::cut(env, &verify::both_ways(&master, &cut_from)).await;
    let value = json!({"target": master, "cut-from": cut_from});
    env.journal.record_at(
        began,
        &Fault::Takeover.start_event(),
        verify::attach(value, seen),
        Some(&master),
    );
    env.sleep(lock_ttl).await;
    // A lock taken now lives on the master alone.
    let holder = env.await_holder(Takeover.name()).await;
    let ended = env.stopping();
    let mut stop = json!({"target": master});
    if ended {
        stop[fault::INTERRUPTED] = json!("the run ended before the takeover was asked for");
    } else if holder.is_none() {
        // The cut alone is no takeover: the run must not pass for one.
        let why = "no worker held the lock after the cut: the replica was never told to take over";
        stop = verify::attach(stop, Err(why.into()));
    }
    if holder.is_some() && !ended {
        let asked_at = env.journal.now_ns();
        let asked = env.cluster.hand_over(&replica, true).await;
        let value = json!({"target": master, "replica": replica, "command": "CLUSTER FAILOVER TAKEOVER", "holder": holder.map(|h| h.process)});
        let seen = promoted_by(env, &master, asked, "the takeover").await;
        env.journal.record_at(
            asked_at,
            fault::TAKEN_OVER,
            verify::attach(value, seen),
            Some(&replica),
        );
    }
    // The lag was the cut's to make, and the new master has the slot: the
    // link back lets the old master hear of it from the new one at once
    // (the other masters' word reached it within 0.3 s in some runs and not
    // in 13 s in others) and resync from it, without the key.
    let healed = env.cluster.heal().await;
    stop["healed"] = json!(healed.is_ok());
    if let Err(e) = &healed {
        env.journal
            .record(fault::HEAL_FAILED, json!({"error": e.to_string()}), None);
    }
    if holder.is_some() && !ended && healed.is_ok() {
        stop["old_primary"] = demotion(env, &master).await;
    }
    env.journal
        .record(&Fault::Takeover.stop_event(), stop, Some(&master));
}

/// Waits for the replica asked (`asked`) to be the slot's master, records
/// the promotion (`since` begins the story's sentence), and returns the
/// evidence: the new master, or why the failover was not seen.
async fn promoted_by(
    env: &mut Env,
    master: &str,
    asked: Result<(), String>,
    since: &str,
) -> Result<serde_json::Value, String> {
    asked?;
    let began = Instant::now();
    let promoted = tokio::select! {
        p = env.cluster.await_promotion(master, PROMOTION_TIMEOUT) => p,
        _ = env.stop.wait_for(|s| *s) => None,
    };
    let after_ms = began.elapsed().as_millis() as u64;
    let new = promoted.ok_or_else(|| {
        format!("no node claimed the slot of {master} within {after_ms} ms of {since}")
    })?;
    let value =
        json!({"promoted": new.node, "replaces": master, "after_ms": after_ms, "since": since});
    let evidence = json!({"slot master": new.node, "epoch": new.epoch});
    env.journal
        .record(fault::PROMOTED, new.with_epoch(value), Some(&new.node));
    Ok(evidence)
}
