//! `lockstorm audit` against servers each test starts itself (testkit, on
//! 127.0.0.1 only): what it finds, its exit code, and `audit.json`.

use crate::common::{lockstorm_with, wait_for, Run};
use serde_json::Value;
use std::path::Path;
use testkit::{Builder, Server};

/// Every setting the rules hold safe: AOF fsynced on every write, no eviction.
const SAFE: [&str; 6] = [
    "--appendonly",
    "yes",
    "--appendfsync",
    "always",
    "--maxmemory-policy",
    "noeviction",
];

fn safe() -> Builder {
    Builder::redis().args(SAFE)
}

/// `lockstorm audit --target TARGET` writing into `out`; its audit.json,
/// if it wrote one.
fn audit(target: &str, out: &Path, env: &[(&str, &str)]) -> (Run, Option<Value>) {
    let out_arg = out.display().to_string();
    let args = [
        "audit", "--target", target, "--pings", "10", "--output", &out_arg,
    ];
    let run = lockstorm_with(&args, env);
    assert!(
        matches!(run.code, 0..=2 | 254),
        "audit crashed ({}): {}",
        run.code,
        run.stderr
    );
    let json = std::fs::read_to_string(out.join("audit.json"))
        .ok()
        .map(|text| serde_json::from_str(&text).expect("audit.json is JSON"));
    (run, json)
}

