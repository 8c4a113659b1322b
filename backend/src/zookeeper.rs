//! ZooKeeper members as nodes: the lock of the `zookeeper` configs, three
//! members of one ensemble. Each is a JVM running Debian's `zookeeper`
//! package's `QuorumPeerMain` on its own loopback address, with its own
//! folder in the run (`zoo.cfg`, `output.log`, and `data` with its `myid`)
//! and three ports: one for clients (and the four-letter words), one for its
//! followers, one for leader election. A short `tickTime` lets a session
//! expire within a short run. The data folder is removed when the member is,
//! and by a reaper after a SIGKILL of the harness. A killed member restarts
//! on its data and rejoins; its kill, restart and removal are every
//! [`Server`]'s.

use crate::error::{Error, Result};
use crate::provision::{Found, Launch, Program, Provisioner};
use crate::reaper::DataFolder;
use crate::server::{free_port, Kind, Managed, Server};
use nemesis::cluster::BoxFuture;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(40);
/// Where `LOCKSTORM_ZOOKEEPER_JAR` points: ZooKeeper's server jar, whose
/// manifest names the jars it needs (Debian's does).
const JAR_ENV: &str = "LOCKSTORM_ZOOKEEPER_JAR";
const DEBIAN_JAR: &str = "/usr/share/java/zookeeper.jar";
/// A logging back end for slf4j, so the member's log reaches `output.log`
/// (without one it logs nothing); left out if it is not there.
const SLF4J_SIMPLE: &str = "/usr/share/java/slf4j-simple.jar";
/// The ensemble's heartbeat. A session's timeout must lie between 2 and 20
/// ticks; 100 ms lets a 1 s lease be a session's timeout.
const TICK_MS: u64 = 100;

/// Java and ZooKeeper's jar on this machine.
#[derive(Clone, Debug)]
struct Jvm {
    java: PathBuf,
    jar: PathBuf,
}

/// `java` on PATH, and `$LOCKSTORM_ZOOKEEPER_JAR` or Debian's jar.
fn find() -> Result<Jvm> {
    let java = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("java"))
        .find(|p| p.is_file())
        .ok_or_else(|| Error::MissingProgram {
            program: "java",
            package: "default-jre-headless",
            env: "PATH",
            looked: "not on PATH".into(),
        })?;
    let jar = std::env::var_os(JAR_ENV).map_or_else(|| PathBuf::from(DEBIAN_JAR), PathBuf::from);
    if !jar.is_file() {
        return Err(Error::MissingProgram {
            program: "ZooKeeper",
            package: "zookeeper",
            env: JAR_ENV,
            looked: format!("no {}", jar.display()),
        });
    }
    Ok(Jvm { java, jar })
}

/// ZooKeeper's version for `run.json`: from the versioned name Debian
/// links to the jar (`zookeeper-3.8.0.jar`), else as the jar reports it.
pub fn version() -> String {
    let Ok(jvm) = find() else {
        return "unknown".into();
    };
    named_version(&jvm.jar).unwrap_or_else(|| reported_version(&jvm))
}

/// The version in the name of a `zookeeper-<version>.jar` beside `jar`
/// that is the same file.
fn named_version(jar: &Path) -> Option<String> {
    let same = std::fs::canonicalize(jar).ok()?;
    std::fs::read_dir(jar.parent()?)
        .ok()?
        .flatten()
        .find_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let version = name.strip_prefix("zookeeper-")?.strip_suffix(".jar")?;
            let numbered = version.starts_with(|c: char| c.is_ascii_digit());
            (numbered && std::fs::canonicalize(entry.path()).ok()? == same)
                .then(|| format!("ZooKeeper {version}"))
        })
}

