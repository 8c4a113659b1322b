//! etcd members as nodes: the lock of the `etcd` configs, three members of
//! one cluster. Like a Redis node each has its own loopback address, its
//! own folder in the run with its log (`output.log`), and two ports: one for
//! clients (and the JSON gateway), one for its peers. Its data folder
//! (`data`, write-ahead log preallocated in 64 MB files) is in its folder
//! and removed when the member is; a reaper removes it after a SIGKILL of
//! the harness. A killed member restarts on its data and rejoins.

use crate::error::{doing, Error, Result};
use crate::provision::{Launch, NodeProcess, Program, Provisioner};
use nemesis::cluster::ClockReading;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use workloads::etcd::{self, Gateway};

const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Where `LOCKSTORM_ETCD_BIN` points: the folder of `etcd`.
const BIN_ENV: &str = "LOCKSTORM_ETCD_BIN";

/// etcd on this machine: `$LOCKSTORM_ETCD_BIN/etcd`, else `etcd` on PATH.
pub fn find() -> Result<PathBuf> {
    let missing = |looked: String| Error::MissingProgram {
        program: "etcd",
        package: "etcd-server",
        env: BIN_ENV,
        looked,
    };
    if let Some(dir) = std::env::var_os(BIN_ENV) {
        let etcd = PathBuf::from(dir).join("etcd");
        return match etcd.is_file() {
            true => Ok(etcd),
            false => Err(missing(format!("{BIN_ENV}={} has no etcd", etcd.display()))),
        };
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("etcd"))
        .find(|p| p.is_file())
        .ok_or_else(|| missing("not on PATH".into()))
}

/// `etcd --version`'s first line, for `run.json`.
pub fn version() -> String {
    find()
        .ok()
        .and_then(|etcd| version_of(&etcd).ok())
        .unwrap_or_else(|| "unknown".into())
}

