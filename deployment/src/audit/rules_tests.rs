//! The rules, each on a risky input (it finds it), a safe one (it does not)
//! and one without CONFIG (it says unknown).

use super::*;
use crate::audit::samples::*;

fn of<'a>(found: &'a [Finding], rule: &Rule) -> Vec<&'a Finding> {
    found.iter().filter(|f| f.rule == rule.name).collect()
}

fn severity(found: &[Finding], rule: &Rule) -> Severity {
    let hits = of(found, rule);
    assert_eq!(hits.len(), 1, "{}: {found:#?}", rule.name);
    hits[0].severity
}

#[test]
fn a_safe_single_node_has_nothing_at_risk() {
    let found = audit(&facts(Kind::Single, vec![safe("a:1")]));
    assert!(
        found.iter().all(|f| f.severity == Severity::Ok),
        "{found:#?}"
    );
    assert_eq!(verdict(&found), Validity::True);
    for rule in [&WRITABLE, &EVICTION, &PERSISTENCE, &REPLICATION, &LATENCY] {
        assert_eq!(severity(&found, rule), Severity::Ok, "{}", rule.name);
    }
}

#[test]
fn eviction_of_lock_keys_is_a_risk() {
    let risky = |policy, limit| {
        let node = with(
            with(safe("a:1"), "maxmemory-policy", policy),
            "maxmemory",
            limit,
        );
        severity(&audit(&facts(Kind::Single, vec![node])), &EVICTION)
    };
    assert_eq!(risky("allkeys-lru", "0"), Severity::Risk);
    assert_eq!(risky("allkeys-random", "100mb"), Severity::Risk);
    assert_eq!(risky("volatile-ttl", "104857600"), Severity::Risk);
    assert_eq!(risky("volatile-lru", "0"), Severity::Warning);
    assert_eq!(risky("noeviction", "104857600"), Severity::Ok);
    let found = audit(&facts(
        Kind::Single,
        vec![with(safe("a:1"), "maxmemory-policy", "allkeys-lfu")],
    ));
    let hit = of(&found, &EVICTION)[0];
    assert!(hit.what.contains("allkeys-lfu"), "{hit:?}");
    assert_eq!(hit.demonstrate, None, "lockstorm has no eviction fault");
    assert_eq!(verdict(&found), Validity::False);
}

#[test]
fn persistence_that_forgets_locks_is_a_risk() {
    let risky = |aof, fsync, save| {
        let node = with(
            with(with(safe("a:1"), "appendonly", aof), "appendfsync", fsync),
            "save",
            save,
        );
        let found = audit(&facts(Kind::Single, vec![node]));
        of(&found, &PERSISTENCE)[0].clone()
    };
    let none = risky("no", "everysec", "");
    assert_eq!(none.severity, Severity::Risk);
    assert_eq!(
        none.demonstrate.as_deref(),
        Some("lockstorm run --config single --nemesis kill")
    );
    assert_eq!(risky("no", "always", "3600 1").severity, Severity::Risk);
    let everysec = risky("yes", "everysec", "");
    assert_eq!(everysec.severity, Severity::Risk);
    assert!(everysec.demonstrate.unwrap().contains("aof-everysec"));
    assert_eq!(risky("yes", "always", "").severity, Severity::Ok);
}

#[test]
fn a_primary_with_replicas_and_no_min_replicas_is_a_risk() {
    let mut node = safe("a:1");
    node.role = Some(Role::Master {
        replicas: vec!["127.0.0.1:2".into()],
    });
    let found = audit(&facts(Kind::Single, vec![node.clone()]));
    assert_eq!(severity(&found, &REPLICATION), Severity::Risk);
    assert!(of(&found, &REPLICATION)[0]
        .demonstrate
        .as_deref()
        .unwrap()
        .contains("--nemesis failover"));
    let guarded = with(node, "min-replicas-to-write", "1");
    let found = audit(&facts(Kind::Single, vec![guarded]));
    assert_eq!(severity(&found, &REPLICATION), Severity::Warning);
}

