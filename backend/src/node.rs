//! One Redis node (`redis-server`, or `redis-sentinel`) on its own loopback
//! address and port, in its own folder under the run with its own log: its
//! settings, its readiness, and the proof that the process answering is the
//! one we started. Where the process runs is a [`Provisioner`]'s business;
//! its kill, restart and removal are every [`Server`]'s.

use crate::error::{doing, Error, Result};
use crate::provision::{Launch, Program, Provisioner};
use crate::server::{Kind, Managed, Server};
use clap::ValueEnum;
use nemesis::cluster::BoxFuture;
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// What a lock node keeps across a kill and restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Persistence {
    /// Nothing: a restarted node is empty.
    None,
    /// AOF, fsync once a second: the last second may be lost.
    AofEverysec,
    /// AOF, fsync on every write.
    AofAlways,
}

/// What a node is for, and what it needs to know to play that part.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "role")]
pub enum Role {
    /// Holds the lock (the primary, for `replicated`).
    Lock,
    /// Replicates from the primary at this address.
    Replica { primary: String },
    /// Watches the primary at this address.
    Sentinel {
        primary: String,
        quorum: u32,
        down_after_ms: u64,
        failover_timeout_ms: u64,
    },
    /// Holds the shared counter; no fault ever touches it.
    Storage,
    /// A Redis Cluster node (`cluster-enabled`): the topology gives it its
    /// slots or its master once every node has started. A master unreached
    /// for `node_timeout_ms` is failed over by its replica.
    Cluster { node_timeout_ms: u64 },
}

/// Everything needed to start — and restart — a node.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    pub name: String,
    pub role: Role,
    pub ip: Ipv4Addr,
    pub persistence: Persistence,
    /// The time shim and this node's control file, when the clock nemesis
    /// may shift its wall clock.
    pub clock: Option<NodeClock>,
}

#[derive(Clone, Debug)]
pub struct NodeClock {
    pub shim: PathBuf,
    pub control: PathBuf,
}

/// A running node. Dropping it ends the process (each backend's process
/// does so when dropped); [`Server::remove`] does it in order. Its
/// identity is the `run_id` our process answered with when it became ready.
pub struct RedisNode {
    pub spec: NodeSpec,
    core: Managed,
    backend: Arc<dyn Provisioner>,
    /// Where this launch's output begins in each of [`RedisNode::logs`].
    marks: [u64; 2],
    /// A cluster node's bus port (the nodes' gossip and failover votes):
    /// chosen free with its port, kept across restarts as the port is.
    bus_port: u16,
}