/// `<etcd> --version`'s first line (`etcd Version: 3.4.23`).
pub fn version_of(etcd: &Path) -> std::result::Result<String, String> {
    let out = process::output_within(Command::new(etcd).arg("--version"), crate::PROBE_WITHIN)
        .map_err(|e| format!("cannot run {} --version: {e}", etcd.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().next() {
        Some(line) if out.status.success() && line.starts_with("etcd Version") => {
            Ok(line.to_string())
        }
        _ => Err(format!(
            "{} --version did not name an etcd version ({}): set LOCKSTORM_ETCD_BIN to the folder of a working etcd",
            etcd.display(),
            out.status
        )),
    }
}

/// The wall clock of the member at `addr` (its client address), to a few
/// ms: its HTTP `Date` has whole seconds, so `/health` is asked until the
/// second turns. The member's clock crossed that second between the two
/// last answers: the reading spans them.
pub async fn wall_clock(addr: String) -> std::result::Result<ClockReading, String> {
    tokio::task::spawn_blocking(move || {
        let gateway = Gateway::new(None, Duration::from_millis(500)).map_err(|e| e.to_string())?;
        let dated = || {
            let before = nemesis::clock::real_now_ns();
            let date = gateway
                .date(&addr, "/health")
                .map_err(|e| format!("{addr}: {e}"))?;
            Ok::<_, String>((before, date, nemesis::clock::real_now_ns()))
        };
        let (mut before, first, _) = dated()?;
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while std::time::Instant::now() < deadline {
            let (next_before, date, after) = dated()?;
            if date != first {
                return Ok(ClockReading {
                    via: "Date",
                    node_ns: date,
                    before_ns: before,
                    after_ns: after,
                });
            }
            before = next_before;
        }
        Err(format!("{addr}: its Date did not turn a second in 3 s"))
    })
    .await
    .map_err(|e| e.to_string())?
}

/// Whether the member at `addr` (its client address) knows a leader now,
/// from its metrics.
pub async fn has_leader(addr: String) -> std::result::Result<bool, String> {
    tokio::task::spawn_blocking(move || {
        let gateway = Gateway::new(None, Duration::from_millis(500)).map_err(|e| e.to_string())?;
        let (_, metrics) = gateway
            .get(&addr, etcd::METRICS)
            .map_err(|e| format!("{addr}: {e:?}"))?;
        etcd::has_leader(&metrics)
            .ok_or_else(|| format!("{addr}: no etcd_server_has_leader in its metrics"))
    })
    .await
    .map_err(|e| e.to_string())?
}

/// One member of the run's etcd cluster.
pub struct EtcdMember {
    name: String,
    ip: Ipv4Addr,
    client_port: u16,
    peer_port: u16,
    dir: PathBuf,
    /// Every member's peer URL, `name=http://ip:port`, joined by commas.
    cluster: String,
    /// The cluster's token: the run's, so no member joins another run's.
    token: String,
    process: Option<Box<dyn NodeProcess>>,
    /// When its process started, as its metrics say: a new one after a
    /// restart stands for Redis's `run_id`.
    started: String,
    reaper: Option<std::process::Child>,
    /// Its time control file, when the harness serves its wall clock.
    clock: Option<PathBuf>,
}

/// Starts one member per `(name, ip, clock)` as one new cluster and waits
/// until each is healthy (it has a leader). A member with a `clock` (its
/// time control file) reads the wall clock the harness serves it
/// ([`nemesis::served_clock`]).
pub async fn start_cluster(
    members: &[(String, Ipv4Addr, Option<PathBuf>)],
    nodes_dir: &Path,
    backend: Arc<dyn Provisioner>,
    token: &str,
) -> Result<Vec<EtcdMember>> {
    find()?;
    let port = |ip: Ipv4Addr| {
        TcpListener::bind((ip, 0))
            .and_then(|l| Ok(l.local_addr()?.port()))
            .map_err(doing(format!("finding a free port on {ip}")))
    };
    let mut planned = Vec::new();
    for (name, ip, clock) in members {
        let dir = std::path::absolute(nodes_dir.join(name))
            .map_err(doing(format!("finding the folder of member {name}")))?;
        std::fs::create_dir_all(&dir).map_err(doing(format!("creating {}", dir.display())))?;
        planned.push((
            name.clone(),
            *ip,
            port(*ip)?,
            port(*ip)?,
            dir,
            clock.clone(),
        ));
    }
    let cluster = planned
        .iter()
        .map(|(name, ip, _, peer, _, _)| format!("{name}=http://{ip}:{peer}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut started = Vec::new();
    for (name, ip, client_port, peer_port, dir, clock) in planned {
        let reaper = Some(start_reaper(&dir)?);
        let mut member = EtcdMember {
            name,
            ip,
            client_port,
            peer_port,
            dir,
            clock,
            cluster: cluster.clone(),
            token: token.to_string(),
            process: None,
            started: String::new(),
            reaper,
        };
        member.process = Some(backend.launch(member.launch_spec()).await?);
        member.note_pid();
        started.push(member);
    }
    // A member is healthy only once a majority is up: all are started first.
    for member in &mut started {
        member.ready().await?;
    }
    Ok(started)
}

impl EtcdMember {
    fn launch_spec(&self) -> Launch {
        let client = format!("http://{}:{}", self.ip, self.client_port);
        let peer = format!("http://{}:{}", self.ip, self.peer_port);
        let data = self.data().display().to_string();
        let args = [
            ("--name", self.name.as_str()),
            ("--data-dir", &data),
            ("--listen-client-urls", &client),
            ("--advertise-client-urls", &client),
            ("--listen-peer-urls", &peer),
            ("--initial-advertise-peer-urls", &peer),
            ("--initial-cluster", &self.cluster),
            ("--initial-cluster-state", "new"),
            ("--initial-cluster-token", &self.token),
            ("--logger", "zap"),
            ("--log-outputs", "stderr"),
        ];
        Launch {
            name: self.name.clone(),
            program: Program::Etcd,
            args: args.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            env: Vec::new(),
            dir: self.dir.clone(),
            reads: Vec::new(),
            writes: Vec::new(),
            output: self.output_log(),
            served_clock: self.clock.clone(),
            // A group of its own, for a cut between members to tell its
            // connections from its peers' (they all dial from 127.0.0.1);
            // only root may take one, and only root cuts links.
            user: nix::unistd::geteuid()
                .is_root()
                .then(|| (0, nemesis::net::member_gid(self.ip))),
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Tells the reaper which process to wait for.
    fn note_pid(&self) {
        let _ = std::fs::write(self.dir.join(PID_FILE), format!("{}\n", self.pid()));
    }

    /// Polls until the member says it is healthy and which process it is,
    /// or fails early if the process exited.
    async fn ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let addr = self.addr();
        loop {
            if let Some(process) = self.process.as_mut() {
                if let Some(status) = process.exited().await {
                    return Err(self.error(format!("exited at start ({status})")));
                }
            }
            let a = addr.clone();
            let seen = tokio::task::spawn_blocking(move || {
                let gateway = Gateway::new(None, Duration::from_millis(500)).ok()?;
                let (_, health) = gateway.get(&a, etcd::HEALTH).ok()?;
                if !etcd::healthy(&health) {
                    return None;
                }
                let (_, metrics) = gateway.get(&a, etcd::METRICS).ok()?;
                etcd::started(&metrics)
            })
            .await
            .ok()
            .flatten();
            match seen {
                Some(started) => {
                    self.started = started;
                    return Ok(());
                }
                None if Instant::now() > deadline => {
                    return Err(self.error(format!("was not healthy within {READY_TIMEOUT:?}")))
                }
                None => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    fn error(&self, message: impl Into<String>) -> Error {
        let mut message = message.into();
        let output = std::fs::read_to_string(self.output_log()).unwrap_or_default();
        if let Some(last) = output.lines().rev().find(|l| !l.trim().is_empty()) {
            message = format!("{message}: \"{}\"", last.trim());
        }
        Error::Node {
            name: self.name.clone(),
            message,
            log: self.output_log(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    pub fn port(&self) -> u16 {
        self.client_port
    }

    /// The member as a cut between members names it: address, peer port
    /// and the group id it runs with.
    pub fn peer(&self) -> nemesis::net::Member {
        nemesis::net::Member {
            ip: self.ip,
            peer_port: self.peer_port,
            gid: nemesis::net::member_gid(self.ip),
        }
    }

    /// Its client address (the gateway's): what the lock clients talk to.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.ip, self.client_port)
    }

    pub fn pid(&self) -> u32 {
        self.process.as_ref().map_or(0, |p| p.pid())
    }

    /// The member's log (etcd writes it to its stderr).
    pub fn output_log(&self) -> PathBuf {
        self.dir.join("output.log")
    }

    /// How the member ended, if it did while counted as up.
    pub async fn died(&mut self) -> Option<String> {
        if self.pid() == 0 {
            return None;
        }
        self.process.as_mut()?.exited().await
    }

    /// The member as a fault sees it; its start time stands for `run_id`.
    pub fn node_ref(&self) -> nemesis::NodeRef {
        nemesis::NodeRef {
            name: self.name.clone(),
            pid: self.pid(),
            run_id: self.started.clone(),
        }
    }

    /// SIGKILLs the member: a crash. Returns the PID it had.
    pub async fn kill(&mut self) -> Option<u32> {
        let pid = self.pid();
        self.process.as_mut()?.kill().await;
        (pid != 0).then_some(pid)
    }

    /// Starts the member again on its data: it replays its log and rejoins
    /// (etcd fsyncs every entry before acknowledging it). Healthy again
    /// means its cluster has a leader, so a restart of a majority's last
    /// member waits for the election.
    pub async fn restart(&mut self) -> Result<()> {
        self.kill().await;
        let Some(process) = self.process.as_mut() else {
            return Err(self.error("was removed and cannot restart"));
        };
        let mut launched = process.restart().await;
        if launched.is_ok() {
            self.note_pid();
            launched = self.ready().await;
        }
        if launched.is_err() {
            self.kill().await;
        }
        launched
    }

    /// Ends the member for good and removes its data; its log stays in the
    /// run's folder.
    pub async fn remove(&mut self) {
        if let Some(process) = self.process.take() {
            process.remove().await;
        }
        let _ = std::fs::remove_dir_all(self.data());
        crate::reaper::dismiss(self.reaper.take());
    }
}

impl Drop for EtcdMember {
    fn drop(&mut self) {
        // The process ends as it drops (its own Drop); the data goes too.
        self.process = None;
        let _ = std::fs::remove_dir_all(self.data());
        crate::reaper::dismiss(self.reaper.take());
    }
}

/// Removes the member's data once the harness is gone, however it ended.
fn start_reaper(dir: &Path) -> Result<std::process::Child> {
    crate::reaper::start("etcd", &dir.join("data"), &dir.join(PID_FILE))
}

/// The file in a member's folder that names its current process, for its reaper.
const PID_FILE: &str = "etcd.pid";
