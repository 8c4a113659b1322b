//! Redis Cluster: forming lockstorm's own cluster once its nodes run, and
//! reading `CLUSTER NODES`, which says who is master of which slots and
//! under which epoch (what a failover changes, and what shows that it did).
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

/// A cluster's hash slots.
pub const SLOTS: u32 = 16384;

/// How long a cluster may take to agree once formed.
const AGREE_WITHIN: Duration = Duration::from_secs(30);

/// One node, as a line of `CLUSTER NODES` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub id: String,
    /// `ip:port` (without the bus port).
    pub addr: String,
    pub master: bool,
    /// Flagged `fail` by the cluster (not only `fail?`, one node's doubt).
    pub failed: bool,
    /// The master it replicates, for a replica.
    pub master_id: Option<String>,
    pub config_epoch: u64,
    /// The slot ranges it serves, inclusive.
    pub slots: Vec<(u32, u32)>,
}

/// Every line of a `CLUSTER NODES` reply; lines it cannot read are left
/// out (a slot being migrated, `[…]`, is not a slot served).
pub fn parse_nodes(text: &str) -> Vec<Seen> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Seen> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [id, addr, flags, master, _, _, epoch, _, slots @ ..] = fields.as_slice() else {
        return None;
    };
    let flags: Vec<&str> = flags.split(',').collect();
    let range = |s: &&str| -> Option<(u32, u32)> {
        match s.split_once('-') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => s.parse().ok().map(|a| (a, a)),
        }
    };
    Some(Seen {
        id: id.to_string(),
        addr: addr.split('@').next()?.to_string(),
        master: flags.contains(&"master"),
        failed: flags.contains(&"fail"),
        master_id: (*master != "-").then(|| master.to_string()),
        config_epoch: epoch.parse().ok()?,
        slots: slots
            .iter()
            .filter(|s| !s.starts_with('['))
            .filter_map(range)
            .collect(),
    })
}

/// Who serves `slot` in a view: the master that claims it under the
/// highest epoch (a node that has not yet heard of a failover still
/// shows the old master, under the older epoch).
pub fn master_of(view: &[Seen], slot: u32) -> Option<&Seen> {
    view.iter()
        .filter(|n| n.master && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
        .max_by_key(|n| n.config_epoch)
}

/// The slot `key` hashes to, as the node at `addr` computes it.
pub fn key_slot(addr: &str, key: &str) -> redis::RedisResult<u32> {
    let mut con = connect(addr)?;
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut con)
}

/// Every view of the nodes at `addrs` that answer, one after another:
/// what [`master_of`] reads (a node that is down adds nothing).
pub fn look(addrs: &[String]) -> Vec<Seen> {
    addrs
        .iter()
        .filter_map(|addr| {
            let mut con = connect(addr).ok()?;
            redis::cmd("CLUSTER")
                .arg("NODES")
                .query::<String>(&mut con)
                .ok()
        })
        .flat_map(|text| parse_nodes(&text))
        .collect()
}

/// Master `i`'s share of the slots, of `masters`.
pub fn share(i: usize, masters: usize) -> (u32, u32) {
    let at = |i: usize| (SLOTS as usize * i / masters) as u32;
    (at(i), at(i + 1) - 1)
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
        let master = &ids[(at - masters) % masters];
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

#[cfg(test)]
mod tests {
    use super::*;

    const VIEW: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host.example replica e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master - 0 1426238318243 3 connected 10923-16383
6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005 master - 0 1426238316232 7 connected 0-5459 5460 [5461->-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master,fail - 0 0 1 connected 0-5460
";

    #[test]
    fn a_view_names_each_slots_master_under_the_highest_epoch() {
        let view = parse_nodes(VIEW);
        assert_eq!(view.len(), 5);
        assert_eq!(
            view[0].master_id.as_deref(),
            Some("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca")
        );
        assert_eq!(view[0].addr, "127.0.0.1:30004");
        assert!(view[4].failed && view[4].master);
        // The promoted replica (epoch 7) and the failed master (epoch 1)
        // both claim slot 100: the newer claim wins.
        assert_eq!(master_of(&view, 100).unwrap().addr, "127.0.0.1:30005");
        assert_eq!(master_of(&view, 5460).unwrap().addr, "127.0.0.1:30005");
        assert_eq!(
            view[3].slots,
            vec![(0, 5459), (5460, 5460)],
            "a migrating slot is not served"
        );
        assert_eq!(master_of(&view, 16383).unwrap().addr, "127.0.0.1:30003");
        assert!(master_of(&[], 0).is_none());
    }

    #[test]
    fn three_masters_share_every_slot_once() {
        let shares: Vec<_> = (0..3).map(|i| share(i, 3)).collect();
        assert_eq!(shares[0].0, 0);
        assert_eq!(shares[2].1, SLOTS - 1);
        assert_eq!(shares[0].1 + 1, shares[1].0);
        assert_eq!(shares[1].1 + 1, shares[2].0);
    }
}