/// `VersionInfoMain`'s line (`ZooKeeper 3.8.0-… built on …`).
fn reported_version(jvm: &Jvm) -> String {
    let mut java = Command::new(&jvm.java);
    java.arg("-cp")
        .arg(&jvm.jar)
        .arg("org.apache.zookeeper.version.VersionInfoMain");
    process::output_within(&mut java, crate::PROBE_WITHIN)
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Sends a four-letter word to `addr` and returns the answer, which the
/// member writes before it closes the connection.
fn four_letters(addr: SocketAddr, word: &str, within: Duration) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, within)?;
    stream.set_read_timeout(Some(within))?;
    stream.set_write_timeout(Some(within))?;
    stream.write_all(word.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// The member's mode from its `srvr` answer (`leader`, `follower`), or
/// `None` when it serves no requests (it has no quorum).
fn mode(srvr: &str) -> Option<&str> {
    srvr.lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(str::trim)
}

/// Whether the member at `addr` (its client address) is in a quorum now:
/// it leads or follows.
pub async fn has_leader(addr: String) -> std::result::Result<bool, String> {
    tokio::task::spawn_blocking(move || {
        let at: SocketAddr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
        let srvr = four_letters(at, "srvr", Duration::from_millis(500))
            .map_err(|e| format!("{addr}: {e}"))?;
        Ok(matches!(mode(&srvr), Some("leader" | "follower")))
    })
    .await
    .map_err(|e| e.to_string())?
}

/// One member of the run's ensemble. Its core's port is its client port;
/// its identity is the process it runs as (a restart is a new one).
pub struct ZkMember {
    core: Managed,
    jvm: Jvm,
    /// Its `myid`, 1 to 3.
    id: usize,
    /// Every member's `server.N=ip:quorum:election` line.
    servers: String,
}

/// Starts one member per `(name, ip)` as one new ensemble and waits until
/// each leads or follows.
pub async fn start_ensemble(
    members: &[(String, Ipv4Addr)],
    nodes_dir: &Path,
    backend: Arc<dyn Provisioner>,
) -> Result<Vec<ZkMember>> {
    let jvm = find()?;
    let mut planned = Vec::new();
    let mut servers = String::new();
    for (i, (name, ip)) in members.iter().enumerate() {
        let mut core = Managed::new(name, *ip, nodes_dir)?;
        core.port = free_port(*ip)?;
        let (quorum, election) = (free_port(*ip)?, free_port(*ip)?);
        servers.push_str(&format!("server.{}={ip}:{quorum}:{election}\n", i + 1));
        planned.push(core);
    }
    let mut started = Vec::new();
    for (i, mut core) in planned.into_iter().enumerate() {
        let data = core.dir.join("data");
        core.data = Some(DataFolder::reaped_noting_pid(
            "zookeeper",
            &data,
            &core.dir.join(PID_FILE),
        )?);
        let member = ZkMember {
            core,
            jvm: jvm.clone(),
            id: i + 1,
            servers: servers.clone(),
        };
        member.write_config()?;
        started.push(member);
    }
    for member in &mut started {
        member.core.process = Some(backend.launch(member.launch_spec()).await?);
        member.core.note_pid();
    }
    // A member serves only once a quorum is up: all are started first.
    for member in &mut started {
        member.serving().await?;
    }
    Ok(started)
}

impl ZkMember {
    fn config(&self) -> String {
        let data = self.core.dir.join("data");
        let tick = TICK_MS;
        format!(
            "tickTime={tick}\ninitLimit=50\nsyncLimit=20\ndataDir={}\n\
             clientPortAddress={}\nclientPort={}\nadmin.enableServer=false\n\
             4lw.commands.whitelist=srvr,mntr,ruok\n\
             minSessionTimeout={}\nmaxSessionTimeout=60000\n\
             autopurge.purgeInterval=0\n{}",
            data.display(),
            self.core.ip,
            self.core.port,
            2 * tick,
            self.servers
        )
    }

    fn write_config(&self) -> Result<()> {
        let data = self.core.dir.join("data");
        let write = |path: PathBuf, text: String| {
            std::fs::write(&path, text)
                .map_err(crate::error::doing(format!("writing {}", path.display())))
        };
        std::fs::create_dir_all(&data)
            .map_err(crate::error::doing(format!("creating {}", data.display())))?;
        write(data.join("myid"), format!("{}\n", self.id))?;
        write(self.core.dir.join("zoo.cfg"), self.config())
    }

    fn launch_spec(&self) -> Launch {
        let mut classpath = self.jvm.jar.display().to_string();
        if Path::new(SLF4J_SIMPLE).is_file() {
            classpath = format!("{classpath}:{SLF4J_SIMPLE}");
        }
        let args = [
            // A small heap, one GC thread and the quick compiler: three
            // members start in seconds on two cores and stay small.
            "-Xmx192m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            &classpath,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            &self.core.dir.join("zoo.cfg").display().to_string(),
        ];
        Launch {
            name: self.core.name.clone(),
            program: Program::Found(Found {
                path: self.jvm.java.clone(),
                image: None,
                quits: false,
            }),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: Vec::new(),
            dir: self.core.dir.clone(),
            reads: vec![self.jvm.jar.clone()],
            writes: Vec::new(),
            output: self.output_log(),
            served_clock: None,
            user: None,
            forget_on_restart: Vec::new(),
        }
    }

    /// Polls `srvr` until the member leads or follows, or fails early if
    /// the process exited.
    async fn serving(&mut self) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let addr = SocketAddr::from((self.core.ip, self.core.port));
        loop {
            if let Some(status) = self.core.exited().await {
                return Err(self.error(&format!("exited at start ({status})")));
            }
            let srvr = tokio::task::spawn_blocking(move || {
                four_letters(addr, "srvr", Duration::from_millis(500)).ok()
            })
            .await
            .ok()
            .flatten();
            if srvr.as_deref().and_then(mode).is_some() {
                self.core.identity = format!("pid {}", self.pid());
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.error(&format!("was not in a quorum within {READY_TIMEOUT:?}")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Server for ZkMember {
    fn role(&self) -> &'static str {
        "lock"
    }
}

/// A restart starts the member again on its data: it rejoins the ensemble
/// (a member logs and syncs every transaction before acknowledging it).
/// Serving again means it leads or follows, so a restart of a majority's
/// last member waits for the election.
impl Kind for ZkMember {
    fn core(&self) -> &Managed {
        &self.core
    }

    fn core_mut(&mut self) -> &mut Managed {
        &mut self.core
    }

    fn ready(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.serving())
    }
}

/// The file in a member's folder that names its current process, for its reaper.
const PID_FILE: &str = "zookeeper.pid";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_without_a_quorum_has_no_mode() {
        let leading =
            "Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0.0/0\nMode: leader\nNode count: 5\n";
        assert_eq!(mode(leading), Some("leader"));
        let alone = "This ZooKeeper instance is not currently serving requests\n";
        assert_eq!(mode(alone), None);
    }
}
