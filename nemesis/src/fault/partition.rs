//! `partition`: cut workers off from lock nodes, then heal. `--targets`
//! chooses which nodes every worker loses (one, a minority, a majority, all),
//! or `ring`: Jepsen's majorities ring, where every worker still reaches a
//! majority, but each a different one.
//!
//! The cut is made in the fault proxy, which every connection of a worker
//! goes through, a client adapter's included: every byte either way on a
//! cut link is dropped, as iptables' `DROP` would, and a connection that
//! lived through the cut is reset when it heals (its bytes are gone). The
//! `partition+clock` scenario cuts the same way.
//!
//! On a consensus cluster (etcd's members) the nodes talk to each other,
//! and a partition is Jepsen's: the members `--targets` picks are cut off
//! from the rest with iptables (`net::member_cut_rules`), the workers still
//! reach every member. It is seen to act when each member on the smaller
//! side says it has no leader.
//!
//! On a Redis Cluster of lockstorm's the nodes gossip and vote over their
//! bus: the slot's master is cut off from every other node (client ports
//! and bus, iptables), the workers still reach it. The majority votes its
//! replica in after `cluster-node-timeout`, while the master, alone, goes
//! on granting to the clients it still has until its own timeout tells it
//! it is in a minority. Seen to act when probes across the cut are refused.

use crate::cluster::BoxFuture;
use crate::cluster::Targets;
use crate::names::{skip_event, Fault};
use crate::package::{needs_lock_node, Package, Shape};
use crate::runner::{Env, FaultParams};
use crate::verify;
use serde_json::json;
use std::time::Duration;

pub struct Partition;

impl Package for Partition {
    fn name(&self) -> &'static str {
        Fault::Partition.name()
    }
    fn supports(&self, shape: &Shape) -> Result<(), String> {
        needs_lock_node(shape)
    }
    fn duration(&self, p: &FaultParams) -> Duration {
        p.hold
    }
    fn slow(&self) -> bool {
        true
    }
    fn needs_proxy(&self) -> bool {
        true
    }
    fn cuts_members(&self) -> bool {
        true
    }
    fn run<'a>(&'a self, env: &'a mut Env, p: &'a FaultParams) -> BoxFuture<'a, ()> {
        if env.cluster.votes() {
            return Box::pin(cut_master(env, p.hold));
        }
        match env.cluster.consensus() {
            true => Box::pin(cut_members(env, p.targets, p.hold)),
            false => Box::pin(cut(env, p.targets, p.hold)),
        }
    }
}

/// How long a member cut off from the majority may take to say it has no
/// leader: etcd's election timeout is 1 s; a busy host stretches it.
const LEADERLESS_WITHIN: Duration = Duration::from_secs(10);

/// Cuts the members `targets` picks off from the rest, holds, heals.
async fn cut_members(env: &mut Env, targets: Targets, hold: Duration) {
    let fault = Partition.name();
    let members = env.cluster.lock_nodes();
    let (side, rest) = sides(targets, &members);
    if rest.is_empty() {
        let reason = format!(
            "--targets {} leaves no member on the other side",
            targets.name()
        );
        env.journal
            .record(&skip_event(fault), json!({"reason": reason}), None);
        return;
    }
    let began = env.journal.now_ns();
    let mut failed = None;
    for a in &side {
        if let Err(e) = env.cluster.partition(a, &rest).await {
            failed = Some(e);
            break;
        }
    }
    if let Some(e) = failed {
        return skip_healed(env, e, None).await;
    }
    let cut = json!({"cut": [&side, &rest], "by": "iptables", "targets": targets.name()});
    let smaller = if side.len() <= rest.len() {
        &side
    } else {
        &rest
    };
    let seen = verify::leaderless(env, smaller, LEADERLESS_WITHIN).await;
    env.journal.record_at(
        began,
        &Fault::Partition.start_event(),
        verify::attach(cut.clone(), seen),
        None,
    );
    env.sleep(hold).await;
    // A cut that would not go leaves the run's partition in place: unknown.
    let healed = env.cluster.heal().await.map(|()| json!({"flushed": true}));
    let value = verify::attach(cut, healed.map_err(|e| e.to_string()));
    env.journal
        .record(&Fault::Partition.stop_event(), value, None);
}

/// Cuts the lock slot's master off from the cluster's other nodes, holds
/// (recording the promotion of its replica if the majority votes one in),
/// heals.
async fn cut_master(env: &mut Env, hold: Duration) {
    let fault = Partition.name();
    let Some(master) = env.cluster.primary().await else {
        let reason = json!({"reason": "no master of the lock's slot known"});
        env.journal.record(&skip_event(fault), reason, None);
        return;
    };
    let name = master.name.clone();
    let rest: Vec<String> = env
        .cluster
        .lock_nodes()
        .into_iter()
        .filter(|n| *n != name)
        .collect();
    let began = env.journal.now_ns();
    if let Err(e) = env.cluster.partition(&name, &rest).await {
        return skip_healed(env, e, Some(&name)).await;
    }
    let seen = verify::cut(env, &verify::both_ways(&name, &rest)).await;
    let cut = json!({"cut": [[&name], &rest], "by": "iptables", "target": name});
    env.journal.record_at(
        began,
        &Fault::Partition.start_event(),
        verify::attach(cut.clone(), seen),
        Some(&name),
    );
    let since = std::time::Instant::now();
    super::kill::promotion(env, &name, since, hold, "the cut").await;
    env.sleep(hold.saturating_sub(since.elapsed())).await;
    let healed = env.cluster.heal().await.map(|()| json!({"flushed": true}));
    let value = verify::attach(cut, healed.map_err(|e| e.to_string()));
    env.journal
        .record(&Fault::Partition.stop_event(), value, Some(&name));
}

