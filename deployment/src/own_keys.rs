//! What a run does on a deployment lockstorm did not start (`--target`),
//! besides running its workers there: before the first write, check that
//! every lock node is writable and that no key of the run's prefix exists;
//! at the end (a time limit, Ctrl-C or SIGTERM alike), remove every key of
//! the prefix. Only read commands, `SCAN` and `UNLINK` of the run's own keys:
//! no `FLUSHALL`, no `CONFIG SET`, no script that touches other keys.

use crate::reach::{cluster_enabled, connect, role, run_id, TIMEOUT};
use crate::target::{Endpoint, Kind, Target};
use crate::{Error, Result};
use workloads::Keys;

/// Keys per `SCAN` step: a step is cheap on a large keyspace, and a run's
/// own keys are a handful.
const SCAN_COUNT: usize = 1000;

/// The deployment's data nodes, named as the run names them.
pub type DataNodes = Vec<(String, Endpoint)>;

/// Before the first write: the lock's nodes answer, hold no key of the
/// run's prefix (a run of the same seed is there, or was killed and its
/// keys have not expired yet), are primaries (every node of a single or
/// Redlock target; the first, the primary the Sentinels named, of a
/// Sentinel one, whose replicas are read but never written; a cluster's
/// masters, its replicas read only), let the login
/// run the lock's commands on the run's own keys, and, for Redlock, are
/// independent servers. A run that fails any of these could never take
/// the lock: bad input, not a finding.
pub async fn preflight(target: &Target, nodes: DataNodes, keys: &Keys) -> Result<()> {
    let (target, keys) = (target.clone(), keys.clone());
    let replicated = matches!(target.kind, Kind::Sentinel { .. });
    let redlock = matches!(target.kind, Kind::Redlock);
    let cluster = matches!(target.kind, Kind::Cluster);
    tokio::task::spawn_blocking(move || {
        let mut servers: Vec<(String, String)> = Vec::new();
        for (i, (node, at)) in nodes.iter().enumerate() {
            let usage = |what: String| Error::Usage(format!("--target: {node} ({at}) {what}"));
            let mut con = connect(&target, at, TIMEOUT)
                .map_err(|e| usage(format!("does not answer: {e}")))?;
            let role = role(&mut con).map_err(|e| usage(format!("refused ROLE: {e}")))?;
            if !cluster && cluster_enabled(&mut con).unwrap_or(false) {
                return Err(usage(in_a_cluster(redlock, at)));
            }
            // A cluster's replica is read, never written.
            let written = match cluster {
                true => role.writable().is_ok(),
                false => i == 0 || !replicated,
            };
            if written {
                role.writable()
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
            if written {
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
    .map_err(|e| crate::joined("checking the target", e))?
}

/// Why a node of a Redis Cluster cannot be a single or Redlock target:
/// it takes a key only on the master of its slot (the others answer
/// `MOVED`), and a cluster's masters share one failover and one config.
fn in_a_cluster(redlock: bool, at: &Endpoint) -> String {
    let why = match redlock {
        true => "Redlock needs independent servers, and a cluster's masters each take a key only in their own slots (the others answer MOVED)",
        false => "it takes a key only in its own slots (the others answer MOVED)",
    };
    format!(
        "is a node of a Redis Cluster: {why}; test the cluster as --target redis+cluster://{at}"
    )
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
    let set = redis::cmd("SET")
        .arg(&key)
        .arg("1")
        .arg("PX")
        .arg(PROBE_TTL_MS)
        .query::<()>(con);
    match set {
        // A cluster master that does not serve the probe's slot: it would
        // have run the command on its own slots' keys.
        Err(e) if e.code() == Some("MOVED") => return Ok(()),
        other => other?,
    }
    redis::cmd("EVAL")
        .arg("return redis.call('unlink', KEYS[1])")
        .arg(1)
        .arg(&key)
        .query::<()>(con)
}

/// How long the preflight's probe key could outlive a harness killed
/// between its two commands.
const PROBE_TTL_MS: u64 = 5_000;

/// Removes the run's keys from one node if it is a primary: how many went.
fn unlink_prefix(con: &mut redis::Connection, keys: &Keys) -> redis::RedisResult<usize> {
    if role(con)?.writable().is_err() {
        return Ok(0);
    }
    // One key at a time: a cluster refuses keys of two slots in one command.
    let mut removed = 0;
    for key in scan(con, keys)? {
        removed += redis::cmd("UNLINK").arg(&key).query::<usize>(con)?;
    }
    Ok(removed)
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
