//! Each fault shows that it took effect before the run may rely on it: a
//! paused process is seen stopped, a killed node's pid is gone and its
//! restart answers with a new run id, a moved clock is read back, a cut link
//! refuses a probe while an uncut one connects. The evidence, or why there
//! is none, goes into the fault's event (the checker turns the latter
//! into an unknown verdict).

use crate::cluster::{NodeRef, Source};
use crate::process;
use crate::runner::Env;
use checker::history::fault::{UNVERIFIED, VERIFIED};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::task::JoinSet;

/// How long a stopped process may take to show state `T`.
const STOP_SEEN_WITHIN: Duration = Duration::from_secs(1);
/// How far a node's clock, read back through `TIME`, may be from the offset
/// set, beyond the read's own round trip (the shim applies it at once).
const CLOCK_TOLERANCE_NS: i64 = 250_000_000;
/// A probe across a cut link must not connect within this; loopback
/// connects in microseconds.
const CUT_PROBE: Duration = Duration::from_millis(300);
/// An uncut probe may take this long on a loaded host before it counts as failed.
const OPEN_PROBE: Duration = Duration::from_secs(2);

/// Adds `verified: evidence` or `unverified: reason` to an event's value.
pub(crate) fn attach(mut value: Value, outcome: Result<Value, String>) -> Value {
    if let Value::Object(map) = &mut value {
        match outcome {
            Ok(evidence) => map.insert(VERIFIED.into(), evidence),
            Err(reason) => map.insert(UNVERIFIED.into(), Value::String(reason)),
        };
    }
    value
}