impl RedisNode {
    /// Starts a node on a free port of its address and waits until it answers PING.
    pub async fn start(
        spec: NodeSpec,
        nodes_dir: &Path,
        backend: Arc<dyn Provisioner>,
    ) -> Result<Self> {
        let mut node = RedisNode {
            core: Managed::new(&spec.name, spec.ip, nodes_dir)?,
            spec,
            backend,
            marks: [0; 2],
            bus_port: 0,
        };
        // A free port can be taken by someone else before redis binds it: retry.
        let mut last = None;
        for _ in 0..5 {
            node.core.port = node.backend.free_port(node.spec.ip)?;
            if matches!(node.spec.role, Role::Cluster { .. }) {
                node.bus_port = node.backend.free_port(node.spec.ip)?;
            }
            match node.launch().await {
                Ok(()) => return Ok(node),
                Err(e) => {
                    node.remove().await;
                    let in_use = node
                        .this_launch()
                        .iter()
                        .any(|out| out.contains("Address already in use"));
                    if !in_use {
                        return Err(e);
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.expect("the loop ran"))
    }

    async fn launch(&mut self) -> Result<()> {
        let launch = Launch {
            name: self.spec.name.clone(),
            program: match self.spec.role {
                Role::Sentinel { .. } => Program::Sentinel,
                _ => Program::Server,
            },
            args: self.args()?,
            env: match &self.spec.clock {
                Some(clock) => nemesis::clock::env_for(&clock.control, &clock.shim).to_vec(),
                None => Vec::new(),
            },
            dir: self.core.dir.clone(),
            reads: self.spec.clock.iter().map(|c| c.shim.clone()).collect(),
            writes: Vec::new(),
            output: self.output_log(),
            served_clock: None,
            user: None,
            forget_on_restart: match self.spec.persistence {
                Persistence::None => vec![
                    self.core.dir.join("dump.rdb"),
                    self.core.dir.join("appendonlydir"),
                ],
                _ => Vec::new(),
            },
        };
        self.mark_logs();
        self.core.process = Some(self.backend.launch(launch).await?);
        self.wait_ready().await?;
        self.check_shim()
    }

    /// This launch's output begins here.
    fn mark_logs(&mut self) {
        self.marks = self
            .logs()
            .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()));
    }

    /// A node the clock nemesis cannot move is a fault that would silently
    /// not happen: the shim must be mapped into the running process.
    fn check_shim(&self) -> Result<()> {
        let Some(clock) = &self.spec.clock else {
            return Ok(());
        };
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", self.pid())).map_err(doing(
            format!("reading the memory map of node {}", self.spec.name),
        ))?;
        match maps.contains(&*clock.shim.to_string_lossy()) {
            true => Ok(()),
            false => Err(self.error(&format!(
                "runs without the time shim {}",
                clock.shim.display()
            ))),
        }
    }

    /// Command-line settings (a config file for Sentinel, which insists on one).
    fn args(&self) -> Result<Vec<String>> {
        let ip = self.spec.ip.to_string();
        let mut args: Vec<String> = Vec::new();
        let mut set = |k: &str, v: &str| {
            args.push(format!("--{k}"));
            args.push(v.to_string());
        };
        set("port", &self.core.port.to_string());
        set("bind", &ip);
        // Other 127.0.0.x addresses are not "local" to protected mode.
        set("protected-mode", "no");
        set("daemonize", "no");
        set("logfile", "redis.log");
        if let Role::Sentinel {
            primary,
            quorum,
            down_after_ms,
            failover_timeout_ms,
        } = &self.spec.role
        {
            let (pip, pport) = primary.split_once(':').expect("an ip:port address");
            let conf = format!(
                "sentinel announce-ip {ip}\n\
                 sentinel resolve-hostnames no\n\
                 sentinel monitor lockstorm {pip} {pport} {quorum}\n\
                 sentinel down-after-milliseconds lockstorm {down_after_ms}\n\
                 sentinel failover-timeout lockstorm {failover_timeout_ms}\n\
                 sentinel parallel-syncs lockstorm 1\n"
            );
            let path = self.core.dir.join("sentinel.conf");
            std::fs::write(&path, conf).map_err(doing(format!("writing {}", path.display())))?;
            args.insert(0, path.display().to_string());
            return Ok(args);
        }
        // Replication links leave from the node's own address, so a
        // partition between two addresses cuts them.
        set("bind-source-addr", &ip);
        set("replica-announce-ip", &ip);
        set("repl-diskless-sync", "yes");
        set("repl-diskless-sync-delay", "0");
        set("save", "");
        match self.spec.persistence {
            Persistence::None => set("appendonly", "no"),
            Persistence::AofEverysec => {
                set("appendonly", "yes");
                set("appendfsync", "everysec");
            }
            Persistence::AofAlways => {
                set("appendonly", "yes");
                set("appendfsync", "always");
            }
        }
        if self.spec.clock.is_some() {
            // jemalloc's background thread sleeps until a wall-clock deadline
            // and spins when the shim moves that clock back.
            let [k, v] = nemesis::clock::REDIS_NODE_ARGS;
            set(k.trim_start_matches("--"), v);
        }
        if let Role::Replica { primary } = &self.spec.role {
            let (pip, pport) = primary.split_once(':').expect("an ip:port address");
            set("replicaof", &format!("{pip} {pport}"));
        }
        if let Role::Cluster { node_timeout_ms } = &self.spec.role {
            // nodes.conf is the node's cluster state (its id, epochs, who
            // holds which slots): a restart keeps it, as a real node's does,
            // and so comes back as the node it was.
            set("cluster-enabled", "yes");
            set("cluster-config-file", "nodes.conf");
            set("cluster-node-timeout", &node_timeout_ms.to_string());
            set("cluster-port", &self.bus_port.to_string());
            set("cluster-announce-ip", &ip);
        }
        Ok(args)
    }

    /// A cluster node's bus port (0 for the other roles).
    pub fn bus_port(&self) -> u16 {
        self.bus_port
    }

    pub fn log(&self) -> PathBuf {
        self.core.dir.join("redis.log")
    }

    fn logs(&self) -> [PathBuf; 2] {
        [self.output_log(), self.log()]
    }

    /// What the node wrote to each of its logs since it was last launched.
    fn this_launch(&self) -> [String; 2] {
        let [a, b] = self.logs();
        [read_from(&a, self.marks[0]), read_from(&b, self.marks[1])]
    }

    /// Polls PING until the node answers, or fails early if it exited; then
    /// checks that the answer came from our child, not from another server
    /// that holds the address (a restart on a taken port exits, and an
    /// intruder would answer in its place).
    async fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let pid = self.pid();
            if let Some(status) = self.core.exited().await {
                let mut why = format!("exited at start ({status})");
                if ping(&self.addr()).await {
                    let who = match self.answering().await {
                        Ok((who, _)) | Err(who) => who,
                    };
                    why.push_str(&format!("; {} is held by {who}", self.addr()));
                }
                return Err(self.error(&why));
            }
            if ping(&self.addr()).await {
                match self.answering().await {
                    Ok((_, Some((their, run_id)))) if their == pid => {
                        self.core.identity = run_id;
                        return Ok(());
                    }
                    Ok((who, _)) => {
                        return Err(self.error(&format!(
                            "{} is answered by {who}, not by the node we started (pid {pid}): something else listens there",
                            self.addr(),
                        )))
                    }
                    // No answer to INFO says nothing of whose server it is:
                    // a node starting on a busy machine can miss the read's
                    // timeout. Ask again until the deadline.
                    Err(who) if Instant::now() > deadline => {
                        return Err(self.error(&format!(
                            "{} is answered by {who} within {READY_TIMEOUT:?}",
                            self.addr(),
                        )))
                    }
                    Err(_) => {}
                }
            }
            if Instant::now() > deadline {
                return Err(self.error(&format!("no answer to PING within {READY_TIMEOUT:?}")));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Who answers `INFO server` on our address, for a message, and its
    /// `process_id` and `run_id` when it reports both; what to say of it
    /// when INFO got no answer.
    async fn answering(&self) -> Result<(String, Option<(u32, String)>), String> {
        let addr = self.addr();
        let info = tokio::task::spawn_blocking(move || {
            let mut con = connect(&addr)?;
            redis::cmd("INFO")
                .arg("server")
                .query::<redis::InfoDict>(&mut con)
        })
        .await;
        let info = match info {
            Ok(Ok(info)) => info,
            Ok(Err(e)) => return Err(format!("a server that answers PING but not INFO ({e})")),
            Err(e) => return Err(format!("a server we could not ask ({e})")),
        };
        let pid = info.get::<u32>("process_id");
        let run_id = info.get::<String>("run_id").filter(|r| !r.is_empty());
        let who = format!(
            "a server with pid {} and run_id {}",
            pid.map_or("?".into(), |p| p.to_string()),
            run_id.as_deref().unwrap_or("?")
        );
        Ok((who, pid.zip(run_id)))
    }
}

