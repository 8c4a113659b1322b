//! The audit's rules: what gathered facts ([`Facts`]) say about a lock kept
//! in that deployment. Pure: each rule reads the facts and returns findings,
//! so each is tested with hand-written facts. A rule that needs a fact the
//! deployment would not give (CONFIG refused, a node unreachable) says
//! `unknown` rather than guessing.
//!
//! Each finding's reason is one sentence of the source material, quoted;
//! its command is the lockstorm run that shows the failure on a local copy.

use super::cluster;
use super::facts::{Facts, Node, Role, Sentinel};
use crate::target::Kind;
use checker::Validity;

use super::finding::config_unknown;
pub use super::finding::{Finding, Rule, Severity};

pub const REACHABLE: Rule = Rule {
    name: "reachable",
    at_worst: Severity::Risk,
    reason: "If you only talk to one Redis primary, the lock is only as available as that primary.",
    no_command: "nothing to run: check the address, the network and LOCKSTORM_REDIS_PASSWORD",
};
pub const WRITABLE: Rule = Rule {
    name: "writable",
    at_worst: Severity::Risk,
    reason: "The core primitive is SET with NX and an expiry.",
    no_command: "nothing to run: give the primary's address, or the Sentinels' as sentinel://host:port/<master>",
};
pub const EVICTION: Rule = Rule {
    name: "eviction",
    at_worst: Severity::Risk,
    reason: "A lock in Redis is a key whose existence means somebody holds it.",
    no_command: "none yet: lockstorm has no eviction fault (docs/faults.md lists its faults)",
};
pub const PERSISTENCE: Rule = Rule {
    name: "persistence",
    at_worst: Severity::Risk,
    reason: "With a single Redis node, the lock is gone if that node dies.",
    no_command: "",
};
pub const REPLICATION: Rule = Rule {
    name: "replication",
    at_worst: Severity::Risk,
    reason: "With a replica, replication is asynchronous: the primary can say OK and fail before the key reaches the replica, the replica is promoted (see Redis Sentinel), and a second client gets the same lock.",
    no_command: "",
};
pub const DOWN_AFTER: Rule = Rule {
    name: "sentinel-down-after",
    at_worst: Severity::Risk,
    reason: "During failover, a replica that had not received the SET can become primary.",
    no_command: "",
};
pub const FAILOVER_TIMEOUT: Rule = Rule {
    name: "sentinel-failover-timeout",
    at_worst: Severity::Warning,
    reason: "Two clients can then believe they hold the lock.",
    no_command: "",
};
pub const INDEPENDENCE: Rule = Rule {
    name: "independence",
    at_worst: Severity::Risk,
    reason: "Redlock asks five independent Redis nodes and counts the lock as taken only with a majority, inside a time budget.",
    no_command: "",
};
pub const CLOCK: Rule = Rule {
    name: "clock",
    at_worst: Severity::Warning,
    reason: "It survives a node failure, but it still relies on timing: a pause or clock jump can still make two clients believe they hold it.",
    no_command: "",
};
pub const LATENCY: Rule = Rule {
    name: "latency",
    at_worst: Severity::Warning,
    reason: "The expiry is what makes the lock safe against crashes, and also what makes it unsafe against slowness: the lock ends after 10 s whether the holder is done or not.",
    no_command: "",
};

/// The rule of that name.
pub fn rule(name: &str) -> Option<&'static Rule> {
    RULES.iter().copied().find(|r| r.name == name)
}

/// Every rule, in the order the docs list them.
pub const RULES: [&Rule; 14] = [
    &REACHABLE,
    &WRITABLE,
    &EVICTION,
    &PERSISTENCE,
    &REPLICATION,
    &DOWN_AFTER,
    &FAILOVER_TIMEOUT,
    &cluster::NODE_TIMEOUT,
    &cluster::VALIDITY,
    &cluster::REPLICAS,
    &cluster::COVERAGE,
    &INDEPENDENCE,
    &CLOCK,
    &LATENCY,
];

