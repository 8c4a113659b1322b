//! What `audit` gathered from a deployment, as plain data: the rules
//! ([`super::rules`]) read nothing else, so each can be tested with
//! hand-written facts and no server.

use redis::{FromRedisValue, Value};
use serde::Serialize;
use std::collections::BTreeMap;

/// A node's role as its `ROLE` reply gives it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "role", rename_all = "kebab-case")]
pub enum Role {
    /// A primary, with the replicas connected to it (`ip:port`).
    Master {
        replicas: Vec<String>,
    },
    /// A replica of `master` (`host:port` as the replica was told).
    Replica {
        master: String,
        state: String,
    },
    Sentinel,
    Other {
        name: String,
    },
}

impl Role {
    /// A `ROLE` reply: `[master, offset, [[ip, port, offset]…]]`,
    /// `[slave, ip, port, state, offset]` or `[sentinel, [names]]`.
    pub fn parse(reply: &Value) -> Option<Role> {
        let text = |v: &Value| String::from_redis_value_ref(v).ok();
        let Value::Array(parts) = reply else {
            return None;
        };
        let name = text(parts.first()?)?;
        Some(match name.as_str() {
            "master" => {
                let replicas = match parts.get(2) {
                    Some(Value::Array(rs)) => rs
                        .iter()
                        .filter_map(|r| match r {
                            Value::Array(f) => {
                                Some(format!("{}:{}", text(f.first()?)?, text(f.get(1)?)?))
                            }
                            _ => None,
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                Role::Master { replicas }
            }
            "slave" | "replica" => Role::Replica {
                master: format!("{}:{}", text(parts.get(1)?)?, text(parts.get(2)?)?),
                state: parts.get(3).and_then(text).unwrap_or_default(),
            },
            "sentinel" => Role::Sentinel,
            _ => Role::Other { name },
        })
    }

    /// Whether a lock can be taken on a node in this role: only a primary
    /// accepts `SET … NX`. The run's preflight refuses a replica with it before
    /// any write.
    pub fn writable(&self) -> Result<(), String> {
        match self {
            Role::Master { .. } => Ok(()),
            Role::Replica { master, .. } => Err(format!("not writable: a replica of {master}")),
            Role::Sentinel => Err(
                "not writable: a Sentinel, not a data node; name it as sentinel://host:port/<master>"
                    .into(),
            ),
            Role::Other { name } => Err(format!("not writable: its role is {name}")),
        }
    }
}

/// One data node as it answered (or did not).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Node {
    /// `host:port` as the target (or a Sentinel) named it.
    pub addr: String,
    /// The address it resolved to, if it did.
    pub ip: Option<std::net::IpAddr>,
    /// Why it could not be read at all; every other field is then empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<String>,
    pub role: Option<Role>,
    /// `INFO server` (redis_version, run_id, process_id, tcp_port, os…).
    pub server: BTreeMap<String, String>,
    pub persistence: BTreeMap<String, String>,
    pub replication: BTreeMap<String, String>,
    /// The `CONFIG GET` values asked for; `None` when the service refused
    /// CONFIG (renamed away, an ACL, a managed service).
    pub config: Option<BTreeMap<String, String>>,
    /// The node's clock minus ours, in µs, from `TIME` corrected by half
    /// the round trip.
    pub clock_offset_us: Option<i64>,
    /// Round trips of `PING`, in µs.
    pub pings_us: Vec<u64>,
}

impl Node {
    pub fn reached(addr: &str) -> Node {
        Node {
            addr: addr.into(),
            ..Node::default()
        }
    }

    pub fn unreachable(addr: &str, why: String) -> Node {
        Node {
            unreachable: Some(why),
            ..Node::reached(addr)
        }
    }

    pub fn config(&self, name: &str) -> Option<&str> {
        self.config.as_ref()?.get(name).map(String::as_str)
    }
}

/// One Sentinel and what it says of the primary it was asked about.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Sentinel {
    pub addr: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<String>,
    pub server: BTreeMap<String, String>,
    /// `SENTINEL master <name>`: down-after-milliseconds,
    /// failover-timeout, quorum, num-slaves, num-other-sentinels…; `None`
    /// when it does not know the primary.
    pub master: Option<BTreeMap<String, String>>,
}

/// Everything the rules look at.
#[derive(Clone, Debug)]
pub struct Facts {
    pub kind: crate::target::Kind,
    pub nodes: Vec<Node>,
    pub sentinels: Vec<Sentinel>,
    pub ttl_ms: u64,
}