impl Server for RedisNode {
    fn role(&self) -> &'static str {
        match self.spec.role {
            Role::Lock => "lock",
            Role::Replica { .. } => "replica",
            Role::Sentinel { .. } => "sentinel",
            Role::Storage => "storage",
            Role::Cluster { .. } => "cluster",
        }
    }
}

impl Kind for RedisNode {
    fn core(&self) -> &Managed {
        &self.core
    }

    fn core_mut(&mut self) -> &mut Managed {
        &mut self.core
    }

    fn ready(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.wait_ready().await?;
            self.check_shim()
        })
    }

    /// A node error that quotes the node's own reason, when it gave one in
    /// this launch's output.
    fn error(&self, message: &str) -> Error {
        let mut message = message.to_string();
        let words = self.this_launch().iter().find_map(|out| last_words(out));
        if let Some(words) = words {
            message = format!("{message}: \"{words}\"");
        }
        Error::Node {
            name: self.spec.name.clone(),
            message,
            log: self.log(),
        }
    }

    /// Without persistence a node comes back empty (its launch's
    /// `forget_on_restart`, which its backend honours); this launch's
    /// output begins at the logs' ends.
    fn before_restart(&mut self) {
        self.mark_logs();
    }
}

/// What `path` holds from byte `from` on (empty if unreadable).
fn read_from(path: &Path, from: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let mut text = Vec::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f
            .seek(SeekFrom::Start(from))
            .and_then(|_| f.read_to_end(&mut text));
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// The reason a node's own output gives, as one line: its last FATAL report
/// with the lines that explain it (Redis puts the bad directive and the
/// reason on the lines after), else its last line.
fn last_words(output: &str) -> Option<String> {
    const MAX: usize = 300;
    let lines: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let last = lines.len().checked_sub(1)?;
    let from = lines
        .iter()
        .rposition(|l| l.to_ascii_lowercase().contains("fatal"))
        .unwrap_or(last);
    let mut words = lines[from..].join(" ");
    if words.len() > MAX {
        let cut = (0..=MAX)
            .rev()
            .find(|&i| words.is_char_boundary(i))
            .unwrap_or(0);
        words.truncate(cut);
        words.push('…');
    }
    Some(words)
}

async fn ping(addr: &str) -> bool {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream.write_all(b"PING\r\n").await?;
        let mut reply = [0u8; 7];
        stream.read_exact(&mut reply).await?;
        Ok::<_, std::io::Error>(&reply == b"+PONG\r\n")
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), attempt).await,
        Ok(Ok(true))
    )
}