/// Every rule over the facts, worst first.
pub fn audit(facts: &Facts) -> Vec<Finding> {
    let mut out = Vec::new();
    for node in &facts.nodes {
        if let Some(why) = &node.unreachable {
            out.push(REACHABLE.found(&[&node.addr], Severity::Unknown, why.clone()));
        }
    }
    for s in &facts.sentinels {
        if let Some(why) = &s.unreachable {
            out.push(REACHABLE.found(&[&s.addr], Severity::Unknown, why.clone()));
        }
    }
    let reached: Vec<&Node> = facts
        .nodes
        .iter()
        .filter(|n| n.unreachable.is_none())
        .collect();
    for node in &reached {
        if facts.kind == Kind::Single {
            out.push(writable_finding(node));
        }
        out.push(eviction(node));
        out.push(persistence(node));
        out.extend(replication(node, &facts.kind));
        out.push(latency(node, facts.ttl_ms));
        if facts.kind == Kind::Cluster {
            out.extend(cluster::master(node, facts.ttl_ms));
        }
    }
    if matches!(facts.kind, Kind::Sentinel { .. }) {
        for s in facts.sentinels.iter().filter(|s| s.unreachable.is_none()) {
            out.extend(sentinel_timing(s, facts.ttl_ms));
        }
    }
    if facts.kind == Kind::Redlock {
        out.extend(independence(&reached));
        out.extend(clock(&reached, facts.ttl_ms));
    }
    out.sort_by_key(|f| f.severity);
    out
}

/// The findings in a line: `2 at risk (eviction, persistence), 0 unknown,
/// 1 warning(s), 3 ok`.
pub fn summary(findings: &[Finding]) -> String {
    let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
    // Each rule once, in the findings' order (worst first).
    let mut risky: Vec<&str> = Vec::new();
    for f in findings.iter().filter(|f| f.severity == Severity::Risk) {
        if !risky.contains(&f.rule) {
            risky.push(f.rule);
        }
    }
    let named = match risky.is_empty() {
        true => String::new(),
        false => format!(" ({})", risky.join(", ")),
    };
    format!(
        "{} at risk{named}, {} unknown, {} warning(s), {} ok",
        count(Severity::Risk),
        count(Severity::Unknown),
        count(Severity::Warning),
        count(Severity::Ok)
    )
}

/// What the findings mean for the lock: invalid when anything is at
/// risk; else unknown when a rule that can find a risk could not look (its
/// facts were refused or a node did not answer: the risk may be there,
/// unseen); else valid. Warnings and the unknowns of warning-only rules
/// leave it valid. (The exit code is the verdict's, as for a run.)
pub fn verdict(findings: &[Finding]) -> Validity {
    let at_worst = |name: &str| rule(name).map(|r| r.at_worst);
    if findings.iter().any(|f| f.severity == Severity::Risk) {
        Validity::False
    } else if findings
        .iter()
        .any(|f| f.severity == Severity::Unknown && at_worst(f.rule) == Some(Severity::Risk))
    {
        Validity::Unknown
    } else {
        Validity::True
    }
}

fn writable_finding(node: &Node) -> Finding {
    let at = [node.addr.as_str()];
    match &node.role {
        None => WRITABLE.found(&at, Severity::Unknown, "ROLE not answered".into()),
        Some(role) => match role.writable() {
            Ok(()) => WRITABLE.found(&at, Severity::Ok, "role master".into()),
            Err(why) => WRITABLE.found(&at, Severity::Risk, why),
        },
    }
}

/// `allkeys-*` may evict any key, a lock's too, whenever memory is short
/// (and a limit can be set at runtime, so the policy alone is the risk);
/// `volatile-*` evicts only keys with a TTL, which every lock key has: a
/// risk once a limit is set, a warning while there is none.
fn eviction(node: &Node) -> Finding {
    let (Some(policy), Some(limit)) = (node.config("maxmemory-policy"), node.config("maxmemory"))
    else {
        return config_unknown(&EVICTION, node, "maxmemory-policy and maxmemory");
    };
    // CONFIG GET gives bytes; anything but 0 is a limit.
    let limited = limit.trim() != "0";
    let what = format!("maxmemory-policy {policy}, maxmemory {limit}");
    let severity = if policy.starts_with("allkeys-") {
        Severity::Risk
    } else if policy.starts_with("volatile-") {
        match limited {
            true => Severity::Risk,
            false => Severity::Warning,
        }
    } else {
        Severity::Ok
    };
    let what = match severity {
        Severity::Risk => format!("{what}: lock keys can be evicted before their TTL"),
        Severity::Warning => {
            format!("{what}: lock keys would be evicted first once a limit is set")
        }
        _ => what,
    };
    EVICTION.found(&[&node.addr], severity, what)
}

