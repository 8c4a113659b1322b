//! Client adapters: any lock client, in any language, driven through a
//! child process that speaks JSON lines (one request on its stdin, one
//! reply on its stdout, logs on its stderr), in the manner of Maelstrom.
//! [`protocol`] holds the messages, [`Session`] one running adapter; the
//! worker drives it as a lock client (`lock::adapter`) or as its storage
//! (`storage::adapter`).

pub mod protocol;
mod session;

pub use protocol::{Answer, Fence, Init, Op, Reply, StorageInit};
pub use session::{strays_left, Ended, Failure, Group, Session, STDERR_CAP};

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Called with why an adapter cannot go on (it broke the protocol): in a
/// worker, it ends the worker and with it the run.
pub type GiveUp = Arc<dyn Fn(String) + Send + Sync>;

/// Called with what the harness's log should say of an adapter that goes on.
pub type Warn = Arc<dyn Fn(String) + Send + Sync>;

/// The topology of three etcd members, for an adapter of an etcd lock
/// client: its `nodes` are the members' client addresses. Here, beside
/// `AdapterSpec::topology`, so the shipped adapters (`install`) and the lock
/// client over an adapter (`lock::adapter`) both name it without importing
/// each other.
pub const ETCD: &str = "etcd";

/// The topology of three ZooKeeper members, for an adapter of a ZooKeeper
/// lock client: its `nodes` are the members' client addresses.
pub const ZOOKEEPER: &str = "zookeeper";

/// Whether a topology's nodes are a consensus store's members, which speak
/// no Redis (nothing there for an adapter's watch to read).
pub fn speaks_redis(topology: &str) -> bool {
    topology != ETCD && topology != ZOOKEEPER
}

/// An `ok: null` without an error.
pub const UNSAID: &str = "unknown: the adapter did not say";

/// How much longer than an op's own budget (an acquire's `timeout_ms`;
/// none for the other ops) the worker waits for its reply before it
/// takes the adapter as hung: four request timeouts, at least 5 s, for a
/// library's own retries and timeouts (docs/protocol.md, "Timeouts").
pub fn grace(op_timeout: Duration) -> Duration {
    (op_timeout * 4).max(Duration::from_secs(5))
}

/// How to start one adapter process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdapterSpec {
    /// The program and its arguments, run without a shell.
    pub argv: Vec<String>,
    /// Added to its environment (a shipped adapter's `PYTHONPATH`, `NODE_PATH`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Where it runs (the harness's folder, so a relative path in the
    /// user's command means what it meant where they typed it).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Its stderr is appended here.
    pub stderr: PathBuf,
    /// What its `init` says of the topology (a lock adapter's; empty for
    /// a storage adapter, whose `init` names none).
    #[serde(default)]
    pub topology: String,
    /// The name Sentinel knows the primary by (`replicated`).
    #[serde(default)]
    pub master: Option<String>,
    /// The database its data-node connections select (a `--target`'s
    /// `/db`); 0 for lockstorm's own nodes.
    #[serde(default)]
    pub db: u32,
}

impl AdapterSpec {
    /// The command as the user would type it.
    pub fn command(&self) -> String {
        self.argv.join(" ")
    }

    /// The last lines of its stderr, for a message about how it died.
    pub fn stderr_tail(&self) -> String {
        // Its end only: the file may hold up to `STDERR_CAP`.
        let text = tail(&self.stderr, 64 * 1024);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with("--- lockstorm:") && !l.trim().is_empty())
            .collect();
        match lines.len() {
            0 => String::new(),
            n => format!(
                "; its stderr ends: {}",
                lines[n.saturating_sub(3)..].join(" | ")
            ),
        }
    }

    /// The `init` request for a worker on this topology.
    pub fn init(
        &self,
        nodes: &[String],
        sentinels: &[String],
        ttl_ms: u64,
        acquire_timeout_ms: u64,
        worker: u64,
        key: String,
    ) -> Init {
        let replicated = self.topology == "replicated";
        Init {
            topology: self.topology.clone(),
            nodes: nodes.to_vec(),
            sentinels: replicated.then(|| sentinels.to_vec()),
            master: if replicated {
                self.master.clone()
            } else {
                None
            },
            db: (self.db != 0).then_some(self.db),
            key,
            ttl_ms,
            acquire_timeout_ms,
            worker,
        }
    }
}

