//! How lockstorm reaches a deployment's nodes: where a node is (an
//! address, or the primary and replicas its Sentinels name), a blocking
//! connection logged in with the password from the environment, and what
//! an adapter is told of the login. The node's `ROLE` and `run_id` are read
//! here for the preflight, the cleanup and the fault commands alike.

use crate::role::Role;
use crate::target::{Endpoint, Target};
use crate::{Error, Result};
use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// How long a request of the preflight, the cleanup or a Sentinel query
/// may take.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(5);

/// The environment variable an adapter reads a deployment's ACL user from
/// (its password is in [`workloads::conn::PASSWORD_ENV`]).
pub const USER_ENV: &str = "LOCKSTORM_REDIS_USER";

/// What an adapter is told of a deployment: the user and master name for a
/// target; for lockstorm's own nodes an empty password, so one left in the
/// user's shell never reaches a node that has none.
pub fn adapter_login(
    spec: &mut workloads::adapter::AdapterSpec,
    target: Option<&Target>,
    master: String,
) {
    let Some(target) = target else {
        spec.env
            .insert(workloads::conn::PASSWORD_ENV.into(), String::new());
        return;
    };
    if let Some(user) = &target.user {
        spec.env.insert(USER_ENV.into(), user.clone());
    }
    spec.db = target.db;
    if spec.master.is_some() {
        spec.master = Some(master);
    }
}

/// Where the run reaches a node: its IPv4 address and port, or its TLS
/// bridge's (the workers and the proxy speak IPv4).
pub fn resolve(at: &Endpoint) -> Result<(Ipv4Addr, u16)> {
    if let Some(SocketAddr::V4(via)) = at.via {
        return Ok((*via.ip(), via.port()));
    }
    let found = (at.host.as_str(), at.port)
        .to_socket_addrs()
        .map_err(|e| Error::Usage(format!("--target: cannot resolve {}: {e}", at.host)))?;
    found
        .filter_map(|a| match a {
            SocketAddr::V4(v4) => Some((*v4.ip(), at.port)),
            SocketAddr::V6(_) => None,
        })
        .next()
        .ok_or_else(|| {
            Error::Usage(format!(
                "--target: {} has no IPv4 address; give one (lockstorm's workers speak IPv4)",
                at.host
            ))
        })
}

/// The primary and the replicas the Sentinels name for `master`, primary
/// first, from the first Sentinel that answers.
pub async fn discover(sentinels: &[String], master: &str) -> Result<Vec<Endpoint>> {
    let (sentinels, master) = (sentinels.to_vec(), master.to_string());
    let found = tokio::task::spawn_blocking(move || {
        let mut last = String::from("no Sentinel given");
        for s in &sentinels {
            match ask_sentinel(s, &master) {
                Ok(found) => return Ok(found),
                Err(e) => last = format!("{s}: {e}"),
            }
        }
        Err(Error::Usage(format!(
            "--target: no Sentinel named the primary {master:?} ({last}); check the master name and the Sentinels' addresses"
        )))
    });
    found
        .await
        .map_err(|e| crate::joined("asking the Sentinels", e))?
}

fn ask_sentinel(addr: &str, master: &str) -> redis::RedisResult<Vec<Endpoint>> {
    let client = redis::Client::open(format!("redis://{addr}/"))?;
    let mut con = client.get_connection_with_timeout(TIMEOUT)?;
    con.set_read_timeout(Some(TIMEOUT))?;
    let primary: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(master)
        .query(&mut con)?;
    let Some((host, port)) = primary else {
        return Err(redis::RedisError::from((
            redis::ErrorKind::MasterNameNotFoundBySentinel,
            "it watches no such primary",
        )));
    };
    let replicas: Vec<std::collections::HashMap<String, String>> = redis::cmd("SENTINEL")
        .arg("replicas")
        .arg(master)
        .query(&mut con)?;
    let mut found = vec![Endpoint::new(host, port)];
    for r in replicas {
        let (Some(host), Some(port)) = (r.get("ip"), r.get("port").and_then(|p| p.parse().ok()))
        else {
            continue;
        };
        found.push(Endpoint::new(host.clone(), port));
    }
    Ok(found)
}