/// Only an AOF fsynced on every write keeps every acknowledged lock across
/// a restart: `everysec` loses up to a second, RDB snapshots everything
/// since the last one, none everything.
fn persistence(node: &Node) -> Finding {
    let (Some(aof), Some(fsync), Some(save)) = (
        node.config("appendonly"),
        node.config("appendfsync"),
        node.config("save"),
    ) else {
        return config_unknown(&PERSISTENCE, node, "appendonly, appendfsync and save");
    };
    let at = [node.addr.as_str()];
    let found = |severity, what: String| PERSISTENCE.found(&at, severity, what);
    match (aof == "yes", fsync, save.trim().is_empty()) {
        (true, "always", _) => found(Severity::Ok, "appendonly yes, appendfsync always".into()),
        (true, fsync, _) => found(
            Severity::Risk,
            format!(
                "appendonly yes, appendfsync {fsync}: a restart loses the locks not yet fsynced"
            ),
        )
        .shown_by(match fsync {
            "everysec" => "lockstorm run --config single --nemesis kill --persistence aof-everysec",
            _ => "lockstorm run --config single --nemesis kill",
        }),
        (false, _, false) => found(
            Severity::Risk,
            format!(
                "appendonly no, save \"{save}\": a restart loses the locks since the last snapshot"
            ),
        )
        .shown_by("lockstorm run --config single --nemesis kill"),
        (false, _, true) => found(
            Severity::Risk,
            "appendonly no, save \"\": no persistence, a restarted node has no locks".into(),
        )
        .shown_by("lockstorm run --config single --nemesis kill"),
    }
}

/// A primary with replicas: unless it refuses writes without a replica
/// (`min-replicas-to-write`), a failover can lose a lock it acknowledged.
/// Even with it, replication stays asynchronous: a warning, not ok.
fn replication(node: &Node, kind: &Kind) -> Option<Finding> {
    let Some(Role::Master { replicas }) = &node.role else {
        return None;
    };
    let at = [node.addr.as_str()];
    if replicas.is_empty() {
        return Some(REPLICATION.found(&at, Severity::Ok, "no replica connected".into()));
    }
    let Some(min) = node.config("min-replicas-to-write") else {
        return Some(config_unknown(&REPLICATION, node, "min-replicas-to-write"));
    };
    let what = format!(
        "{} replica(s) connected ({}), min-replicas-to-write {min}",
        replicas.len(),
        replicas.join(", ")
    );
    let finding = match min.parse::<u64>().unwrap_or(0) {
        0 => REPLICATION.found(
            &at,
            Severity::Risk,
            format!("{what}: a failover can lose acknowledged locks"),
        ),
        _ => REPLICATION.found(
            &at,
            Severity::Warning,
            format!("{what}: fewer losses, but replication is still asynchronous"),
        ),
    };
    let config = match kind {
        Kind::Cluster => "cluster",
        _ => "replicated",
    };
    Some(finding.shown_by(format!(
        "lockstorm run --config {config} --nemesis failover"
    )))
}

