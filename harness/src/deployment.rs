//! Where a run's nodes come from, as the run's phases ask it
//! ([`Deployment`]): lockstorm's own nodes (local processes or Docker
//! containers, its backend's business), or a deployment it did not start
//! (`--target`). On the latter a run does more than run its workers there:
//! before the first write, it checks that every lock node is writable and
//! that no key of the run's prefix exists; at the end (a time limit, Ctrl-C
//! or SIGTERM alike), it removes every key of the prefix. Only read
//! commands, `SCAN` and `UNLINK` of the run's own keys: no `FLUSHALL`, no
//! `CONFIG SET`, no script that touches other keys.

use crate::error::{Error, Result};
use crate::target::{Endpoint, Target};
use crate::topology::STORAGE;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;
use workloads::conn::Login;
use workloads::Keys;

/// The environment variable an adapter reads a deployment's ACL user from
/// (its password is in [`workloads::conn::PASSWORD_ENV`]).
pub const USER_ENV: &str = "LOCKSTORM_REDIS_USER";

/// Where a run's nodes come from: what the run checks before its first
/// write and cleans after its last, what it may watch, and how its clients
/// log in. The run asks; only this type tells the two apart.
pub enum Deployment {
    /// Nodes lockstorm started for the run (on its backend, local or
    /// Docker): fresh, empty, and the run's alone.
    Own,
    /// A deployment the user named (`--target`), shared with its owner.
    Theirs(Theirs),
}

/// A deployment lockstorm did not start, as the run reaches it (a TLS one
/// through its bridges).
pub struct Theirs {
    pub target: Target,
    /// The user's node the counter lives on (`--storage-target`).
    pub storage: Option<Target>,
    /// The target's data nodes, named as the run names them.
    pub nodes: DataNodes,
}

impl Deployment {
    /// Before the first write, on a deployment lockstorm did not start:
    /// the audit (read only: what in the deployment can break a lock,
    /// beside the run that shows what does; its failure is only logged),
    /// then the preflight of the lock's nodes and the storage node. Returns
    /// each data node's server version the audit read.
    pub async fn preflight(
        &self,
        plan: &crate::RunPlan,
        dir: &Path,
    ) -> Result<BTreeMap<String, String>> {
        let Deployment::Theirs(theirs) = self else {
            return Ok(BTreeMap::new());
        };
        let target = &theirs.target;
        let mut servers = BTreeMap::new();
        match crate::audit::for_run(target, plan.ttl, dir).await {
            Ok(seen) => {
                tracing::info!("audit of {target}: {}", seen.summary);
                servers = seen.servers;
            }
            Err(e) => tracing::warn!("audit of {target} failed: {e}"),
        }
        preflight(target, theirs.nodes.clone(), &plan.keys).await?;
        if let Some(storage) = &theirs.storage {
            preflight(storage, storage_node(storage), &plan.keys).await?;
        }
        Ok(servers)
    }

    /// After the last write, whatever ended the run: on a deployment
    /// lockstorm did not start, every key of the run's prefix goes (keys
    /// the preflight found there are not the run's, and it stopped).
    pub async fn clean(&self, keys: &Keys) {
        let Deployment::Theirs(theirs) = self else {
            return;
        };
        let mut removed = clean(&theirs.target, theirs.nodes.clone(), keys).await;
        if let Some(storage) = &theirs.storage {
            removed += clean(storage, storage_node(storage), keys).await;
        }
        tracing::info!(
            "removed {removed} key(s) of {}* from {}",
            keys.prefix,
            theirs.target
        );
    }

    /// Whether lockstorm owns the nodes: only then does the run watch them
    /// (MONITOR and keyspace events would see a deployment owner's traffic
    /// and change its config) and reach them from each worker's own address
    /// (a deployment's protected mode takes 127.0.0.1, not 127.0.x.y).
    pub fn owned(&self) -> bool {
        matches!(self, Deployment::Own)
    }

    /// How the workers log in to the lock's nodes (the password stays in
    /// the environment); `None` on lockstorm's own.
    pub fn login(&self) -> Option<Login> {
        match self {
            Deployment::Own => None,
            Deployment::Theirs(theirs) => Some(theirs.target.login()),
        }
    }

    /// How the workers and the final read log in to the storage node, when
    /// it is the user's (`--storage-target`).
    pub fn storage_login(&self) -> Option<Login> {
        match self {
            Deployment::Own => None,
            Deployment::Theirs(theirs) => theirs.storage.as_ref().map(Target::login),
        }
    }

