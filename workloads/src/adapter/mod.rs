//! Client adapters: any lock client, in any language, driven through a
//! child process that speaks JSON lines (one request on its stdin, one
//! reply on its stdout, logs on its stderr), in the manner of Maelstrom.
//! [`protocol`] holds the messages, [`Session`] one running adapter; the
//! worker drives it as a lock client (`lock::adapter`).

pub mod protocol;
mod session;

pub use protocol::{Answer, Init, Op, Reply};
pub use session::{strays_left, Ended, Failure, Group, Session, STDERR_CAP};

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

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
    /// What its `init` says of the topology.
    pub topology: String,
    /// The name Sentinel knows the primary by (`replicated`).
    #[serde(default)]
    pub master: Option<String>,
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
            key,
            ttl_ms,
            acquire_timeout_ms,
            worker,
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
/// the adapter for the machine's load. A late `init` costs the run some of
/// its time, which its verdict accounts for; a missed one ends it.
pub const INIT_BUDGET: std::time::Duration = std::time::Duration::from_secs(20);

/// Starts an adapter in `group` and has it `init`: the hello, or why not.
/// An `init` answered `ok:false` is a [`Failure::Broken`] carrying its error.
pub fn start(
    spec: &AdapterSpec,
    init: Init,
    budget: std::time::Duration,
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
    budget: std::time::Duration,
    group: Group,
    started: impl FnOnce(u32),
) -> Result<(Session, Hello), Failure> {
    let mut session = Session::start(spec, group)?;
    started(session.pid());
    let reply = session.call(Op::Init(init), budget, |_| {})?;
    match reply.answer {
        Some(Answer::Yes) => {
            let hello = Hello {
                client: reply.client.unwrap_or_default(),
                features: reply.features,
            };
            Ok((session, hello))
        }
        _ => Err(Failure::Broken(format!(
            "the adapter `{}` refused init: {}",
            spec.command(),
            reply.error.as_deref().unwrap_or("no error given")
        ))),
    }
}