/// Every node of the cluster `target` seeds, masters and replicas, as the
/// first seed that answers `CLUSTER NODES` names them; and the slot `key`
/// hashes to there.
pub async fn discover_cluster(target: &Target, key: &str) -> Result<(Vec<Endpoint>, u32)> {
    let (target, key) = (target.clone(), key.to_string());
    let found = tokio::task::spawn_blocking(move || {
        let mut last = String::from("no seed given");
        for seed in &target.endpoints {
            match ask_cluster(&target, seed, &key) {
                Ok(found) => return Ok(found),
                Err(e) => last = format!("{seed}: {e}"),
            }
        }
        Err(Error::Usage(format!(
            "--target: no seed of the cluster answered CLUSTER NODES ({last}); check the addresses, and that they are cluster nodes"
        )))
    });
    found
        .await
        .map_err(|e| crate::joined("asking the cluster's seeds", e))?
}

fn ask_cluster(
    target: &Target,
    seed: &Endpoint,
    key: &str,
) -> std::result::Result<(Vec<Endpoint>, u32), String> {
    let mut con = connect(target, seed, TIMEOUT)?;
    let slot: u32 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut con)
        .map_err(|e| format!("CLUSTER KEYSLOT: {e}"))?;
    Ok((cluster_members(&mut con)?, slot))
}

/// Every node a cluster node's `CLUSTER NODES` names, itself included.
pub fn cluster_members(con: &mut redis::Connection) -> std::result::Result<Vec<Endpoint>, String> {
    let text: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(con)
        .map_err(|e| format!("CLUSTER NODES: {e}"))?;
    Ok(workloads::cluster_view::parse_nodes(&text)
        .into_iter()
        .filter_map(|n| {
            let (host, port) = n.addr.rsplit_once(':')?;
            Some(Endpoint::new(host.to_string(), port.parse().ok()?))
        })
        .collect())
}

/// A blocking connection to one of a deployment's nodes as the run reaches
/// it (a TLS target through its bridge), logged in with the password from
/// the environment ([`Target::password`]); `timeout` bounds the connect and
/// each answer. An error never carries the password: the URL holding it
/// stays here. The one way lockstorm's harness talks to a user's node.
pub fn connect(
    target: &Target,
    at: &Endpoint,
    timeout: Duration,
) -> std::result::Result<redis::Connection, String> {
    let password = Target::password();
    let hide = |e: redis::RedisError| {
        let text = e.to_string();
        match password.as_deref() {
            Some(p) if !p.is_empty() => text.replace(p, "***"),
            _ => text,
        }
    };
    let client = redis::Client::open(target.url_for(at, password.as_deref())).map_err(hide)?;
    let con = client.get_connection_with_timeout(timeout).map_err(hide)?;
    con.set_read_timeout(Some(timeout)).map_err(hide)?;
    con.set_write_timeout(Some(timeout)).map_err(hide)?;
    Ok(con)
}

/// The server's `run_id` (`INFO server`): one per `redis-server` process.
pub fn run_id(con: &mut redis::Connection) -> redis::RedisResult<String> {
    let info: String = redis::cmd("INFO").arg("server").query(con)?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .unwrap_or_default()
        .trim()
        .to_string())
}

/// Whether the node runs with `cluster-enabled` (`INFO cluster`).
pub fn cluster_enabled(con: &mut redis::Connection) -> redis::RedisResult<bool> {
    let info: String = redis::cmd("INFO").arg("cluster").query(con)?;
    Ok(info.lines().any(|l| l.trim() == "cluster_enabled:1"))
}

/// The node's `ROLE`, read as the audit reads it.
pub fn role(con: &mut redis::Connection) -> redis::RedisResult<Role> {
    let reply: redis::Value = redis::cmd("ROLE").query(con)?;
    Ok(Role::parse(&reply).unwrap_or(Role::Other {
        name: "unreadable".into(),
    }))
}