    /// What an adapter is told of the deployment: the user and master name
    /// for a target; for lockstorm's own nodes an empty password, so one
    /// left in the user's shell never reaches a node that has none.
    pub fn adapter_login(&self, spec: &mut workloads::adapter::AdapterSpec, plan: &crate::RunPlan) {
        let Deployment::Theirs(Theirs { target, .. }) = self else {
            spec.env
                .insert(workloads::conn::PASSWORD_ENV.into(), String::new());
            return;
        };
        if let Some(user) = &target.user {
            spec.env.insert(USER_ENV.into(), user.clone());
        }
        spec.db = target.db;
        if spec.master.is_some() {
            spec.master = Some(plan.master());
        }
    }

    /// On a target that names a database, the adapter's lock must land
    /// there: one told `db` in init that ignores it writes among the user's
    /// keys in database 0. The check, to run while the adapter holds the
    /// lock once, if the deployment calls for one.
    pub fn adapter_key_check(
        &self,
        keys: &Keys,
    ) -> Option<impl Fn() -> std::result::Result<(), String> + Send + 'static> {
        let Deployment::Theirs(theirs) = self else {
            return None;
        };
        if theirs.target.db == 0 {
            return None;
        }
        let (target, nodes) = (theirs.target.clone(), theirs.nodes.clone());
        let keys = keys.clone();
        Some(move || holds_a_run_key(&target, &nodes, &keys))
    }
}

/// The storage node of a `--storage-target`, named as the run names it.
fn storage_node(storage: &Target) -> DataNodes {
    vec![(STORAGE.to_string(), storage.endpoints[0].clone())]
}

/// How long a preflight or cleanup request may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Keys per `SCAN` step: a step is cheap on a large keyspace, and a run's
/// own keys are a handful.
const SCAN_COUNT: usize = 1000;

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

/// The deployment's data nodes, named as the run names them.
pub type DataNodes = Vec<(String, Endpoint)>;

