//! Redis Cluster: forming lockstorm's own cluster once its nodes run, and
//! asking its nodes who is master of which slots (read by
//! [`workloads::cluster_view`]).
//!
//! The cluster is formed command by command (`CLUSTER ADDSLOTSRANGE`,
//! `MEET`, `REPLICATE`), not by `redis-cli --cluster create`, whose
//! replica placement shuffles: here master `i` of `m` takes the i-th
//! share of the slots and node `m + i` is its replica, on every run.

use crate::error::{Error, Result};
use crate::node::{connect, RedisNode};
use crate::server::Server;
use std::path::PathBuf;
use std::time::{Duration, Instant};
#[cfg(doc)]
use workloads::cluster_view::agreed_master;
use workloads::cluster_view::{parse_nodes, partner, share, Seen};

/// How long a cluster may take to agree once formed.
const AGREE_WITHIN: Duration = Duration::from_secs(30);

/// The slot `key` hashes to, as the node at `addr` computes it.
pub fn key_slot(addr: &str, key: &str) -> redis::RedisResult<u32> {
    let mut con = connect(addr)?;
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut con)
}

/// Asks the replica at `addr` to take its master's slots: `CLUSTER
/// FAILOVER` (the master stops taking writes until the replica has all of
/// them, then the replica is voted in) or, with `takeover`, `CLUSTER
/// FAILOVER TAKEOVER` (at once: no master, no vote). The reply only says
/// the replica began; the new claim in `CLUSTER NODES` says it is done.
pub fn failover(addr: &str, takeover: bool) -> std::result::Result<(), String> {
    let mut con = connect(addr).map_err(|e| format!("{addr}: {e}"))?;
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("FAILOVER");
    if takeover {
        cmd.arg("TAKEOVER");
    }
    cmd.query::<()>(&mut con)
        .map_err(|e| format!("{addr} refused CLUSTER FAILOVER: {e}"))
}

/// Each answering node's view of the nodes at `addrs` (`CLUSTER NODES`),
/// one per node: what [`agreed_master`] counts (a node that is down adds
/// nothing).
pub fn look(addrs: &[String]) -> Vec<Vec<Seen>> {
    addrs
        .iter()
        .filter_map(|addr| {
            let mut con = connect(addr).ok()?;
            redis::cmd("CLUSTER")
                .arg("NODES")
                .query::<String>(&mut con)
                .ok()
        })
        .map(|text| parse_nodes(&text))
        .collect()
}

/// Makes `nodes` one cluster: the first `masters` share the slots, each
/// later node replicates master `its index − masters`; then waits until
/// every node says `cluster_state:ok`, knows every other, and every
/// replica's link to its master is up.
pub async fn form(nodes: &[&RedisNode], masters: usize) -> Result<()> {
    let plan: Vec<(String, String, u16)> = nodes
        .iter()
        .map(|n| (n.name().to_string(), n.addr(), n.bus_port()))
        .collect();
    let first_log = nodes[0].log();
    let formed = tokio::task::spawn_blocking(move || form_blocking(&plan, masters)).await;
    match formed {
        Ok(Ok(())) => {}
        Ok(Err((name, message))) => return Err(node_error(&name, message, first_log)),
        Err(e) => {
            return Err(node_error(
                "n1",
                format!("forming the cluster: {e}"),
                first_log,
            ))
        }
    }
    let deadline = Instant::now() + AGREE_WITHIN;
    for node in nodes {
        let count = nodes.len();
        loop {
            let addr = node.addr();
            let agreed = tokio::task::spawn_blocking(move || agrees(&addr, count))
                .await
                .unwrap_or_else(|e| Err(e.to_string()));
            match agreed {
                Ok(()) => break,
                Err(why) if Instant::now() > deadline => {
                    let message = format!("the cluster not agreed within {AGREE_WITHIN:?}: {why}");
                    return Err(node_error(node.name(), message, node.log()));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
    Ok(())
}

fn node_error(name: &str, message: String, log: PathBuf) -> Error {
    Error::Node {
        name: name.to_string(),
        message,
        log,
    }
}

/// The forming commands, in turn; a failure names its node.
fn form_blocking(plan: &[(String, String, u16)], masters: usize) -> Result<(), (String, String)> {
    let ask = |at: usize, cmd: &mut redis::Cmd| -> Result<redis::Value, (String, String)> {
        let (name, addr, _) = &plan[at];
        let failed = |e: redis::RedisError| (name.clone(), format!("{cmd:?}: {e}"));
        let mut con = connect(addr).map_err(failed)?;
        cmd.query(&mut con).map_err(failed)
    };
    let mut ids = Vec::new();
    for (at, (name, _, _)) in plan.iter().enumerate() {
        let id = ask(at, redis::cmd("CLUSTER").arg("MYID"))?;
        ids.push(redis::from_redis_value::<String>(id).map_err(|e| (name.clone(), e.to_string()))?);
    }
    // A config epoch of its own for each node, before they meet, as
    // `redis-cli --cluster create` gives: with every master at 0 the
    // cluster's collision rule spreads them at random, and a replica's
    // takeover could tie its master's epoch and not take the slots.
    for (at, _) in plan.iter().enumerate() {
        ask(
            at,
            redis::cmd("CLUSTER").arg("SET-CONFIG-EPOCH").arg(at + 1),
        )?;
    }
    for i in 0..masters {
        let (from, to) = share(i, masters);
        ask(
            i,
            redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(from).arg(to),
        )?;
    }
    for (_, addr, bus) in &plan[1..] {
        let (ip, port) = addr.split_once(':').expect("an ip:port address");
        ask(
            0,
            redis::cmd("CLUSTER").arg("MEET").arg(ip).arg(port).arg(bus),
        )?;
    }
    // A node replicates a master only once it knows it: gossip first.
    let deadline = Instant::now() + AGREE_WITHIN;
    for at in masters..plan.len() {
        let Some(master) = partner(at, masters).map(|m| &ids[m]) else {
            continue;
        };
        loop {
            match ask(at, redis::cmd("CLUSTER").arg("REPLICATE").arg(master)) {
                Ok(_) => break,
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
    Ok(())
}

/// Whether the node at `addr` sees the whole cluster working: why not.
fn agrees(addr: &str, count: usize) -> Result<(), String> {
    let mut con = connect(addr).map_err(|e| e.to_string())?;
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut con)
        .map_err(|e| e.to_string())?;
    let field = |k: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(':'))
            .map(str::trim)
            .unwrap_or("?")
            .to_string()
    };
    let (state, known) = (field("cluster_state"), field("cluster_known_nodes"));
    if state != "ok" || known != count.to_string() {
        return Err(format!(
            "cluster_state:{state}, cluster_known_nodes:{known} of {count}"
        ));
    }
    let replication: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut con)
        .map_err(|e| e.to_string())?;
    if replication.contains("role:slave") && !replication.contains("master_link_status:up") {
        return Err("a replica whose link to its master is not up".into());
    }
    Ok(())
}