/// The findings of `rule`, as (severity, nodes, what).
fn found(json: &Value, rule: &str) -> Vec<(String, String, String)> {
    json["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["rule"] == rule)
        .map(|f| {
            let nodes: Vec<&str> = f["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            (
                f["severity"].as_str().unwrap().to_string(),
                nodes.join(","),
                f["what"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn severities(json: &Value) -> Vec<String> {
    json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["severity"].as_str().unwrap().to_string())
        .collect()
}

/// A safe node replicating `primary`.
fn replica_of(primary: &Server) -> Server {
    let port = primary.port().to_string();
    safe().args(["--replicaof", "127.0.0.1", &port]).start()
}

fn addr(server: &Server) -> String {
    server.addr().to_string()
}

#[test]
fn audit_of_a_safe_node_finds_nothing_at_risk() {
    let node = safe().start();
    let out = crate::common::tmp();
    let (run, json) = audit(&format!("redis://{}", addr(&node)), out.path(), &[]);
    let json = json.expect("audit.json written");
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(!severities(&json).iter().any(|s| s == "risk"), "{json:#}");
    assert_eq!(found(&json, "eviction")[0].0, "ok");
    assert_eq!(found(&json, "persistence")[0].0, "ok");
    assert_eq!(json["ttl_ms"], 10_000);
    assert_eq!(json["ttl_default"], true);
    assert!(
        run.stdout.contains("TTL 10000 ms, the default"),
        "{}",
        run.stdout
    );
    let version = json["nodes"][0]["server"]["redis_version"]
        .as_str()
        .unwrap();
    assert!(!version.is_empty());
}

#[test]
fn audit_names_eviction_that_can_drop_lock_keys() {
    let node = safe().args(["--maxmemory-policy", "allkeys-lru"]).start();
    let out = crate::common::tmp();
    let (run, json) = audit(&format!("redis://{}", addr(&node)), out.path(), &[]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let eviction = found(&json.unwrap(), "eviction");
    assert_eq!(eviction[0].0, "risk");
    assert!(eviction[0].2.contains("allkeys-lru"), "{eviction:?}");
    assert!(run.stdout.contains("RISK     eviction"), "{}", run.stdout);
}

#[test]
fn audit_names_a_node_that_forgets_its_locks_on_restart() {
    // testkit's default: --save "" --appendonly no.
    let node = Builder::redis()
        .args(["--maxmemory-policy", "noeviction"])
        .start();
    let out = crate::common::tmp();
    let (run, json) = audit(&format!("redis://{}", addr(&node)), out.path(), &[]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let persistence = found(&json.unwrap(), "persistence");
    assert_eq!(persistence[0].0, "risk", "{persistence:?}");
    assert!(run
        .stdout
        .contains("see: lockstorm run --config single --nemesis kill"));
}

#[test]
fn audit_through_sentinel_checks_replication_and_its_timings() {
    let primary = safe().start();
    let replica = replica_of(&primary);
    // Readiness, not a sleep: the primary has its replica online (ROLE
    // lists only those), and the Sentinel has learnt of it.
    wait_for("the replica to be online", || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut primary.client())
            .ok()?;
        info.contains("state=online").then_some(())
    });
    let sentinel = testkit::sentinel_of(primary.port(), "");
    let out = crate::common::tmp();
    let target = format!("sentinel://{}/mm", addr(&sentinel));
    let (run, json) = audit(&target, out.path(), &[]);
    let json = json.expect("audit.json written");
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let replication = found(&json, "replication");
    let on_primary: Vec<_> = replication
        .iter()
        .filter(|f| f.1 == addr(&primary))
        .collect();
    assert_eq!(on_primary[0].0, "risk", "{replication:?}");
    let down = found(&json, "sentinel-down-after");
    assert_eq!(down[0].0, "risk", "{down:?}");
    assert!(down[0]
        .2
        .contains("down-after-milliseconds 1000 < TTL 10000"));
    assert_eq!(found(&json, "sentinel-failover-timeout").len(), 1);
    let audited: Vec<&str> = json["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["addr"].as_str())
        .collect();
    assert!(audited.contains(&addr(&replica).as_str()), "{audited:?}");
}

#[test]
fn audit_of_redlock_finds_a_node_replicating_another() {
    let a = safe().start();
    let b = safe().start();
    let c = replica_of(&a);
    let out = crate::common::tmp();
    let target = format!("redlock://{},{},{}", addr(&a), addr(&b), addr(&c));
    let (run, json) = audit(&target, out.path(), &[]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let independence = found(&json.unwrap(), "independence");
    let replica_of = format!("{} is a replica of {}", addr(&c), addr(&a));
    assert!(
        independence
            .iter()
            .any(|f| f.0 == "risk" && f.2.contains(&replica_of)),
        "{independence:?}"
    );
    assert!(
        independence
            .iter()
            .any(|f| f.0 == "warning" && f.2.contains("same machine")),
        "{independence:?}"
    );
}

#[test]
fn audit_refuses_a_replica_as_the_lock_node() {
    let primary = safe().start();
    let replica = replica_of(&primary);
    let out = crate::common::tmp();
    let (run, json) = audit(&format!("redis://{}", addr(&replica)), out.path(), &[]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let writable = found(&json.unwrap(), "writable");
    assert_eq!(writable[0].0, "risk");
    assert!(
        writable[0].2.contains("not writable: a replica"),
        "{writable:?}"
    );
}

#[test]
fn audit_without_config_says_unknown_and_exits_2() {
    let node = safe().config("rename-command CONFIG \"\"").start();
    let refused = redis::cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .query::<Vec<String>>(&mut node.client());
    assert!(refused.is_err(), "CONFIG was not renamed away: {refused:?}");
    let out = crate::common::tmp();
    let (run, json) = audit(&format!("redis://{}", addr(&node)), out.path(), &[]);
    let json = json.expect("audit.json written");
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    for rule in ["eviction", "persistence"] {
        let f = found(&json, rule);
        assert_eq!(f[0].0, "unknown", "{rule}: {f:?}");
        assert!(f[0].2.contains("CONFIG refused"), "{f:?}");
    }
    assert_eq!(found(&json, "writable")[0].0, "ok");
}

#[test]
fn audit_of_a_bad_url_is_one_line_and_writes_nothing() {
    let out = crate::common::tmp();
    let folder = out.path().join("never");
    for target in [
        "127.0.0.1:6379",
        "redis://127.0.0.1:99999",
        "rediss://127.0.0.1:1",
    ] {
        let (run, json) = audit(target, &folder, &[]);
        assert_eq!(run.code, 254, "{target}: {}", run.stderr);
        assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
        assert!(json.is_none() && !folder.exists());
    }
    // A TLS node that is not there: said before any bridge is made.
    let (run, _) = audit("rediss://127.0.0.1:1", &folder, &[]);
    assert!(run.stderr.contains("cannot connect"), "{}", run.stderr);
}

#[test]
fn audit_logs_in_with_the_password_and_never_stores_it() {
    const PASSWORD: &str = "s3cret-audit-pw";
    let node = safe().password(PASSWORD).start();
    let target = format!("redis://{}", addr(&node));
    let out = crate::common::tmp();
    let (run, json) = audit(
        &target,
        out.path(),
        &[("LOCKSTORM_REDIS_PASSWORD", PASSWORD)],
    );
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let text = std::fs::read_to_string(out.path().join("audit.json")).unwrap();
    assert!(!text.contains(PASSWORD), "audit.json holds the password");
    assert!(!run.stdout.contains(PASSWORD) && !run.stderr.contains(PASSWORD));
    assert_eq!(found(&json.unwrap(), "persistence")[0].0, "ok");

    // Without it the node cannot be read: unknown, not a crash.
    let out = crate::common::tmp();
    let (run, _) = audit(&target, out.path(), &[("LOCKSTORM_REDIS_PASSWORD", "")]);
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("UNKNOWN  reachable"), "{}", run.stdout);
}
