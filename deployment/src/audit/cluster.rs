//! The audit's rules for a Redis Cluster (`redis+cluster://`): its own
//! failover's timing against the lease, which replicas it may promote, and
//! what a master's loss takes down. Pure, as the other rules; each master
//! is judged on its own settings (a cluster's nodes may differ).

use super::facts::{Node, Role};
use super::finding::{config_unknown, Finding, Rule, Severity};

pub const NODE_TIMEOUT: Rule = Rule {
    name: "cluster-node-timeout",
    at_worst: Severity::Risk,
    reason: "During failover, a replica that had not received the SET can become primary.",
    no_command: "",
};
pub const VALIDITY: Rule = Rule {
    name: "cluster-replica-validity",
    at_worst: Severity::Risk,
    reason: "Two clients can then believe they hold the lock.",
    no_command: "",
};
pub const REPLICAS: Rule = Rule {
    name: "cluster-replicas",
    at_worst: Severity::Warning,
    reason: "If you only talk to one Redis primary, the lock is only as available as that primary.",
    no_command: "nothing to run: add a replica to the master",
};
pub const COVERAGE: Rule = Rule {
    name: "cluster-full-coverage",
    at_worst: Severity::Warning,
    reason: "If you only talk to one Redis primary, the lock is only as available as that primary.",
    no_command: "nothing to run: cluster-require-full-coverage decides only what else stops",
};

/// The command that shows a cluster's failover losing a lock.
const FAILOVER: &str = "lockstorm run --config cluster --nemesis failover";

/// Every cluster rule over one master.
pub fn master(node: &Node, ttl_ms: u64) -> Vec<Finding> {
    let Some(Role::Master { replicas }) = &node.role else {
        return Vec::new();
    };
    vec![
        node_timeout(node, ttl_ms),
        validity(node),
        replicas_of(node, replicas),
        coverage(node),
    ]
}

/// A master unreached for `cluster-node-timeout` is voted out and its
/// replica promoted. Below the TTL, that fits in one lease: a key the
/// master granted and never sent is granted again while its holder still
/// holds it. At or above, those leases run out first, but a master cut off
/// in a minority keeps granting until its own timeout: a warning.
fn node_timeout(node: &Node, ttl_ms: u64) -> Finding {
    let at = [node.addr.as_str()];
    let Some(t) = node
        .config("cluster-node-timeout")
        .and_then(|t| t.parse::<u64>().ok())
    else {
        return unknown(&NODE_TIMEOUT, node, "cluster-node-timeout");
    };
    let (severity, what) = match t < ttl_ms {
        true => (Severity::Risk, format!("cluster-node-timeout {t} ms < TTL {ttl_ms} ms: a replica can be promoted while a lock granted on its master is still held")),
        false => (Severity::Warning, format!("cluster-node-timeout {t} ms >= TTL {ttl_ms} ms: leases run out before a failover, but not one granted on a master cut off in a minority")),
    };
    let command = format!("{FAILOVER} --ttl-ms {ttl_ms} --down-after-ms {t}");
    NODE_TIMEOUT.found(&at, severity, what).shown_by(command)
}

/// `cluster-replica-validity-factor 0` lets a replica however long cut
/// off from its master be promoted, with whatever it had then.
fn validity(node: &Node) -> Finding {
    let at = [node.addr.as_str()];
    let name = "cluster-replica-validity-factor";
    let Some(factor) = node.config(name).and_then(|f| f.parse::<u64>().ok()) else {
        return unknown(&VALIDITY, node, name);
    };
    match factor {
        0 => VALIDITY
            .found(
                &at,
                Severity::Risk,
                format!("{name} 0: a replica however stale can be promoted"),
            )
            .shown_by(FAILOVER),
        f => VALIDITY.found(
            &at,
            Severity::Ok,
            format!("{name} {f}: a replica cut off for {f} node timeouts is not promoted"),
        ),
    }
}

