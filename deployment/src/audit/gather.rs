//! The audit's I/O: reads each node of a target with read-only commands
//! (`ROLE`, `INFO`, `CONFIG GET`, `TIME`, `PING`, and a Sentinel's
//! `SENTINEL master`/`replicas`), never a write. A node that does not
//! answer within the timeouts is a fact (`unreachable`), not an error.

use super::facts::{Facts, Node, Role, Sentinel};
use crate::target::{Endpoint, Kind, Target};
use redis::Value;
use std::collections::BTreeMap;
use std::net::{IpAddr, ToSocketAddrs};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Short: a node that takes longer to answer is as good as down for a lock.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// The settings the rules read, asked one at a time (older servers take
/// one name per `CONFIG GET`).
pub const CONFIG: [&str; 9] = [
    "maxmemory-policy",
    "maxmemory",
    "appendonly",
    "appendfsync",
    "save",
    "min-replicas-to-write",
    "cluster-node-timeout",
    "cluster-replica-validity-factor",
    "cluster-require-full-coverage",
];

/// `TIME` samples per node; the one with the shortest round trip is kept.
const TIME_SAMPLES: usize = 5;

/// Everything the rules need from the target's nodes (and, for
/// `sentinel://`, from the primary and replicas its Sentinels name).
pub fn gather(target: &Target, ttl_ms: u64, pings: u32) -> Facts {
    let (sentinels, data): (Vec<Sentinel>, Vec<Endpoint>) = match &target.kind {
        Kind::Sentinel { master } => {
            let sentinels: Vec<Asked> = std::thread::scope(|s| {
                let asked: Vec<_> = target
                    .endpoints
                    .iter()
                    .map(|ep| s.spawn(move || sentinel(target, ep, master)))
                    .collect();
                asked.into_iter().map(join).collect()
            });
            let data = sentinels.iter().flat_map(|s| s.named.clone()).fold(
                Vec::<Endpoint>::new(),
                |mut all, ep| {
                    if !all.contains(&ep) {
                        all.push(ep);
                    }
                    all
                },
            );
            (sentinels.into_iter().map(|s| s.facts).collect(), data)
        }
        Kind::Cluster => (Vec::new(), cluster_nodes(target)),
        Kind::Single | Kind::Redlock => (Vec::new(), target.endpoints.clone()),
    };
    let nodes = std::thread::scope(|s| {
        let asked: Vec<_> = data
            .iter()
            .map(|ep| s.spawn(move || node(target, ep, pings)))
            .collect();
        asked.into_iter().map(join).collect()
    });
    Facts {
        kind: target.kind.clone(),
        nodes,
        sentinels,
        ttl_ms,
    }
}

/// Every node of the cluster the first answering seed names; the seeds
/// themselves when none answers (each then a fact: unreachable).
fn cluster_nodes(target: &Target) -> Vec<Endpoint> {
    target
        .endpoints
        .iter()
        .find_map(|seed| crate::reach::cluster_members(&mut connect(target, seed).ok()?).ok())
        .unwrap_or_else(|| target.endpoints.clone())
}