#[test]
fn a_replica_is_not_writable() {
    let mut node = safe("a:1");
    node.role = Some(Role::Replica {
        master: "127.0.0.1:2".into(),
        state: "connected".into(),
    });
    let found = audit(&facts(Kind::Single, vec![node.clone()]));
    assert_eq!(severity(&found, &WRITABLE), Severity::Risk);
    assert!(of(&found, &WRITABLE)[0]
        .what
        .contains("not writable: a replica"));
    assert!(
        of(&found, &REPLICATION).is_empty(),
        "a replica has no replicas of its own to lose"
    );
    assert!((Role::Master { replicas: vec![] }).writable().is_ok());
    assert!(Role::Sentinel
        .writable()
        .unwrap_err()
        .contains("sentinel://"));
    let err = node.role.as_ref().unwrap().writable().unwrap_err();
    assert_eq!(err, "not writable: a replica of 127.0.0.1:2");
}

#[test]
fn without_config_the_rules_that_need_it_say_unknown() {
    let mut node = safe("a:1");
    node.config = None;
    node.role = Some(Role::Master {
        replicas: vec!["127.0.0.1:2".into()],
    });
    let found = audit(&facts(Kind::Single, vec![node]));
    for rule in [&EVICTION, &PERSISTENCE, &REPLICATION] {
        assert_eq!(severity(&found, rule), Severity::Unknown, "{}", rule.name);
    }
    assert!(of(&found, &EVICTION)[0].what.contains("CONFIG refused"));
    // ROLE and PING still answered: those rules still judge.
    assert_eq!(severity(&found, &WRITABLE), Severity::Ok);
    assert_eq!(severity(&found, &LATENCY), Severity::Ok);
    assert_eq!(
        verdict(&found),
        Validity::Unknown,
        "a refused CONFIG may hide a risk"
    );
}

#[test]
fn an_unreachable_node_is_unknown_and_a_risk_still_wins() {
    let dead = Node::unreachable("a:2", "connection refused".into());
    let found = audit(&facts(
        Kind::Redlock,
        vec![safe("a:1"), dead.clone(), safe("a:3")],
    ));
    assert_eq!(severity(&found, &REACHABLE), Severity::Unknown);
    assert_eq!(verdict(&found), Validity::Unknown);
    let all_dead = audit(&facts(Kind::Single, vec![dead]));
    assert_eq!(verdict(&all_dead), Validity::Unknown);
    let risky = with(safe("a:1"), "maxmemory-policy", "allkeys-lru");
    let dead = Node::unreachable("a:2", "connection refused".into());
    let found = audit(&facts(Kind::Redlock, vec![risky, dead, safe("a:3")]));
    assert_eq!(verdict(&found), Validity::False);
}

#[test]
fn sentinel_timings_are_held_to_the_ttl() {
    let found = sentinel_facts(sentinel("5000", "180000"));
    assert_eq!(severity(&found, &DOWN_AFTER), Severity::Risk);
    let command = of(&found, &DOWN_AFTER)[0].demonstrate.clone().unwrap();
    assert!(
        command.contains("--down-after-ms 5000 --failover-timeout-ms 180000 --time-limit 220"),
        "{command}"
    );
    assert_eq!(severity(&found, &FAILOVER_TIMEOUT), Severity::Ok);

    let found = sentinel_facts(sentinel("30000", "4000"));
    assert_eq!(severity(&found, &DOWN_AFTER), Severity::Warning);
    assert_eq!(severity(&found, &FAILOVER_TIMEOUT), Severity::Warning);
    assert_eq!(verdict(&found), Validity::True);

    let found = sentinel_facts(Sentinel {
        master: None,
        ..sentinel("1", "1")
    });
    assert_eq!(severity(&found, &DOWN_AFTER), Severity::Unknown);
    assert_eq!(verdict(&found), Validity::Unknown);
}

fn apart(addr: &str, ip: &str) -> Node {
    Node {
        ip: Some(ip.parse().unwrap()),
        ..safe(addr)
    }
}