/// Waits until `pid` and each of `children` frozen with it show state `T`:
/// a node whose children serve on their own is paused only once they are.
/// A child gone meanwhile (a backend whose session ended) serves nothing.
pub(crate) async fn tree_stopped(pid: u32, children: &[u32]) -> Result<Value, String> {
    let mut evidence = stopped(pid).await?;
    if children.is_empty() {
        return Ok(evidence);
    }
    let deadline = tokio::time::Instant::now() + STOP_SEEN_WITHIN;
    loop {
        let running: Vec<(u32, char)> = children
            .iter()
            .filter_map(|&kid| process::state(kid).map(|s| (kid, s)))
            .filter(|&(_, s)| s != 'T' && s != 'Z')
            .collect();
        if running.is_empty() {
            evidence["children"] = json!(children);
            return Ok(evidence);
        }
        if tokio::time::Instant::now() > deadline {
            let (kid, state) = running[0];
            return Err(format!(
                "pid {pid} stopped, but its child {kid} was in state {state} {STOP_SEEN_WITHIN:?} after SIGSTOP, not T"
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until `pid` shows state `T` (stopped).
pub(crate) async fn stopped(pid: u32) -> Result<Value, String> {
    let deadline = tokio::time::Instant::now() + STOP_SEEN_WITHIN;
    loop {
        let state = process::state(pid);
        if state == Some('T') {
            return Ok(json!({"pid": pid, "state": "T"}));
        }
        if tokio::time::Instant::now() > deadline {
            let seen = state.map_or("gone".to_string(), |c| c.to_string());
            return Err(format!(
                "pid {pid} in state {seen} {STOP_SEEN_WITHIN:?} after SIGSTOP, not T"
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until every process of the group `leader` leads on `host` shows
/// state `T`; the connection's round trips count in the time allowed.
pub(crate) async fn group_stopped_on(
    host: &dyn crate::cluster::Host,
    leader: u32,
) -> Result<Value, String> {
    let deadline = tokio::time::Instant::now() + STOP_SEEN_WITHIN + STOP_SEEN_WITHIN;
    loop {
        let states = host.group_states(leader).await.map_err(|e| e.to_string())?;
        let running = states.iter().find(|(_, s)| *s != 'T' && *s != 'Z');
        match running {
            None if !states.is_empty() => {
                let pids: Vec<u32> = states.iter().map(|(p, _)| *p).collect();
                return Ok(
                    json!({"pid": leader, "state": "T", "group": pids, "host": host.name()}),
                );
            }
            _ if tokio::time::Instant::now() > deadline => {
                let seen =
                    running.map_or("gone".to_string(), |(p, s)| format!("pid {p} in state {s}"));
                return Err(format!(
                    "the group of pid {leader} on {}: {seen} after SIGSTOP, not T",
                    host.name()
                ));
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// [`gone`], asking each killed node's host about the nodes on other
/// machines (`--nodes`).
pub(crate) async fn gone_anywhere(env: &Env, killed: &[NodeRef]) -> Result<Value, String> {
    let mut here = Vec::new();
    let mut there = Vec::new();
    for node in killed {
        match env.cluster.host_of(&node.name) {
            Some(host) if node.pid != 0 => {
                let alive = host.states(&[node.pid]).await.map_err(|e| e.to_string())?;
                if !alive.is_empty() {
                    return Err(format!(
                        "{} pid {} still exists on {} after SIGKILL",
                        node.name,
                        node.pid,
                        host.name()
                    ));
                }
                there.push(json!({"target": node.name, "pid": node.pid, "run_id": node.run_id, "host": host.name()}));
            }
            _ => here.push(node.clone()),
        }
    }
    if here.is_empty() && there.is_empty() {
        return Err("no node was killed".into());
    }
    let mut evidence = match here.is_empty() {
        true => json!({"gone": []}),
        false => gone(&here)?,
    };
    if let Some(list) = evidence["gone"].as_array_mut() {
        list.extend(there);
    }
    Ok(evidence)
}

/// A killed (and reaped) node's pid no longer exists.
pub(crate) fn gone(killed: &[NodeRef]) -> Result<Value, String> {
    if killed.is_empty() {
        return Err("no node was killed".into());
    }
    // pid 0: a deployment's node, killed by the user's command; its restart
    // with a new run id is the evidence.
    let ours = killed.iter().filter(|n| n.pid != 0);
    if let Some(alive) = ours.clone().find(|n| process::state(n.pid).is_some()) {
        return Err(format!(
            "{} pid {} still exists after SIGKILL",
            alive.name, alive.pid
        ));
    }
    let pids: Vec<Value> = killed
        .iter()
        .map(|n| json!({"target": n.name, "pid": n.pid, "run_id": n.run_id}))
        .collect();
    Ok(json!({"gone": pids}))
}

/// A restarted node is a new process with a new run id (the cluster has
/// already checked that it is the child it started). A deployment's node
/// (pid 0: not ours) shows it by its run id alone: a container's server is
/// often pid 1 every time.
pub(crate) fn restarted(old: &NodeRef, new: &NodeRef) -> Result<Value, String> {
    let same_pid = new.pid != 0 && new.pid == old.pid;
    if same_pid || new.run_id.is_empty() || new.run_id == old.run_id {
        return Err(format!(
            "{} restarted as pid {} run_id {:?}, not a new process (was pid {} run_id {:?})",
            new.name, new.pid, new.run_id, old.pid, old.run_id
        ));
    }
    Ok(
        json!({"old_pid": old.pid, "new_pid": new.pid, "old_run_id": old.run_id, "new_run_id": new.run_id}),
    )
}

/// Whether an offset read back is the one set: pure.
fn clock_matches(observed_ns: i64, want_ns: i64, uncertainty_ns: i64) -> bool {
    (observed_ns - want_ns).abs() <= CLOCK_TOLERANCE_NS + uncertainty_ns
}

/// Reads each node's clock back (a Redis node's `TIME`, an etcd member's
/// `Date`) and checks it is `offset_ns` from real time.
pub(crate) async fn clocks(env: &Env, nodes: &[String], offset_ns: i64) -> Result<Value, String> {
    let mut seen = serde_json::Map::new();
    for node in nodes {
        let reading = env.cluster.wall_clock(node).await?;
        let (before, after) = (reading.before_ns, reading.after_ns);
        let observed = reading.node_ns - before / 2 - after / 2;
        let uncertainty = (after - before) / 2;
        if !clock_matches(observed, offset_ns, uncertainty) {
            return Err(format!(
                "{node}: its {} is {} ms from real time, not {} ms (is its time shim loaded, or its clock served?)",
                reading.via,
                observed / 1_000_000,
                offset_ns / 1_000_000
            ));
        }
        seen.insert(node.clone(), json!(observed / 1_000_000));
    }
    Ok(json!({"observed_offset_ms": seen}))
}

/// Waits until every one of `members` says it has no leader: cut off from
/// the majority, each has lost it (within `within`).
pub(crate) async fn leaderless(
    env: &Env,
    members: &[String],
    within: Duration,
) -> Result<Value, String> {
    let started = tokio::time::Instant::now();
    let deadline = started + within;
    loop {
        let mut led = Vec::new();
        for m in members {
            match env.cluster.has_leader(m).await {
                Ok(false) => {}
                Ok(true) => led.push(format!("{m} still has a leader")),
                Err(e) => led.push(format!("{m} could not be asked: {e}")),
            }
        }
        if led.is_empty() {
            let ms = started.elapsed().as_millis() as u64;
            return Ok(json!({"leaderless": members, "after_ms": ms}));
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("{} {within:?} into the cut", led.join(", ")));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Probes every cut link (each must fail) and, from the harness, every node
/// behind one (each must connect, so the node was up and the cut did it).
/// The probes that show `a` cut from each of `others`, both directions.
pub(crate) fn both_ways(a: &str, others: &[String]) -> Vec<(Source, String)> {
    others
        .iter()
        .flat_map(|o| {
            [
                (Source::Node(o.clone()), a.to_string()),
                (Source::Node(a.to_string()), o.clone()),
            ]
        })
        .collect()
}

pub(crate) async fn cut(env: &Env, links: &[(Source, String)]) -> Result<Value, String> {
    let mut probes = JoinSet::new();
    let mut nodes: Vec<&String> = links.iter().map(|(_, n)| n).collect();
    nodes.sort();
    nodes.dedup();
    let open = nodes
        .into_iter()
        .map(|n| (Source::Harness, n.clone(), OPEN_PROBE));
    let closed = links.iter().map(|(s, n)| (s.clone(), n.clone(), CUT_PROBE));
    for (from, node, timeout) in closed.chain(open) {
        let cluster = env.cluster.clone();
        probes.spawn(async move {
            let connected = cluster.connects(from.clone(), &node, timeout).await;
            (from, node, timeout == CUT_PROBE, connected)
        });
    }
    let (mut refused, mut reachable) = (0, 0);
    while let Some(probe) = probes.join_next().await {
        let (from, node, cut, connected) = probe.map_err(|e| format!("probe task: {e}"))?;
        match (cut, connected?) {
            (true, false) => refused += 1,
            (false, true) => reachable += 1,
            (true, true) => {
                return Err(format!("{from:?} still connects to {node} across the cut"))
            }
            (false, false) => {
                return Err(format!(
                    "{node} does not accept the harness's probe: down, not cut"
                ))
            }
        }
    }
    Ok(json!({"cut_links_refused": refused, "nodes_reachable_otherwise": reachable}))
}

/// A cut made in the proxy: a `PING` through each cut link's proxy goes
/// unanswered, and, from the harness, every node behind one answers a
/// connection (it was up: the cut did it).
pub(crate) async fn cut_in_proxy(
    env: &Env,
    net: &proxy::Fabric,
    links: &[(usize, String)],
) -> Result<Value, String> {
    let mut probes = JoinSet::new();
    for (w, node) in links.iter().cloned() {
        let net = net.clone();
        probes.spawn(async move { (w, node.clone(), net.answers(w, &node, CUT_PROBE).await) });
    }
    let mut silent = 0;
    while let Some(probe) = probes.join_next().await {
        let (w, node, answered) = probe.map_err(|e| format!("probe task: {e}"))?;
        if answered? {
            return Err(format!("worker {w} still hears {node} across the cut"));
        }
        silent += 1;
    }
    let mut nodes: Vec<&String> = links.iter().map(|(_, n)| n).collect();
    nodes.sort();
    nodes.dedup();
    for node in &nodes {
        if !env
            .cluster
            .connects(Source::Harness, node, OPEN_PROBE)
            .await?
        {
            return Err(format!(
                "{node} does not accept the harness's probe: down, not cut"
            ));
        }
    }
    Ok(json!({"cut_links_silent": silent, "nodes_reachable_otherwise": nodes.len()}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(pid: u32, run_id: &str) -> NodeRef {
        NodeRef {
            name: "n1".into(),
            pid,
            run_id: run_id.into(),
        }
    }

    #[test]
    fn a_restart_must_be_a_new_process_with_a_new_run_id() {
        let old = node(10, "aaa");
        assert!(restarted(&old, &node(11, "bbb")).is_ok());
        assert!(restarted(&old, &node(11, "aaa")).is_err());
        assert!(restarted(&old, &node(10, "bbb")).is_err());
        assert!(restarted(&old, &node(11, "")).is_err());
    }

    #[test]
    fn a_clock_read_back_must_be_near_the_offset_set() {
        let s = 1_000_000_000;
        assert!(clock_matches(30 * s + 1_000_000, 30 * s, 0));
        assert!(!clock_matches(0, 30 * s, 1_000_000));
        assert!(clock_matches(0, 0, 0));
        assert!(!clock_matches(-30 * s, 0, 0));
    }

    #[test]
    fn evidence_or_reason_lands_in_the_value() {
        let v = attach(json!({"target": "n1"}), Ok(json!({"pid": 3})));
        assert_eq!(v[VERIFIED]["pid"], 3);
        let v = attach(json!({"target": "n1"}), Err("why".into()));
        assert_eq!(v[UNVERIFIED], "why");
        assert!(v.get(VERIFIED).is_none());
    }
}
