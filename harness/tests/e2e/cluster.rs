//! Redis Cluster (`--config cluster`): three masters with a replica each,
//! formed by lockstorm, the lock on the master of its key's slot. Without
//! faults it holds; a killed master's replica takes over by the cluster's
//! vote, with whatever of the key reached it.

use crate::common;

use common::{count, events, run_short};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use testkit::{Builder, Server};

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
/// before its peers could vote it out: it restarts empty (no persistence),
/// still master of its slots by its own nodes.conf, and grants the lock
/// again while the holder works. `cluster-node-timeout` is 3000 ms here,
/// not the 1000 ms default: CI's busy machine once brought the node back
/// 1.9 s after its kill, when the vote had begun.
#[test]
fn a_master_restarted_empty_before_the_vote_grants_the_lock_again() {
    let tmp = common::tmp();
    let args = ["--down-after-ms", "3000"];
    let (out, results, dir) = run_short(tmp.path(), "cluster", "kill", "10", "1", &args);
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

/// `--restart-at-vote`: the slot's master killed after a grant and back,
/// empty, as soon as its peers flag it `fail`. The vote goes on (a master
/// flagged `fail` is not cleared for twice the node timeout); its replica
/// resyncs from the empty master first, in most kills, and is voted in
/// without the key, which is then granted again while its first holder
/// works. Timed by what the nodes say rather than a fixed delay, it holds
/// under load (8 of 9 kills lost the key beside six other runs and a busy
/// loop); a kill whose replica won the vote before its resync keeps the
/// key, so the run is tried on up to three seeds, as the issue asks.
#[test]
fn a_master_back_empty_as_its_replica_is_voted_in_loses_the_lock_with_the_promotion() {
    let mut tried = Vec::new();
    for seed in ["1", "2", "3"] {
        let tmp = common::tmp();
        let args = ["--restart-at-vote"];
        let (out, results, dir) = run_short(tmp.path(), "cluster", "kill", "20", seed, &args);
        assert_ne!(out.code, 2, "{}", out.stdout);
        common::assert_no_process_left(tmp.path());
        let restarts = events(&dir, "stop-kill");
        for r in &restarts {
            assert_eq!(r["value"]["at_vote"]["marked_down"], true, "{r}");
        }
        let time = |e: &serde_json::Value| e["time"].as_u64().unwrap();
        // A promotion of the killed master's replica after that master was back.
        let after_a_restart = events(&dir, "promoted").into_iter().any(|p| {
            restarts
                .iter()
                .any(|r| r["value"]["target"] == p["value"]["replaces"] && time(r) < time(&p))
        });
        let overlaps = count(&results, "lock-overlap");
        if out.code == 1 && overlaps > 0 && after_a_restart {
            assert!(
                out.stdout.contains("as its replica's vote began"),
                "{}",
                out.stdout
            );
            // Not the run expectations.toml documents (a 300 ms restart).
            let own = "not held to expectations.toml, which documents cluster × kill under the defaults: this run gave --restart-at-vote";
            assert!(out.stdout.contains(own), "{}", out.stdout);
            return;
        }
        tried.push(format!(
            "seed {seed}: exit {}, lock-overlap {overlaps}, promotion after a restart {after_a_restart}: {}",
            out.code,
            dir.display()
        ));
    }
    panic!(
        "no seed lost the lock to a promotion:\n{}",
        tried.join("\n")
    );
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
    // The slot's master and its pair: the cut was between them, and the pair took the slot.
    let start = &events(&dir, "start-failover")[0]["value"];
    assert_eq!(start["cut-from"][0], promoted[0]["value"]["promoted"]);
    common::assert_no_process_left(tmp.path());
}

/// `cluster-fenced`: the fence counter beside the key, in its slot (one
/// hash tag). A paused holder's late write is refused by the storage...
#[test]
fn a_fenced_cluster_keeps_the_data_safe_under_pause() {
    let tmp = common::tmp();
    let (out, results, dir) = run_short(tmp.path(), "cluster-fenced", "pause", "10", "1", &[]);
    common::assert_valid(&results, &dir);
    assert_eq!(out.code, 0, "{}", out.stdout);
    let counter = results.counter().expect("a counter report");
    assert!(counter.stale_fence_rejected.writes >= 1, "{}", out.stdout);
    let keys = &run_json(&dir)["options"]["keys"];
    assert_eq!(keys["prefix"], "{lockstorm:}", "{keys:#}");
}

/// ...but a failover takes the counter back with the key, even with every
/// write made durable: the promoted replica hands the next holder the
/// stale holder's token, the storage takes a token equal to the highest
/// (a holder reads and writes with one), and an update is lost.
#[test]
fn a_failover_takes_a_fenced_clusters_token_back_with_its_key() {
    let tmp = common::tmp();
    let args = ["--work-ms", "5500", "--persistence", "aof-always"];
    let (out, results, _) = run_short(tmp.path(), "cluster-fenced", "failover", "24", "1", &args);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lost-update") > 0, "{}", out.stdout);
    common::assert_no_process_left(tmp.path());
}

/// `partition` on a cluster cuts the slot's master off from every other
/// node (its bus too), not the workers from it: probes across the cut are
/// refused, the majority votes the replica in (`promoted`, since the cut),
/// the cut heals and no rule is left. A release the minority master refused
/// (`ClusterDown`) leaves the key to lapse at its TTL: no verdict of the
/// mutex model's own. (A grant the minority master made before it noticed
/// the cut is a real second holder, and then the model must say so: on a
/// busy CI machine it granted one 2.4 s after the cut.)
#[test]
fn a_partitioned_master_is_voted_out_and_the_cut_heals() {
    let tmp = common::tmp();
    let (out, results, dir) = run_short(tmp.path(), "cluster", "partition", "20", "1", &[]);
    let orphans = common::orphaned_chains();
    assert!(orphans.is_empty(), "iptables rules left: {orphans:?}");
    assert_ne!(out.code, 2, "{}", out.stdout);
    for op in ["start-partition", "stop-partition"] {
        common::assert_verified(&dir, op);
    }
    let start = &events(&dir, "start-partition")[0]["value"];
    assert_eq!(start["cut"][1].as_array().unwrap().len(), 5, "{start:#}");
    let promoted = events(&dir, "promoted");
    assert_eq!(promoted.len(), 1, "{}", out.stdout);
    assert_eq!(promoted[0]["value"]["since"], "the cut");
    let (model, holds) = (
        count(&results, "nonlinearizable"),
        count(&results, "lock-overlap"),
    );
    assert!(model == 0 || holds > 0, "{}", out.stdout);
    common::assert_no_process_left(tmp.path());
}

/// `manual-failover`: `CLUSTER FAILOVER` on the slot master's replica
/// while a worker holds. The master stops taking writes until its replica
/// has them all, so the key moves with the slot: the holder's release,
/// sent after the promotion, deletes its key on the new master, and the
/// run holds. The old master follows the new one.
#[test]
fn a_coordinated_manual_failover_moves_the_key_with_the_slot() {
    let tmp = common::tmp();
    let (out, results, dir) = run_short(tmp.path(), "cluster", "manual-failover", "20", "1", &[]);
    common::assert_valid(&results, &dir);
    assert_eq!(out.code, 0, "{}", out.stdout);
    common::assert_verified(&dir, "start-manual-failover");
    let start = &events(&dir, "start-manual-failover")[0];
    let promoted = &events(&dir, "promoted")[0];
    assert_eq!(promoted["value"]["since"], "the manual failover");
    // The epoch it won the slot under, read back from CLUSTER NODES.
    let epoch = promoted["value"]["epoch"].as_u64();
    assert!(epoch.is_some_and(|e| e > 0), "{promoted}");
    let (new, at) = (
        &promoted["value"]["promoted"],
        promoted["time"].as_u64().unwrap(),
    );
    assert_eq!(start["value"]["replica"], *new, "{start}");
    let stop = &events(&dir, "stop-manual-failover")[0]["value"];
    assert_eq!(stop["old_primary"]["role"], "slave", "{stop}");
    // The holder at the command released its key on the new master.
    let holder = start["value"]["holder"].as_u64().unwrap();
    let released = events(&dir, "release")
        .into_iter()
        .find(|e| e["process"] == holder && e["type"] == "ok" && e["time"].as_u64().unwrap() > at);
    assert!(
        released.is_some(),
        "the holder released after the promotion"
    );
    // (The observer hears of a deletion as the reply comes back, and
    // stamps it a little before or after the client does.)
    let by = format!("worker-{holder}");
    let deleted = events(&dir, "key-deleted")
        .into_iter()
        .any(|e| e["node"] == *new && e["value"]["by"] == by && e["time"].as_u64().unwrap() > at);
    assert!(
        deleted,
        "no key deleted on {new} by the release: {}",
        dir.display()
    );
    common::assert_no_process_left(tmp.path());
}

/// `takeover`: the same hold, but the replica, cut off from its master
/// since before the grant, takes the slots by `CLUSTER FAILOVER
/// TAKEOVER`: without the key, it grants the lock to a second worker.
/// The other workers reach it once the old master, told by the other
/// masters, redirects them: 5.5 s of work (within the 6 s lease) keeps the
/// first holder working that long (on a busy CI machine, 4 s did not).
#[test]
fn a_takeover_by_a_replica_behind_its_master_loses_the_lock() {
    let tmp = common::tmp();
    let args = ["--work-ms", "5500"];
    let (out, results, dir) = run_short(tmp.path(), "cluster", "takeover", "24", "1", &args);
    let orphans = common::orphaned_chains();
    assert!(orphans.is_empty(), "iptables rules left: {orphans:?}");
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    for op in ["start-takeover", "taken-over"] {
        common::assert_verified(&dir, op);
    }
    let taken = &events(&dir, "taken-over")[0]["value"];
    let promoted = &events(&dir, "promoted")[0]["value"];
    assert_eq!(promoted["since"], "the takeover");
    assert_eq!(taken["replica"], promoted["promoted"], "{taken}");
    let stop = &events(&dir, "stop-takeover")[0]["value"];
    assert_eq!(stop["healed"], true, "{stop}");
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

/// A Node library through ioredis' `Cluster` client (seeded with every
/// node, following the slots itself): a pause past the lease breaks it as
/// it breaks `single`, and every key it sets lands on one node, the slot's
/// master, its own prefix (`mutex:`) kept in the run's slot by the hash tag.
fn through_ioredis_cluster_breaks_under_pause(client: &str, key: Option<&str>) {
    let tmp = common::tmp();
    let args = ["--client", client];
    let (out, results, dir) = run_short(tmp.path(), "cluster", "pause", "10", "1", &args);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    let record = run_json(&dir);
    assert!(
        record["client"]["library"]
            .as_str()
            .is_some_and(|l| l.contains("ioredis")),
        "{:#}",
        record["client"]
    );
    let declared = record["client"]["key"].as_str();
    assert_eq!(declared, key, "{:#}", record["client"]);
    let mut nodes: Vec<String> = events(&dir, "key-set")
        .iter()
        .map(|e| e["node"].as_str().unwrap().to_string())
        .collect();
    nodes.dedup();
    assert_eq!(nodes.len(), 1, "keys set on {nodes:?}");
    common::assert_no_process_left(tmp.path());
}

#[test]
fn redis_semaphore_through_ioredis_cluster_breaks_under_pause() {
    through_ioredis_cluster_breaks_under_pause("redis-semaphore", Some("mutex:{lockstorm:}lock"));
}

#[test]
fn node_redlock_through_ioredis_cluster_breaks_under_pause() {
    through_ioredis_cluster_breaks_under_pause("node-redlock", None);
}

/// An adapter whose library stores the lock under a key of another slot
/// than the run's (here the example adapter, told to say so) would be
/// struck on the wrong master: refused in one line before any worker
/// starts, exit 254, nothing left running.
#[test]
fn an_adapter_whose_key_leaves_the_runs_slot_is_refused_in_one_line() {
    let tmp = common::tmp();
    let example = crate::clients::protocol_example(tmp.path());
    let code = std::fs::read_to_string(&example).unwrap();
    let init = r#"reply.update(client="example 1.0", features=["token"])"#;
    assert!(code.contains(init), "the example's init reply");
    let moved = code.replace(
        init,
        r#"reply.update(client="example 1.0", features=["token"], key="elsewhere")"#,
    );
    std::fs::write(&example, moved).unwrap();
    let cmd = format!("python3 {}", example.display());
    let results = tmp.path().join("results");
    let args = [
        "--config",
        "cluster",
        "--client-cmd",
        &cmd,
        "--time-limit",
        "5",
    ];
    let out = common::lockstorm_at(
        Some(tmp.path()),
        &[&["--results", results.to_str().unwrap()], &args[..]].concat(),
        &[],
    );
    assert_eq!(out.code, 254, "{}{}", out.stdout, out.stderr);
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("elsewhere"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", out.stderr);
    assert!(lines[0].contains("not in the run's slot"), "{}", lines[0]);
    common::assert_no_process_left(tmp.path());
}

/// A Redis Cluster as a user starts one: six `redis-server`s
/// (`cluster-enabled`, each bus on a free port) made one by `redis-cli
/// --cluster create --cluster-replicas 1`, holding a key of its owner's;
/// returned once every node says `cluster_state:ok`.
fn hand_made_cluster() -> Vec<Server> {
    let servers: Vec<Server> = (0..6)
        .map(|_| {
            let bus = testkit::free_port(Ipv4Addr::LOCALHOST).to_string();
            Builder::redis()
                .args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                ])
                .args(["--cluster-node-timeout", "1000", "--cluster-port", &bus])
                .start()
        })
        .collect();
    let create = std::process::Command::new("timeout")
        .args(["60", "redis-cli", "--cluster", "create"])
        .args(servers.iter().map(|s| s.addr().to_string()))
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .output()
        .expect("redis-cli runs");
    assert!(
        create.status.success(),
        "{}",
        String::from_utf8_lossy(&create.stdout)
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    for server in &servers {
        loop {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut server.client())
                .unwrap_or_default();
            if info.contains("cluster_state:ok") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} never ok: {info}",
                server.addr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    servers
}

/// Every key on the cluster's masters, sorted (a replica holds its
/// master's).
fn cluster_keys(servers: &[Server]) -> Vec<String> {
    let mut keys = Vec::new();
    for server in servers {
        let mut con = server.client();
        let role: redis::Value = redis::cmd("ROLE").query(&mut con).unwrap();
        let master = matches!(&role, redis::Value::Array(r) if r.first() == Some(&redis::Value::BulkString(b"master".to_vec())));
        if master {
            keys.extend(
                redis::cmd("KEYS")
                    .arg("*")
                    .query::<Vec<String>>(&mut con)
                    .unwrap(),
            );
        }
    }
    keys.sort();
    keys
}

/// A cluster lockstorm did not start, reached through one seed: the run
/// finds the other nodes and the lock's slot, stays valid with no fault,
/// and leaves only its owner's key; `audit` reads every node and names the
/// cluster's own settings.
#[test]
fn a_hand_made_cluster_is_tested_through_a_seed_left_as_found_and_audited() {
    let servers = hand_made_cluster();
    // On the master that serves its slot (the others answer MOVED).
    let set = servers.iter().filter(|s| {
        let mut con = s.client();
        redis::cmd("SET")
            .arg("owner:key")
            .arg("keep")
            .query::<()>(&mut con)
            .is_ok()
    });
    assert_eq!(set.count(), 1, "one master serves owner:key");
    let before = cluster_keys(&servers);
    assert_eq!(before, ["owner:key"]);
    let seed = format!("redis+cluster://{}", servers[1].addr());
    let tmp = common::tmp();
    let (out, results, dir) = common::run(
        tmp.path(),
        &[
            "--target",
            &seed,
            "--config",
            "cluster",
            "--nemesis",
            "none",
            "--time-limit",
            "5",
            "--seed",
            "1",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(results.stats.acquired >= 5, "{}", out.stdout);
    assert_eq!(
        cluster_keys(&servers),
        before,
        "the run's keys are gone, the owner's kept"
    );
    let record = run_json(&dir);
    let named: Vec<_> = record["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["name"].as_str().unwrap().starts_with('n'))
        .collect();
    assert_eq!(
        named.len(),
        6,
        "every node found through one seed: {:#}",
        record["nodes"]
    );
    let audit_dir = tempfile::tempdir().unwrap();
    let audit = common::lockstorm(&[
        "audit",
        "--target",
        &seed,
        "--output",
        audit_dir.path().to_str().unwrap(),
    ]);
    // cluster-node-timeout 1000 ms is within the default 10 s TTL: at risk.
    assert_eq!(audit.code, 1, "{}", audit.stdout);
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(audit_dir.path().join("audit.json")).unwrap(),
    )
    .unwrap();
    let text = json.to_string();
    for rule in [
        "cluster-node-timeout",
        "cluster-replica-validity",
        "cluster-replicas",
        "cluster-full-coverage",
    ] {
        assert!(text.contains(rule), "{rule} missing: {}", audit.stdout);
    }
    assert!(
        audit.stdout.contains("cluster-node-timeout 1000 ms < TTL"),
        "{}",
        audit.stdout
    );
    assert_eq!(cluster_keys(&servers), before, "audit writes nothing");
    // Its masters as Redlock's nodes: refused before the run, one line.
    let masters: Vec<String> = servers
        .iter()
        .filter(|s| {
            let mut con = s.client();
            let role: redis::Value = redis::cmd("ROLE").query(&mut con).unwrap();
            matches!(&role, redis::Value::Array(r) if r.first() == Some(&redis::Value::BulkString(b"master".to_vec())))
        })
        .map(|s| s.addr().to_string())
        .collect();
    assert_eq!(masters.len(), 3, "{masters:?}");
    let redlock = format!("redlock://{}", masters.join(","));
    let results = tmp.path().join("redlock");
    let args = ["--target", &redlock, "--config", "redlock", "--results"];
    let out = common::lockstorm(&[&args[..], &[results.to_str().unwrap()]].concat());
    assert_eq!(out.code, 254, "{}{}", out.stdout, out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("is a node of a Redis Cluster")
            && out.stderr.contains("redis+cluster://"),
        "{}",
        out.stderr
    );
    assert_eq!(cluster_keys(&servers), before, "the refusal wrote nothing");
}