/// Ends a running adapter, if any, and tells `warn` of any process it left
/// outside its process group, which no kill of the group reaches.
pub fn end(session: &mut Option<Session>, warn: &Warn) {
    if let Some(session) = session.take() {
        let ended = session.close();
        if !ended.strays.is_empty() {
            warn(strays_left(&ended.strays));
        }
    }
}

/// The last `bytes` of a file, as text.
fn tail(path: &std::path::Path, bytes: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let mut text = Vec::new();
    if let Ok(mut file) = std::fs::File::open(path) {
        let len = file.metadata().map_or(0, |m| m.len());
        let _ = file.seek(SeekFrom::Start(len.saturating_sub(bytes)));
        let _ = file.take(bytes).read_to_end(&mut text);
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// What an adapter said of itself at `init`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The library and its version.
    pub client: String,
    pub features: Vec<String>,
    /// The library settings it chose over the library's defaults.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub options: std::collections::BTreeMap<String, String>,
    /// The key the library stores the lock under, when not init's own (a
    /// library that prefixes it): the one the observer watches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl Hello {
    pub fn has(&self, feature: &str) -> bool {
        self.features.iter().any(|f| f == feature)
    }
}

/// How long a freshly started adapter has to answer `init`. An interpreter
/// importing its library takes a fraction of a second alone, but seconds
/// beside others on a busy machine: five Python adapters of each of several
/// runs starting together on 2 cores missed a 5 s budget, and a run blamed
/// the adapter for the machine's load. A late `init` delays the run's clock
/// and its faults, which start once every worker is ready; a missed one
/// ends the run.
pub const INIT_BUDGET: Duration = Duration::from_secs(20);

/// Starts an adapter in `group` and has it `init`: the hello, or why not.
/// An `init` answered `ok:false` is a [`Failure::Broken`] carrying its error.
pub fn start(
    spec: &AdapterSpec,
    init: Init,
    budget: Duration,
    group: Group,
) -> Result<(Session, Hello), Failure> {
    start_noting(spec, init, budget, group, |_| {})
}

/// As [`start`], telling `started` the adapter's PID (its group's id, for
/// [`Group::Own`]) as soon as it runs: a caller that may give up on `init`
/// can then stop the adapter and whatever it started.
pub fn start_noting(
    spec: &AdapterSpec,
    init: Init,
    budget: Duration,
    group: Group,
    started: impl FnOnce(u32),
) -> Result<(Session, Hello), Failure> {
    let (session, reply) = start_with(spec, Op::Init(init), budget, group, started)?;
    let hello = Hello {
        client: reply.client.unwrap_or_default(),
        features: reply.features,
        options: reply.options,
        key: reply.key,
    };
    Ok((session, hello))
}

/// Starts a storage adapter in `group` and has it `init`: the storage it
/// names (its `storage`), or why not, as [`start`].
pub fn start_storage(
    spec: &AdapterSpec,
    init: StorageInit,
    budget: Duration,
    group: Group,
) -> Result<(Session, String), Failure> {
    let (session, reply) = start_with(spec, Op::StorageInit(init), budget, group, |_| {})?;
    Ok((session, reply.storage.unwrap_or_default()))
}

/// Starts an adapter and sends it `init`: its reply, which `parse_reply`
/// has held to the op; one that is not `ok:true` is a [`Failure::Broken`].
fn start_with(
    spec: &AdapterSpec,
    init: Op,
    budget: Duration,
    group: Group,
    started: impl FnOnce(u32),
) -> Result<(Session, Reply), Failure> {
    let mut session = Session::start(spec, group)?;
    started(session.pid());
    let reply = session.call(init, budget, |_| {})?;
    match reply.answer {
        Some(Answer::Yes) => Ok((session, reply)),
        _ => Err(Failure::Broken(format!(
            "the adapter `{}` refused init: {}",
            spec.command(),
            reply.error.as_deref().unwrap_or("no error given")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The protocol page's numbers: release and check (and a storage
    /// adapter's ops) get the grace alone, an acquire its timeout_ms and
    /// the grace.
    #[test]
    fn a_reply_may_take_its_budget_plus_four_request_timeouts_at_least_5_s() {
        assert_eq!(grace(Duration::from_millis(500)), Duration::from_secs(5));
        assert_eq!(grace(Duration::from_secs(2)), Duration::from_secs(8));
    }
}