/// A master without a replica has no failover: its slots stop with it.
fn replicas_of(node: &Node, replicas: &[String]) -> Finding {
    let at = [node.addr.as_str()];
    match replicas.len() {
        0 => REPLICAS.found(
            &at,
            Severity::Warning,
            "no replica: its slots, and a lock in them, stop with it".into(),
        ),
        n => REPLICAS.found(
            &at,
            Severity::Ok,
            format!("{n} replica(s): {}", replicas.join(", ")),
        ),
    }
}

fn coverage(node: &Node) -> Finding {
    let at = [node.addr.as_str()];
    let name = "cluster-require-full-coverage";
    match node.config(name) {
        None => unknown(&COVERAGE, node, name),
        Some("yes") => COVERAGE.found(
            &at,
            Severity::Warning,
            format!("{name} yes: one master's slots uncovered stop every slot, the lock's too"),
        ),
        Some(v) => COVERAGE.found(
            &at,
            Severity::Ok,
            format!("{name} {v}: the other slots serve on"),
        ),
    }
}

fn unknown(rule: &'static Rule, node: &Node, missing: &str) -> Finding {
    config_unknown(rule, node, missing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn master_with(settings: &[(&str, &str)], replicas: &[&str]) -> Node {
        Node {
            role: Some(Role::Master {
                replicas: replicas.iter().map(|r| r.to_string()).collect(),
            }),
            config: Some(
                settings
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Node::reached("10.0.0.1:7000")
        }
    }

    fn severity_of(found: &[Finding], rule: &Rule) -> Severity {
        found.iter().find(|f| f.rule == rule.name).unwrap().severity
    }

    #[test]
    fn a_node_timeout_within_the_lease_is_a_risk_and_a_longer_one_a_warning() {
        let settings = |t: &'static str| {
            [
                ("cluster-node-timeout", t),
                ("cluster-replica-validity-factor", "10"),
                ("cluster-require-full-coverage", "no"),
            ]
        };
        let short = master(&master_with(&settings("1000"), &["10.0.0.2:7000"]), 10_000);
        assert_eq!(severity_of(&short, &NODE_TIMEOUT), Severity::Risk);
        let shown = short.iter().find(|f| f.rule == NODE_TIMEOUT.name).unwrap();
        assert!(shown
            .demonstrate
            .as_deref()
            .unwrap()
            .contains("--down-after-ms 1000"));
        let long = master(&master_with(&settings("15000"), &["10.0.0.2:7000"]), 10_000);
        assert_eq!(severity_of(&long, &NODE_TIMEOUT), Severity::Warning);
        assert_eq!(severity_of(&long, &VALIDITY), Severity::Ok);
        assert_eq!(severity_of(&long, &REPLICAS), Severity::Ok);
        assert_eq!(severity_of(&long, &COVERAGE), Severity::Ok);
    }

    #[test]
    fn a_stale_replica_promotable_a_lone_master_and_full_coverage_are_named() {
        let node = master_with(
            &[
                ("cluster-node-timeout", "15000"),
                ("cluster-replica-validity-factor", "0"),
                ("cluster-require-full-coverage", "yes"),
            ],
            &[],
        );
        let found = master(&node, 10_000);
        assert_eq!(severity_of(&found, &VALIDITY), Severity::Risk);
        assert_eq!(severity_of(&found, &REPLICAS), Severity::Warning);
        assert_eq!(severity_of(&found, &COVERAGE), Severity::Warning);
    }

    #[test]
    fn settings_it_cannot_see_are_unknown_and_replicas_are_not_judged() {
        let refused = Node {
            config: None,
            ..master_with(&[], &["10.0.0.2:7000"])
        };
        let found = master(&refused, 10_000);
        assert_eq!(severity_of(&found, &NODE_TIMEOUT), Severity::Unknown);
        assert_eq!(severity_of(&found, &VALIDITY), Severity::Unknown);
        let replica = Node {
            role: Some(Role::Replica {
                master: "10.0.0.1:7000".into(),
                state: "connected".into(),
            }),
            ..master_with(&[], &[])
        };
        assert!(master(&replica, 10_000).is_empty());
    }
}