#[test]
fn redlock_nodes_must_be_independent() {
    let independent = vec![
        apart("10.0.0.1:1", "10.0.0.1"),
        apart("10.0.0.2:1", "10.0.0.2"),
        apart("10.0.0.3:1", "10.0.0.3"),
    ];
    let found = audit(&facts(Kind::Redlock, independent.clone()));
    assert_eq!(severity(&found, &INDEPENDENCE), Severity::Ok);
    assert_eq!(verdict(&found), Validity::True);

    let mut replica = independent.clone();
    replica[2].role = Some(Role::Replica {
        master: "10.0.0.1:1".into(),
        state: "connected".into(),
    });
    let found = audit(&facts(Kind::Redlock, replica));
    let hit = of(&found, &INDEPENDENCE)[0];
    assert_eq!(hit.severity, Severity::Risk);
    assert!(
        hit.what.contains("10.0.0.3:1 is a replica of 10.0.0.1:1"),
        "{hit:?}"
    );

    let mut one_server = independent.clone();
    one_server[1].server = one_server[0].server.clone();
    assert_eq!(
        severity(&audit(&facts(Kind::Redlock, one_server)), &INDEPENDENCE),
        Severity::Risk
    );

    let mut one_host = independent.clone();
    one_host[1].ip = one_host[0].ip;
    assert_eq!(
        severity(&audit(&facts(Kind::Redlock, one_host)), &INDEPENDENCE),
        Severity::Risk
    );

    let local = vec![
        safe("127.0.0.1:1"),
        safe("127.0.0.1:2"),
        safe("127.0.0.2:3"),
    ];
    let found = audit(&facts(Kind::Redlock, local));
    let hit = of(&found, &INDEPENDENCE)[0];
    assert_eq!(hit.severity, Severity::Warning);
    assert!(hit.what.contains("same machine"));
    assert_eq!(hit.nodes.len(), 3);
}

#[test]
fn redlock_clocks_apart_by_more_than_one_percent_of_the_ttl_warn() {
    let clocks = |offsets: [Option<i64>; 3]| {
        let nodes = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
            .iter()
            .zip(offsets)
            .map(|(ip, off)| Node {
                clock_offset_us: off,
                ..apart(&format!("{ip}:1"), ip)
            })
            .collect();
        severity(&audit(&facts(Kind::Redlock, nodes)), &CLOCK)
    };
    // 1% of 10 s is 100 ms.
    assert_eq!(clocks([Some(0), Some(-40_000), Some(50_000)]), Severity::Ok);
    assert_eq!(
        clocks([Some(0), Some(-60_000), Some(50_000)]),
        Severity::Warning
    );
    assert_eq!(clocks([None, None, Some(50_000)]), Severity::Unknown);
}

#[test]
fn a_slow_tail_warns_against_the_ttl() {
    let mut node = safe("a:1");
    node.pings_us = (0..100)
        .map(|i| if i < 95 { 500 } else { 1_500_000 })
        .collect();
    let found = audit(&facts(Kind::Single, vec![node.clone()]));
    let hit = of(&found, &LATENCY)[0];
    assert_eq!(hit.severity, Severity::Warning, "{hit:?}");
    assert!(
        hit.what.contains("median 0.50 ms, p99 1500.00 ms"),
        "{hit:?}"
    );
    assert_eq!(verdict(&found), Validity::True, "a warning is not a risk");
    node.pings_us = vec![];
    let found = audit(&facts(Kind::Single, vec![node]));
    assert_eq!(severity(&found, &LATENCY), Severity::Unknown);
    assert_eq!(
        verdict(&found),
        Validity::True,
        "latency only warns: its unknown hides no risk"
    );
    assert_eq!(percentile(&[1, 2, 3, 4], 50), 2);
    assert_eq!(percentile(&[7], 99), 7);
}

#[test]
fn every_reason_is_one_sentence_of_the_material() {
    for rule in RULES {
        assert!(rule.reason.ends_with('.'), "{}", rule.name);
        assert!(!rule.reason.contains('\n'), "{}", rule.name);
    }
}

#[test]
fn the_rules_show_commands_for_every_kind_of_risk() {
    let commands = demonstrations();
    assert!(commands.len() >= 7, "{commands:#?}");
    assert!(
        commands.iter().all(|c| c.starts_with("lockstorm run ")),
        "{commands:#?}"
    );
}

#[test]
fn the_summary_names_each_rule_at_risk_once() {
    let finding = |rule: &'static str, severity| Finding {
        rule,
        nodes: vec!["n".into()],
        severity,
        what: String::new(),
        reason: "",
        demonstrate: None,
    };
    let found = [
        finding("eviction", Severity::Risk),
        finding("persistence", Severity::Risk),
        finding("eviction", Severity::Risk),
        finding("latency", Severity::Ok),
    ];
    assert_eq!(
        summary(&found),
        "3 at risk (eviction, persistence), 0 unknown, 0 warning(s), 1 ok"
    );
}
