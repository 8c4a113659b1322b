//! Redis Cluster (`--config cluster`): three masters with a replica each,
//! formed by lockstorm, the lock on the master of its key's slot. Without
//! faults it holds; a killed master's replica takes over by the cluster's
//! vote, with whatever of the key reached it.

use crate::common;

use common::{count, events, run_short};

fn run_json(dir: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("run.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn a_cluster_without_faults_keeps_the_lock_and_leaves_nothing_running() {
    let tmp = common::tmp();
    let (out, results, dir) = run_short(tmp.path(), "cluster", "none", "8", "1", &[]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(results.stats.acquired >= 5, "{}", out.stdout);
    // Six nodes, each a cluster node: three masters and their replicas.
    let record = run_json(&dir);
    let nodes = record["nodes"].as_array().unwrap();
    let cluster: Vec<_> = nodes.iter().filter(|n| n["role"] == "cluster").collect();
    assert_eq!(cluster.len(), 6, "{:#}", record["nodes"]);
    common::assert_no_process_left(tmp.path());
}

/// The slot's master killed right after a grant and back within 300 ms,
/// before its peers could vote it out (`cluster-node-timeout` 1000 ms): it
/// restarts empty (no persistence), still master of its slots by its own
/// nodes.conf, and grants the lock again while the holder works.
#[test]
fn a_master_restarted_empty_before_the_vote_grants_the_lock_again() {
    let tmp = common::tmp();
    let (out, results, dir) = run_short(tmp.path(), "cluster", "kill", "10", "1", &[]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    common::assert_verified(&dir, "start-kill");
    assert!(events(&dir, "promoted").is_empty(), "{}", out.stdout);
    common::assert_no_process_left(tmp.path());
}

/// Down longer than the vote takes, the slot's master is replaced by its
/// replica (`promoted` names it), and the next kill aims at the new master:
/// faults follow the slot, not a node name.
#[test]
fn a_master_down_past_the_vote_is_replaced_and_faults_follow_its_slot() {
    let tmp = common::tmp();
    let args = ["--restart-ms", "4000"];
    let (out, _, dir) = run_short(tmp.path(), "cluster", "kill", "18", "1", &args);
    assert_ne!(out.code, 2, "{}", out.stdout);
    let promoted = events(&dir, "promoted");
    let kills = events(&dir, "start-kill");
    assert!(!promoted.is_empty() && kills.len() >= 2, "{}", out.stdout);
    let first = kills[0]["value"]["targets"][0].as_str().unwrap();
    assert_eq!(promoted[0]["value"]["replaces"], first);
    let new = promoted[0]["value"]["promoted"].as_str().unwrap();
    assert_ne!(new, first);
    assert_eq!(kills[1]["value"]["targets"][0], new, "{}", out.stdout);
    common::assert_no_process_left(tmp.path());
}

/// The failover race made reliable, as for `replicated`: the slot's master
/// cut from its replica, a grant, the kill, the cluster's vote for the
/// replica that never received the key. 5.5 s of work (within the 6 s
/// lease) gives the vote that long.
#[test]
fn a_failover_to_a_replica_without_the_key_loses_the_lock_in_a_cluster_too() {
    let tmp = common::tmp();
    let args = ["--work-ms", "5500"];
    let (out, results, dir) = run_short(tmp.path(), "cluster", "failover", "24", "1", &args);
    let orphans = common::orphaned_chains();
    assert!(orphans.is_empty(), "iptables rules left: {orphans:?}");
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    for op in ["start-failover", "kill", "stop-failover"] {
        common::assert_verified(&dir, op);
    }
    let promoted = events(&dir, "promoted");
    assert_eq!(promoted.len(), 1, "{}", out.stdout);
    // n1's pair is n4: the cut was between them, and n4 took the slot.
    let start = &events(&dir, "start-failover")[0]["value"];
    assert_eq!(start["cut-from"][0], promoted[0]["value"]["promoted"]);
    common::assert_no_process_left(tmp.path());
}

#[test]
fn faults_in_the_proxy_are_refused_for_a_cluster_in_one_line() {
    let tmp = common::tmp();
    let out = common::lockstorm(&[
        "--config",
        "cluster",
        "--nemesis",
        "delay",
        "--results",
        tmp.path().to_str().unwrap(),
    ]);
    assert_eq!(out.code, 254, "{}", out.stderr);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("with --config cluster choose"),
        "{}",
        out.stderr
    );
}

/// redis-py's lock through its own cluster client (`RedisCluster`, seeded
/// with every node): a pause past the lease breaks it as it breaks `single`.
#[test]
fn redis_py_through_its_cluster_client_breaks_under_pause_like_single() {
    let tmp = common::tmp();
    let args = ["--client", "redis-py"];
    let (out, results, dir) = run_short(tmp.path(), "cluster", "pause", "10", "1", &args);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    let record = run_json(&dir);
    assert_eq!(
        record["client"]["name"], "redis-py",
        "{:#}",
        record["client"]
    );
    common::assert_no_process_left(tmp.path());
}