fn join<T>(handle: std::thread::ScopedJoinHandle<'_, T>) -> T {
    handle
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// A connection to one endpoint (no password in its errors).
fn connect(target: &Target, at: &Endpoint) -> Result<redis::Connection, String> {
    crate::reach::connect(target, at, ANSWER_WITHIN)
}

fn resolve(at: &Endpoint) -> Option<IpAddr> {
    (at.host.as_str(), at.port)
        .to_socket_addrs()
        .ok()?
        .next()
        .map(|a| a.ip())
}

fn node(target: &Target, at: &Endpoint, pings: u32) -> Node {
    let addr = at.to_string();
    let mut con = match connect(target, at) {
        Ok(con) => con,
        Err(why) => return Node::unreachable(&addr, why),
    };
    // ROLE first: a node that will not say what it is cannot be judged.
    let role = match redis::cmd("ROLE").query::<Value>(&mut con) {
        Ok(reply) => Role::parse(&reply),
        Err(e) => return Node::unreachable(&addr, format!("ROLE: {e}")),
    };
    let mut info = |section: &str| {
        redis::cmd("INFO")
            .arg(section)
            .query::<String>(&mut con)
            .map(|text| parse_info(&text))
            .unwrap_or_default()
    };
    let (server, persistence, replication) =
        (info("server"), info("persistence"), info("replication"));
    // ROLE lists only replicas already in sync; one still syncing will be
    // promotable soon, so INFO's list counts too.
    let role = match role {
        Some(Role::Master { mut replicas }) => {
            for r in info_replicas(&replication) {
                if !replicas.contains(&r) {
                    replicas.push(r);
                }
            }
            Some(Role::Master { replicas })
        }
        other => other,
    };
    let config = CONFIG
        .iter()
        .map(|name| {
            let pair: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg(*name)
                .query(&mut con)
                .ok()?;
            Some(pairs(pair))
        })
        .collect::<Option<Vec<_>>>()
        .map(|maps| maps.into_iter().flatten().collect());
    Node {
        ip: resolve(at),
        role,
        server,
        persistence,
        replication,
        config,
        clock_offset_us: clock_offset(&mut con),
        pings_us: ping(&mut con, pings),
        ..Node::reached(&addr)
    }
}

/// The node's clock minus ours, read at the middle of the round trip of
/// the quickest of a few `TIME`s.
fn clock_offset(con: &mut redis::Connection) -> Option<i64> {
    let mut best: Option<(u128, i64)> = None;
    for _ in 0..TIME_SAMPLES {
        let sent = SystemTime::now().duration_since(UNIX_EPOCH).ok()?;
        let started = Instant::now();
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query(con).ok()?;
        let rtt = started.elapsed().as_micros();
        let middle = sent.as_micros() + rtt / 2;
        let offset = secs * 1_000_000 + micros - i64::try_from(middle).ok()?;
        if best.is_none_or(|(r, _)| rtt < r) {
            best = Some((rtt, offset));
        }
    }
    best.map(|(_, offset)| offset)
}

/// Round trips of `PING`, in µs, until one fails.
fn ping(con: &mut redis::Connection, n: u32) -> Vec<u64> {
    let mut out = Vec::new();
    for _ in 0..n {
        let started = Instant::now();
        if redis::cmd("PING").query::<String>(con).is_err() {
            break;
        }
        out.push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    out
}

/// A Sentinel's facts, and the data nodes it names for the primary.
struct Asked {
    facts: Sentinel,
    named: Vec<Endpoint>,
}

fn sentinel(target: &Target, at: &Endpoint, master: &str) -> Asked {
    let addr = at.to_string();
    let unreachable = |why: String| Asked {
        facts: Sentinel {
            addr: addr.clone(),
            unreachable: Some(why),
            ..Sentinel::default()
        },
        named: Vec::new(),
    };
    let mut con = match connect(target, at) {
        Ok(con) => con,
        Err(why) => return unreachable(why),
    };
    let server = match redis::cmd("INFO").arg("server").query::<String>(&mut con) {
        Ok(text) => parse_info(&text),
        Err(e) => return unreachable(format!("INFO: {e}")),
    };
    // An unknown primary is an error reply: the rules say unknown for it.
    let primary: Option<BTreeMap<String, String>> = redis::cmd("SENTINEL")
        .arg("master")
        .arg(master)
        .query::<Vec<String>>(&mut con)
        .ok()
        .map(pairs);
    let replicas: Vec<BTreeMap<String, String>> = redis::cmd("SENTINEL")
        .arg("replicas")
        .arg(master)
        .query::<Vec<Vec<String>>>(&mut con)
        .map(|all| all.into_iter().map(pairs).collect())
        .unwrap_or_default();
    let named = primary
        .iter()
        .chain(&replicas)
        .filter_map(|fields| {
            Some(Endpoint::new(
                fields.get("ip")?.clone(),
                fields.get("port")?.parse().ok()?,
            ))
        })
        .collect();
    Asked {
        facts: Sentinel {
            addr,
            unreachable: None,
            server,
            master: primary,
        },
        named,
    }
}

/// `INFO`'s `name:value` lines (comments and blank lines skipped).
pub fn parse_info(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.trim_end().split_once(':'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The replicas `INFO replication` lists (`slaveN:ip=…,port=…,…`), as
/// `ip:port`.
fn info_replicas(replication: &BTreeMap<String, String>) -> Vec<String> {
    replication
        .iter()
        .filter(|(k, _)| {
            k.strip_prefix("slave")
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter_map(|(_, v)| {
            let field = |name: &str| {
                v.split(',')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            };
            Some(format!("{}:{}", field("ip")?, field("port")?))
        })
        .collect()
}

/// A flat `[name, value, name, value…]` reply as a map.
fn pairs(flat: Vec<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut it = flat.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.insert(k, v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn role_replies_read_as_roles() {
        let master = Value::Array(vec![
            bulk("master"),
            Value::Int(42),
            Value::Array(vec![Value::Array(vec![
                bulk("127.0.0.1"),
                bulk("7001"),
                bulk("42"),
            ])]),
        ]);
        assert_eq!(
            Role::parse(&master),
            Some(Role::Master {
                replicas: vec!["127.0.0.1:7001".into()]
            })
        );
        let replica = Value::Array(vec![
            bulk("slave"),
            bulk("127.0.0.1"),
            Value::Int(7000),
            bulk("connected"),
            Value::Int(42),
        ]);
        assert_eq!(
            Role::parse(&replica),
            Some(Role::Replica {
                master: "127.0.0.1:7000".into(),
                state: "connected".into()
            })
        );
        let sentinel = Value::Array(vec![bulk("sentinel"), Value::Array(vec![bulk("mm")])]);
        assert_eq!(Role::parse(&sentinel), Some(Role::Sentinel));
        assert_eq!(Role::parse(&Value::Nil), None);
    }

    #[test]
    fn info_reads_its_fields() {
        let info = parse_info("# Server\r\nredis_version:7.0.15\r\nos:Linux 6.1 x86_64\r\n\r\n");
        assert_eq!(info["redis_version"], "7.0.15");
        assert_eq!(info["os"], "Linux 6.1 x86_64");
        assert_eq!(info.len(), 2);
        let replication = parse_info(
            "role:master\r\nconnected_slaves:1\r\nslave0:ip=127.0.0.1,port=7001,state=wait_bgsave,offset=0,lag=0\r\nslave_read_only:1\r\n",
        );
        assert_eq!(info_replicas(&replication), ["127.0.0.1:7001"]);
        let flat = vec!["a".to_string(), "1".into(), "b".into(), "".into()];
        assert_eq!(
            pairs(flat),
            BTreeMap::from([("a".into(), "1".into()), ("b".into(), "".into())])
        );
    }
}