/// Sentinel's timings against the lease.
///
/// `down-after-milliseconds` below the TTL is a risk: Sentinel can call the
/// primary down and promote a replica within one lease, so a lock granted
/// on the old primary just before it went quiet is still held by its client
/// while the new primary, which may never have received it, grants it
/// again. At or above the TTL those leases have run out first, but a lock
/// granted on an old primary that clients still reach while the Sentinels
/// do not is covered by no timing: a warning, never ok.
///
/// `failover-timeout`: a failover that stalls is retried after twice it, so
/// when that fits in a lease the primary can change twice while one client
/// holds the lock: a warning.
fn sentinel_timing(s: &Sentinel, ttl_ms: u64) -> Vec<Finding> {
    let at = [s.addr.as_str()];
    let field = |name: &str| -> Option<u64> { s.master.as_ref()?.get(name)?.parse().ok() };
    let mut out = Vec::new();
    // The run must fit one failover: a TTL of partition, the promotion
    // (down-after and failover-timeout at most), the restart, the quiet
    // before it and a TTL to settle (the failover package's own sum);
    // rounded up to tens of seconds, 30 at least (run's default).
    let command = |down: u64, timeout: u64| {
        let limit = (2 * ttl_ms + down + timeout + 6_000)
            .div_ceil(10_000)
            .max(3)
            * 10;
        format!(
            "lockstorm run --config replicated --nemesis failover --ttl-ms {ttl_ms} --down-after-ms {down} --failover-timeout-ms {timeout} --time-limit {limit}"
        )
    };
    let (down, timeout) = (field("down-after-milliseconds"), field("failover-timeout"));
    match down {
        None => out.push(DOWN_AFTER.found(
            &at,
            Severity::Unknown,
            "the Sentinel does not know the primary's down-after-milliseconds".into(),
        )),
        Some(d) => {
            let (severity, what) = match d < ttl_ms {
                true => (Severity::Risk, format!("down-after-milliseconds {d} < TTL {ttl_ms} ms: a replica can be promoted while a lock granted on the old primary is still held")),
                false => (Severity::Warning, format!("down-after-milliseconds {d} >= TTL {ttl_ms} ms: leases run out before a failover, but not one granted on an isolated old primary")),
            };
            out.push(
                DOWN_AFTER
                    .found(&at, severity, what)
                    .shown_by(command(d, timeout.unwrap_or(d * 5))),
            );
        }
    }
    match timeout {
        None => out.push(FAILOVER_TIMEOUT.found(
            &at,
            Severity::Unknown,
            "the Sentinel does not know the primary's failover-timeout".into(),
        )),
        Some(t) => {
            let (severity, what) = match 2 * t < ttl_ms {
                true => (Severity::Warning, format!("failover-timeout {t}: a stalled failover is retried after {} ms, within one TTL ({ttl_ms} ms)", 2 * t)),
                false => (Severity::Ok, format!("failover-timeout {t}: no second failover within one TTL ({ttl_ms} ms)")),
            };
            out.push(
                FAILOVER_TIMEOUT
                    .found(&at, severity, what)
                    .shown_by(command(down.unwrap_or(1000), t)),
            );
        }
    }
    out
}

/// Redlock counts on its nodes failing apart. Two that are one server
/// (the same `run_id`), one replicating the other or both one primary's
/// replicas, or on the same host (one address, not loopback) fail
/// together: a risk. Nodes on loopback all share this machine: a warning,
/// since that is how a test deployment looks.
fn independence(nodes: &[&Node]) -> Vec<Finding> {
    let mut out = Vec::new();
    let kill = "lockstorm run --config redlock --nemesis kill --targets majority";
    for (i, a) in nodes.iter().enumerate() {
        for b in &nodes[i + 1..] {
            let pair = [a.addr.as_str(), b.addr.as_str()];
            let why =
                if let (Some(x), Some(y)) = (a.server.get("run_id"), b.server.get("run_id")) {
                    (x == y).then(|| format!("one server (run_id {x})"))
                } else {
                    None
                }
                .or_else(|| replica_of(a, b).or_else(|| replica_of(b, a)))
                .or_else(|| match (&a.role, &b.role) {
                    (
                        Some(Role::Replica { master: x, .. }),
                        Some(Role::Replica { master: y, .. }),
                    ) if x == y => Some(format!("both replicas of {x}")),
                    _ => None,
                })
                .or_else(|| match (a.ip, b.ip) {
                    (Some(x), Some(y)) if x == y && !x.is_loopback() => {
                        Some(format!("one host ({x})"))
                    }
                    _ => None,
                });
            if let Some(why) = why {
                out.push(
                    INDEPENDENCE
                        .found(&pair, Severity::Risk, format!("not independent: {why}"))
                        .shown_by(kill),
                );
            }
        }
    }
    let local: Vec<&str> = nodes
        .iter()
        .filter(|n| n.ip.is_some_and(|ip| ip.is_loopback()))
        .map(|n| n.addr.as_str())
        .collect();
    if local.len() > 1 {
        out.push(
            INDEPENDENCE
                .found(
                    &local,
                    Severity::Warning,
                    "same machine: every node is on loopback".into(),
                )
                .shown_by(kill),
        );
    }
    if out.is_empty() && nodes.len() > 1 {
        let all: Vec<&str> = nodes.iter().map(|n| n.addr.as_str()).collect();
        out.push(INDEPENDENCE.found(
            &all,
            Severity::Ok,
            "different servers, hosts and roles".into(),
        ));
    }
    out
}