/// The data nodes of a topology's deployment, by address.
pub fn data_nodes(observed: &[crate::observer::Node]) -> DataNodes {
    observed
        .iter()
        .map(|n| {
            // Reached where the run reaches it (a TLS target's bridge).
            let at = Endpoint {
                via: Some(n.addr),
                ..Endpoint::new(n.addr.ip().to_string(), n.addr.port())
            };
            (n.name.clone(), at)
        })
        .collect()
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
    found.await.map_err(|e| Error::Io {
        context: "asking the Sentinels".into(),
        source: std::io::Error::other(e),
    })?
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

/// Before the first write: the lock's nodes answer, hold no key of the
/// run's prefix (a run of the same seed is there, or was killed and its
/// keys have not expired yet), are primaries (every node of a single or
/// Redlock target; the first, the primary the Sentinels named, of a
/// Sentinel one, whose replicas are read but never written), let the login
/// run the lock's commands on the run's own keys, and, for Redlock, are
/// independent servers. A run that fails any of these could never take
/// the lock: bad input, not a finding.
pub async fn preflight(target: &Target, nodes: DataNodes, keys: &Keys) -> Result<()> {
    let (target, keys) = (target.clone(), keys.clone());
    let replicated = matches!(target.kind, crate::target::Kind::Sentinel { .. });
    let redlock = matches!(target.kind, crate::target::Kind::Redlock);
    tokio::task::spawn_blocking(move || {
        let mut servers: Vec<(String, String)> = Vec::new();
        for (i, (node, at)) in nodes.iter().enumerate() {
            let usage = |what: String| Error::Usage(format!("--target: {node} ({at}) {what}"));
            let mut con = connect(&target, at, TIMEOUT)
                .map_err(|e| usage(format!("does not answer: {e}")))?;
            let role = role(&mut con).map_err(|e| usage(format!("refused ROLE: {e}")))?;
            if i == 0 || !replicated {
                crate::audit::rules::writable(&role)
                    .map_err(|why| usage(format!("is {why}: give a primary")))?;
            }
            let found = scan(&mut con, &keys)
                .map_err(|e| usage(format!("refused SCAN: {e}")))?;
            if let Some(key) = found.first() {
                return Err(usage(format!(
                    "already holds {key:?}, a key of this run's prefix {}: a run of this config, fault and --seed is there, or was killed and its keys have not expired; wait for them, or choose another --seed",
                    keys.prefix
                )));
            }
            if i == 0 || !replicated {
                probe(&mut con, &keys).map_err(|e| {
                    usage(format!(
                        "refused the lock's commands on the run's keys ({e}): let the login run SET, EVAL and UNLINK on {}*",
                        keys.prefix
                    ))
                })?;
            }
            if redlock {
                let id = run_id(&mut con).map_err(|e| usage(format!("refused INFO: {e}")))?;
                let same = servers.iter().find(|(_, seen)| !id.is_empty() && *seen == id);
                if let Some((first, _)) = same {
                    return Err(usage(format!(
                        "is the same server as {first} (run_id {id}): Redlock's nodes must be independent servers; name each once"
                    )));
                }
                servers.push((format!("{node} ({at})"), id));
            }
        }
        Ok(())
    })
    .await
    .map_err(|e| Error::Io {
        context: "checking the target".into(),
        source: std::io::Error::other(e),
    })?
}

/// Whether a key of the run is in the target's database on one of its
/// data nodes, for an adapter holding the lock: why not, if not.
pub fn holds_a_run_key(
    target: &Target,
    nodes: &DataNodes,
    keys: &Keys,
) -> std::result::Result<(), String> {
    for (_, at) in nodes {
        let mut con = connect(target, at, TIMEOUT)?;
        if !scan(&mut con, keys).map_err(|e| e.to_string())?.is_empty() {
            return Ok(());
        }
    }
    Err(format!(
        "held the lock with no key of the run ({}*) in database {} that --target names: it ignores init's db, and wrote in database 0, among your keys (removed by its release); have it select init's db (docs/protocol.md)",
        keys.prefix, target.db
    ))
}

/// Removes every key of the run's prefix from every primary among the
/// nodes (a replica follows its primary); returns how many went. A node
/// that cannot be reached keeps its keys until their TTL.
pub async fn clean(target: &Target, nodes: DataNodes, keys: &Keys) -> usize {
    let (target, keys) = (target.clone(), keys.clone());
    let removed = tokio::task::spawn_blocking(move || {
        let mut removed = 0;
        for (node, at) in &nodes {
            let gone = connect(&target, at, TIMEOUT)
                .and_then(|mut con| unlink_prefix(&mut con, &keys).map_err(|e| e.to_string()));
            match gone {
                Ok(n) => removed += n,
                Err(e) => tracing::warn!(
                    "could not remove the run's keys ({}*) from {node} ({at}): {e}; they expire by their TTL",
                    keys.prefix
                ),
            }
        }
        removed
    });
    removed.await.unwrap_or(0)
}

/// The lock's own kinds of command, on a key of the run's own, which
/// expires by itself should the removal not come: a write with a TTL and a
/// script, as every lock here takes and releases.
fn probe(con: &mut redis::Connection, keys: &Keys) -> redis::RedisResult<()> {
    let key = format!("{}preflight", keys.prefix);
    redis::cmd("SET")
        .arg(&key)
        .arg("1")
        .arg("PX")
        .arg(PROBE_TTL_MS)
        .query::<()>(con)?;
    redis::cmd("EVAL")
        .arg("return redis.call('unlink', KEYS[1])")
        .arg(1)
        .arg(&key)
        .query::<()>(con)
}

/// How long the preflight's probe key could outlive a harness killed
/// between its two commands.
const PROBE_TTL_MS: u64 = 5_000;

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

/// The node's `ROLE`, read as the audit reads it.
fn role(con: &mut redis::Connection) -> redis::RedisResult<crate::audit::facts::Role> {
    let reply: redis::Value = redis::cmd("ROLE").query(con)?;
    Ok(
        crate::audit::gather::parse_role(&reply).unwrap_or(crate::audit::facts::Role::Other {
            name: "unreadable".into(),
        }),
    )
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

/// Removes the run's keys from one node if it is a primary: how many went.
fn unlink_prefix(con: &mut redis::Connection, keys: &Keys) -> redis::RedisResult<usize> {
    if crate::audit::rules::writable(&role(con)?).is_err() {
        return Ok(0);
    }
    let found = scan(con, keys)?;
    if found.is_empty() {
        return Ok(0);
    }
    redis::cmd("UNLINK").arg(&found).query::<usize>(con)
}

/// Every key of the run's prefix (a library's own prefix in front too).
fn scan(con: &mut redis::Connection, keys: &Keys) -> redis::RedisResult<Vec<String>> {
    let mut cursor = 0u64;
    let mut found = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(keys.pattern())
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .query(con)?;
        found.extend(batch);
        if next == 0 {
            return Ok(found);
        }
        cursor = next;
    }
}
