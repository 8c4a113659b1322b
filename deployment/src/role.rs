//! A node's role as its `ROLE` reply gives it, and whether a lock can be
//! taken there: read by the audit, the preflight, the cleanup and the fault
//! commands alike.

use redis::{FromRedisValue, Value};
use serde::Serialize;

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