/// A blocking connection to a node, with short timeouts: for the harness's
/// own probes and reads (readiness, Sentinel, the final look at a node).
pub fn connect(addr: &str) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://{addr}/"))?;
    let con = client.get_connection_with_timeout(Duration::from_millis(500))?;
    con.set_read_timeout(Some(Duration::from_millis(1000)))?;
    Ok(con)
}

#[cfg(test)]
mod tests {
    use super::last_words;

    #[test]
    fn last_words_quote_the_fatal_report_with_its_reason() {
        let sentinel = "\n*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\n\
                        Reading the configuration file, at line 2\n\
                        >>> 'sentinel monitor'\n\
                        Bad directive or wrong number of arguments\n";
        assert_eq!(
            last_words(sentinel).unwrap(),
            "*** FATAL CONFIG FILE ERROR (Redis 7.0.15) *** Reading the configuration file, \
             at line 2 >>> 'sentinel monitor' Bad directive or wrong number of arguments"
        );
        let log = "1:M 30 Nov # Server initialized\n\
                   1:M 30 Nov # Fatal error, can't open config file 'x'\n";
        assert_eq!(
            last_words(log).unwrap(),
            "1:M 30 Nov # Fatal error, can't open config file 'x'"
        );
        let bind = "1:M # Warning: bind: Address already in use\n1:M # Failed listening on port 1 (tcp), aborting.\n";
        assert_eq!(
            last_words(bind).unwrap(),
            "1:M # Failed listening on port 1 (tcp), aborting."
        );
        assert_eq!(last_words("\n  \n"), None);
        let long = format!("FATAL {}", "é".repeat(400));
        let quoted = last_words(&long).unwrap();
        assert!(quoted.len() <= 300 + '…'.len_utf8() && quoted.ends_with('…'));
    }
}
