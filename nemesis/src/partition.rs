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
    fn run<'a>(&'a self, env: &'a mut Env, p: &'a FaultParams) -> BoxFuture<'a, ()> {
        Box::pin(cut(env, p.targets, p.hold))
    }
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
    fn a_minority_partition_cuts_every_worker_from_the_same_nodes() {
        let nodes: Vec<String> = (1..=5).map(|n| format!("n{n}")).collect();
        let cut = shape(Targets::Minority, 2, &nodes);
        assert_eq!(cut.len(), 4);
        assert!(cut.iter().all(|(_, n)| n == "n1" || n == "n2"));
    }
}
