//! What `audit` gathered from a deployment, as plain data: the rules
//! ([`super::rules`]) read nothing else, so each can be tested with
//! hand-written facts and no server.

pub use crate::role::Role;
use serde::Serialize;
use std::collections::BTreeMap;

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