/// A cut that could not be made: what of it was made goes, and the fault
/// is skipped, saying why.
async fn skip_healed(env: &mut Env, e: std::io::Error, node: Option<&str>) {
    let healed = env
        .cluster
        .heal()
        .await
        .err()
        .map(|h| format!("; healing: {h}"));
    let reason = format!("{e}{}", healed.unwrap_or_default());
    env.journal.record(
        &skip_event(Partition.name()),
        json!({"reason": reason}),
        node,
    );
}

/// The members `targets` picks, and the rest (pure).
pub fn sides(targets: Targets, members: &[String]) -> (Vec<String>, Vec<String>) {
    let side = targets.pick(members);
    let rest = members
        .iter()
        .filter(|m| !side.contains(m))
        .cloned()
        .collect();
    (side, rest)
}

async fn cut(env: &mut Env, targets: Targets, hold: Duration) {
    let nodes = env.cluster.lock_nodes();
    let links = shape(targets, env.workers.len(), &nodes);
    let extra = json!({"targets": targets.name()});
    let Some(net) = start(env, Partition.name(), &links, extra).await else {
        return;
    };
    env.sleep(hold).await;
    heal(env, &net, &links);
}

/// Cuts `links` in the fault proxy and records `start-partition` with the
/// evidence (`extra`'s fields added to its value); `None`, with a
/// `skip-<fault>` note, when the run has no proxy or the links are unknown.
pub(crate) async fn start(
    env: &mut Env,
    fault: &str,
    links: &[(usize, String)],
    extra: serde_json::Value,
) -> Option<proxy::Fabric> {
    let Some(net) = env.net.clone() else {
        let reason = "this run has no fault proxy";
        env.journal
            .record(&skip_event(fault), json!({"reason": reason}), None);
        return None;
    };
    let began = env.journal.now_ns();
    if let Err(e) = net.cut(links) {
        env.journal
            .record(&skip_event(fault), json!({"reason": e}), None);
        return None;
    }
    let mut value = json!({"cut": links, "by": "proxy"});
    if let (Some(v), serde_json::Value::Object(more)) = (value.as_object_mut(), extra) {
        v.extend(more);
    }
    let seen = verify::cut_in_proxy(env, &net, links).await;
    let start = verify::attach(value, seen);
    env.journal
        .record_at(began, &Fault::Partition.start_event(), start, None);
    Some(net)
}

/// Heals every cut and records `stop-partition` with the bytes it dropped.
pub(crate) fn heal(env: &Env, net: &proxy::Fabric, links: &[(usize, String)]) {
    let report = net.heal();
    let value = json!({"cut": links, "by": "proxy", "dropped_bytes": report.dropped_bytes});
    env.journal
        .record(&Fault::Partition.stop_event(), value, None);
}

/// The (worker, node) links to cut (pure).
pub fn shape(targets: Targets, workers: usize, nodes: &[String]) -> Vec<(usize, String)> {
    match targets {
        Targets::Ring => {
            let n = nodes.len();
            let keep = n / 2 + 1;
            (0..workers)
                .flat_map(|w| {
                    // Worker w keeps nodes w, w+1, … (a majority) and loses the rest.
                    (keep..n).map(move |k| (w, nodes[(w + k) % n].clone()))
                })
                .collect()
        }
        _ => {
            let lost = targets.pick(nodes);
            (0..workers)
                .flat_map(|w| lost.iter().map(move |n| (w, n.clone())))
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_majorities_ring_leaves_every_worker_a_different_majority() {
        let nodes: Vec<String> = (1..=5).map(|n| format!("n{n}")).collect();
        let cut = shape(Targets::Ring, 5, &nodes);
        let mut seen = std::collections::HashSet::new();
        for w in 0..5 {
            let lost: Vec<&String> = cut
                .iter()
                .filter(|(x, _)| *x == w)
                .map(|(_, n)| n)
                .collect();
            assert_eq!(lost.len(), 2, "worker {w} keeps a majority of 3");
            let kept: Vec<&String> = nodes.iter().filter(|n| !lost.contains(n)).collect();
            assert!(seen.insert(kept), "two workers keep the same majority");
        }
    }

    #[test]
    fn members_are_cut_into_the_picked_ones_and_the_rest() {
        let members: Vec<String> = (1..=3).map(|n| format!("n{n}")).collect();
        let (side, rest) = sides(Targets::Majority, &members);
        assert_eq!(
            (side, rest),
            (vec!["n1".into(), "n2".into()], vec!["n3".into()])
        );
        let (side, rest) = sides(Targets::One, &members);
        assert_eq!((side.len(), rest.len()), (1, 2));
        assert!(sides(Targets::All, &members).1.is_empty(), "no other side");
    }

    #[test]
    fn a_minority_partition_cuts_every_worker_from_the_same_nodes() {
        let nodes: Vec<String> = (1..=5).map(|n| format!("n{n}")).collect();
        let cut = shape(Targets::Minority, 2, &nodes);
        assert_eq!(cut.len(), 4);
        assert!(cut.iter().all(|(_, n)| n == "n1" || n == "n2"));
    }
}