/// `a` replicates `b`: its master is `b`'s address as given, or `b`'s IP
/// and port.
fn replica_of(a: &Node, b: &Node) -> Option<String> {
    let Some(Role::Replica { master, .. }) = &a.role else {
        return None;
    };
    let (host, port) = master.rsplit_once(':')?;
    let b_port = b.addr.rsplit_once(':').map(|(_, p)| p);
    let same = *master == b.addr
        || (b_port == Some(port)
            && b.ip
                .is_some_and(|ip| host.trim_matches(['[', ']']).parse() == Ok(ip)));
    same.then(|| format!("{} is a replica of {}", a.addr, b.addr))
}

/// The nodes' clocks apart by more than 1% of the TTL: Redlock's reference
/// implementations allow that much for clock drift (a drift factor of
/// 0.01 taken off each lease's validity), so a spread beyond it is already
/// spent before any drift. `TIME` shows the clocks' offset at one moment,
/// not the rate they drift at: a warning.
fn clock(nodes: &[&Node], ttl_ms: u64) -> Option<Finding> {
    let timed: Vec<(&str, i64)> = nodes
        .iter()
        .filter_map(|n| Some((n.addr.as_str(), n.clock_offset_us?)))
        .collect();
    let all: Vec<&str> = nodes.iter().map(|n| n.addr.as_str()).collect();
    if timed.len() < 2 {
        return Some(CLOCK.found(
            &all,
            Severity::Unknown,
            "TIME answered by fewer than two nodes".into(),
        ));
    }
    let (lo, hi) = (
        timed.iter().min_by_key(|t| t.1)?,
        timed.iter().max_by_key(|t| t.1)?,
    );
    let spread_us = hi.1 - lo.1;
    let allowed_us = ttl_ms as i64 * 10; // 1% of the TTL, in µs
    let what = format!(
        "clocks {:.1} ms apart ({} ahead of {}); 1% of the TTL is {:.1} ms",
        spread_us as f64 / 1000.0,
        hi.0,
        lo.0,
        allowed_us as f64 / 1000.0
    );
    let severity = match spread_us > allowed_us {
        true => Severity::Warning,
        false => Severity::Ok,
    };
    Some(
        CLOCK
            .found(&all, severity, what)
            .shown_by("lockstorm run --config redlock --nemesis clock"),
    )
}

/// The p99 of a node's round trips above 10% of the TTL: a client counts
/// its lease from before its SET was sent, and taking the lock, checking
/// it, writing and releasing are each a round trip, so at that rate a
/// third of the lease goes to the network before any work; the tail, not
/// the median, is what meets the lease.
fn latency(node: &Node, ttl_ms: u64) -> Finding {
    let at = [node.addr.as_str()];
    let mut pings = node.pings_us.clone();
    if pings.is_empty() {
        return LATENCY.found(&at, Severity::Unknown, "no PING answered".into());
    }
    pings.sort_unstable();
    let (p50, p99) = (percentile(&pings, 50), percentile(&pings, 99));
    let limit_us = ttl_ms * 100; // 10% of the TTL, in µs
    let what = format!(
        "PING median {:.2} ms, p99 {:.2} ms over {}; 10% of the TTL is {} ms",
        p50 as f64 / 1000.0,
        p99 as f64 / 1000.0,
        pings.len(),
        limit_us / 1000
    );
    let severity = match p99 > limit_us {
        true => Severity::Warning,
        false => Severity::Ok,
    };
    let ms = |us: u64| us.div_ceil(1000).max(1);
    LATENCY.found(&at, severity, what).shown_by(format!(
        "lockstorm run --config single --nemesis delay --latency-ms {}..{}",
        ms(p50),
        ms(p99)
    ))
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[u64], p: usize) -> u64 {
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
