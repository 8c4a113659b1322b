//! Facts of hand-made deployments, safe and risky, for the rules' tests
//! and for the harness's check that every command a finding shows is a run
//! it accepts (the rules are pure: facts in, findings out).

use super::facts::{Facts, Node, Role, Sentinel};
use super::rules::{audit, Finding};
use crate::target::Kind;
use std::collections::BTreeMap;

pub fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A primary with no replica, every setting safe, quick and on loopback.
pub fn safe(addr: &str) -> Node {
    Node {
        ip: Some("127.0.0.1".parse().unwrap()),
        role: Some(Role::Master { replicas: vec![] }),
        server: map(&[("run_id", addr), ("redis_version", "7.0.15")]),
        config: Some(map(&[
            ("maxmemory-policy", "noeviction"),
            ("maxmemory", "0"),
            ("appendonly", "yes"),
            ("appendfsync", "always"),
            ("save", ""),
            ("min-replicas-to-write", "0"),
        ])),
        clock_offset_us: Some(0),
        pings_us: vec![100; 50],
        ..Node::reached(addr)
    }
}

pub fn with(mut node: Node, name: &str, value: &str) -> Node {
    node.config
        .as_mut()
        .unwrap()
        .insert(name.into(), value.into());
    node
}

pub fn facts(kind: Kind, nodes: Vec<Node>) -> Facts {
    Facts {
        kind,
        nodes,
        sentinels: vec![],
        ttl_ms: 10_000,
    }
}

pub fn sentinel(down_after: &str, failover_timeout: &str) -> Sentinel {
    Sentinel {
        addr: "s:26379".into(),
        master: Some(map(&[
            ("down-after-milliseconds", down_after),
            ("failover-timeout", failover_timeout),
            ("quorum", "2"),
        ])),
        ..Sentinel::default()
    }
}

pub fn sentinel_facts(s: Sentinel) -> Vec<Finding> {
    let mut f = facts(
        Kind::Sentinel {
            master: "mm".into(),
        },
        vec![safe("a:1")],
    );
    f.sentinels = vec![s];
    audit(&f)
}

/// Every command the rules show, over risky deployments of each kind: a
/// reader pastes them, so each must be a run lockstorm accepts.
pub fn demonstrations() -> Vec<String> {
    let mut risky = with(
        with(safe("a:1"), "appendonly", "yes"),
        "appendfsync",
        "everysec",
    );
    risky.role = Some(Role::Master {
        replicas: vec!["127.0.0.1:2".into()],
    });
    risky.pings_us = vec![2_000_000; 10];
    let mut nodes = vec![risky, safe("a:2"), safe("a:3")];
    nodes[1].clock_offset_us = Some(1_000_000);
    let mut commands: Vec<String> = [
        audit(&facts(Kind::Redlock, nodes.clone())),
        audit(&facts(
            Kind::Single,
            vec![with(nodes[0].clone(), "appendonly", "no")],
        )),
        sentinel_facts(sentinel("5000", "180000")),
        sentinel_facts(sentinel("30000", "4000")),
    ]
    .concat()
    .into_iter()
    .filter_map(|f| f.demonstrate)
    .collect();
    commands.sort();
    commands.dedup();
    commands
}
