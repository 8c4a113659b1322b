//! The provisioner of `--nodes`: each node's process runs on its host
//! (which host: [`super::host_of`]), started by the wrapper shell through a
//! channel of the host's master connection that lives as long as the
//! process. The channel's output says the process's PID and how it ended;
//! its input is the harness's hold on it (a killed harness, or a lost
//! connection, ends the process on the host). Logs and configs are
//! fetched back into the node's folder here whenever the process ends.

use super::firewall::HostFirewall;
use super::host::{login_for, Host, WITHIN};
use super::{host_of, needed_programs, parse_said, quote, wrapper, Destination, Said};
use crate::error::{doing, Error, Result};
use crate::provision::{Launch, NodeProcess, Program, Provisioner};
use nemesis::cluster::BoxFuture;
use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use store::BackendRecord;
use tokio::sync::watch;

/// The run's hosts, connected and checked.
#[derive(Clone)]
pub struct Remote {
    hosts: Vec<Arc<Host>>,
    /// The run's cuts between them.
    pub(super) firewall: Arc<HostFirewall>,
    /// Every process started, as (host index, pid): what the end's check
    /// looks for.
    started: Arc<Mutex<Vec<(usize, u32)>>>,
    redis_version: String,
    /// The topology's data nodes: where its Sentinels go.
    data_nodes: usize,
}

/// Logs in to every host of `dests`, makes the run's folder on each and
/// checks that each has the programs the run needs (`sentinel`: Redis
/// Sentinel; `cuts`: the tools of a cut between hosts). Any failure says
/// which host and what, in one line, and leaves nothing on the others.
pub async fn connect(
    dests: &[Destination],
    key: Option<&Path>,
    setup: Setup,
) -> Result<Arc<Remote>> {
    let home = format!(
        "/tmp/lockstorm-run-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let mut tasks = tokio::task::JoinSet::new();
    for (i, dest) in dests.iter().enumerate() {
        let (dest, login, home) = (dest.clone(), login_for(dest, key), home.clone());
        tasks.spawn(async move { (i, Host::connect(&dest, &login, &home).await) });
    }
    let mut hosts: Vec<Option<Host>> = dests.iter().map(|_| None).collect();
    let mut failed = None;
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((i, Ok(host))) => hosts[i] = Some(host),
            Ok((_, Err(e))) => failed = failed.or(Some(e)),
            Err(e) => failed = failed.or(Some(Error::Usage(format!("connecting: {e}")))),
        }
    }
    let hosts: Vec<Host> = match failed {
        Some(e) => return Err(close_all(hosts.into_iter().flatten().collect(), e).await),
        None => hosts.into_iter().flatten().collect(),
    };
    let needed = needed_programs(setup.sentinel, setup.cuts);
    for host in &hosts {
        if let Err(e) = set_up(host, &needed, setup.install).await {
            return Err(close_all(hosts, e).await);
        }
    }
    let redis_version = match hosts[0].run("redis-server --version").await {
        Ok(v) => v.trim().to_string(),
        Err(e) => format!("unknown ({e})"),
    };
    Ok(Arc::new(Remote {
        hosts: hosts.into_iter().map(Arc::new).collect(),
        firewall: Arc::default(),
        started: Arc::default(),
        redis_version,
        data_nodes: setup.data_nodes,
    }))
}

/// What a run needs of its hosts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Setup {
    /// Redis Sentinel (`replicated`).
    pub sentinel: bool,
    /// The topology's data nodes, n1…: the Sentinels' hosts follow theirs.
    pub data_nodes: usize,
    /// Cuts between hosts (`failover`).
    pub cuts: bool,
    /// `--install`: Debian's `apt-get install` of what a host lacks.
    pub install: bool,
}

/// How long `--install`'s `apt-get` may take on one host.
const INSTALL_WITHIN: std::time::Duration = std::time::Duration::from_secs(300);

/// Checks that `host` has every program of `needed`; with `install`,
/// installs the packages of those it lacks first (as Jepsen's
/// `db/setup!`), and checks again.
async fn set_up(host: &Host, needed: &[(&str, &str)], install: bool) -> Result<()> {
    let lacks = host.missing(needed).await?;
    if lacks.is_empty() {
        return Ok(());
    }
    let package = |p: &String| needed.iter().find(|(n, _)| n == p).map(|(_, k)| *k);
    let packages: Vec<&str> = lacks.iter().filter_map(package).collect();
    let apt = format!("apt-get install -y {}", packages.join(" "));
    let (dest, lacks) = (&host.dest, lacks.join(", "));
    if !install {
        return Err(Error::Usage(format!(
            "host {dest} has no {lacks} on its PATH: install it there ({apt}), add --install, or leave the host out of --nodes"
        )));
    }
    let quiet =
        format!("DEBIAN_FRONTEND=noninteractive {apt} -qq --no-install-recommends >/dev/null");
    let script = format!("{quiet} || {{ apt-get update -qq && {quiet}; }}");
    host.run_within(&script, INSTALL_WITHIN).await?;
    let still = host.missing(needed).await?;
    match still.is_empty() {
        true => Ok(()),
        false => Err(Error::Usage(format!(
            "host {dest} still has no {} after `{apt}`: install it there by hand, or leave the host out of --nodes",
            still.join(", ")
        ))),
    }
}

/// Closes every host (removing the run's folder there) and returns `e`.
async fn close_all(hosts: Vec<Host>, e: Error) -> Error {
    for host in hosts {
        let _ = host.close().await;
    }
    e
}

impl Remote {
    /// The host node `name` runs on, and its index in `--nodes`.
    pub(super) fn host_for(&self, name: &str) -> (usize, &Arc<Host>) {
        let index = host_of(name, self.hosts.len(), self.data_nodes);
        (index, &self.hosts[index])
    }

    /// Removes the run's folder on every host (at once) and says what of
    /// the run is still there: a process it started that still runs, or
    /// its folder; one line each, naming the host.
    pub async fn clear(&self) -> Vec<String> {
        let started = self
            .started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut looks = tokio::task::JoinSet::new();
        for (i, host) in self.hosts.iter().enumerate() {
            let pids: Vec<String> = started
                .iter()
                .filter(|(h, _)| *h == i)
                .map(|(_, p)| p.to_string())
                .collect();
            let host = host.clone();
            looks.spawn(async move {
                let said = host.run(&clear_script(&host.home, &pids)).await;
                match said {
                    Ok(out) => out.lines().map(|l| format!("{}: {l}", host.dest)).collect(),
                    Err(e) => vec![format!("{}: cannot look ({e})", host.dest)],
                }
            });
        }
        let mut left: Vec<String> = Vec::new();
        while let Some(said) = looks.join_next().await {
            left.extend(said.unwrap_or_else(|e| vec![format!("a host's look failed: {e}")]));
        }
        left.sort();
        left
    }
}

/// Removes `home` and prints what is left of it and of `pids`.
fn clear_script(home: &str, pids: &[String]) -> String {
    let h = quote(home);
    let mut script = format!("rm -rf {h}; [ ! -e {h} ] || echo \"folder {home} is left\"");
    if !pids.is_empty() {
        script.push_str(&format!(
            "; for p in {}; do kill -0 $p 2>/dev/null && echo \"process $p still runs\"; done; true",
            pids.join(" ")
        ));
    }
    script
}

impl Provisioner for Remote {
    fn launch(&self, launch: Launch) -> BoxFuture<'_, Result<Box<dyn NodeProcess>>> {
        Box::pin(async move {
            let program = match &launch.program {
                Program::Server => "redis-server",
                Program::Sentinel => "redis-sentinel",
                Program::Found(found) => {
                    return Err(Error::Usage(format!(
                        "node {}: {} does not run on --nodes hosts yet: only Redis's nodes do",
                        launch.name,
                        found.path.display()
                    )))
                }
            };
            if !launch.reads.is_empty() || launch.served_clock.is_some() || launch.user.is_some() {
                return Err(Error::Usage(format!(
                    "node {}: a node that reads a time shim or runs as another user does not run on --nodes hosts yet",
                    launch.name
                )));
            }
            let index = host_of(&launch.name, self.hosts.len(), self.data_nodes);
            let host = self.hosts[index].clone();
            let mut node = RemoteProcess::new(host, index, program, launch, self.started.clone());
            node.upload().await?;
            node.spawn().await?;
            Ok(Box::new(node) as Box<dyn NodeProcess>)
        })
    }

    fn record(&self) -> BackendRecord {
        BackendRecord {
            kind: "ssh".into(),
            hosts: self.hosts.iter().map(|h| h.dest.to_string()).collect(),
            ..BackendRecord::default()
        }
    }

    fn redis_version(&self) -> String {
        self.redis_version.clone()
    }

    fn address_of(&self, name: &str) -> Option<std::net::Ipv4Addr> {
        Some(self.host_for(name).1.addr)
    }

    /// A port the host's own kernel would not hand out to a client
    /// (below Linux's ephemeral range), drawn anew each time.
    fn free_port(&self, _ip: std::net::Ipv4Addr) -> Result<u16> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        Ok(20_000 + (nanos % 12_000) as u16)
    }

    fn hosts(&self) -> Option<Arc<dyn crate::provision::Hosts>> {
        Some(Arc::new(self.clone()))
    }

    /// Removes the run's folders on the hosts and checks that nothing of
    /// the run is left there: a leftover is a warning naming the host.
    fn finish(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            for left in self.clear().await {
                tracing::warn!("left on a host: {left}");
            }
        })
    }
}

/// What the wrapper has said of its process.
#[derive(Clone, Debug, Default)]
struct Heard {
    pid: Option<u32>,
    exit: Option<String>,
    /// The channel closed without an `exit` line: the connection is gone.
    lost: bool,
}

struct RemoteProcess {
    host: Arc<Host>,
    index: usize,
    program: &'static str,
    launch: Launch,
    /// The node's folder on the host.
    dir: String,
    started: Arc<Mutex<Vec<(usize, u32)>>>,
    channel: Option<std::process::Child>,
    heard: watch::Receiver<Heard>,
    /// The logs were fetched since the process ended.
    fetched: bool,
}

impl RemoteProcess {
    fn new(
        host: Arc<Host>,
        index: usize,
        program: &'static str,
        launch: Launch,
        started: Arc<Mutex<Vec<(usize, u32)>>>,
    ) -> Self {
        let dir = format!("{}/{}", host.home, launch.name);
        RemoteProcess {
            host,
            index,
            program,
            launch,
            dir,
            started,
            channel: None,
            heard: watch::channel(Heard::default()).1,
            fetched: false,
        }
    }

    /// A local path of the node's folder, as the host has it.
    fn there(&self, path: &str) -> String {
        let local = self.launch.dir.display().to_string();
        match path.strip_prefix(&local) {
            Some(rest) => format!("{}{rest}", self.dir),
            None => path.to_string(),
        }
    }

    /// Makes the node's folder on the host, with every file of its
    /// arguments that the harness wrote here (Sentinel's config).
    async fn upload(&self) -> Result<()> {
        self.host
            .run(&format!("mkdir -p {}", quote(&self.dir)))
            .await?;
        for arg in &self.launch.args {
            let path = Path::new(arg);
            if path.starts_with(&self.launch.dir) && path.is_file() {
                let bytes = std::fs::read(path).map_err(doing(format!("reading {arg}")))?;
                let script = format!("cat > {}", quote(&self.there(arg)));
                self.host.run_with(&script, Some(&bytes)).await?;
            }
        }
        Ok(())
    }

    /// Starts the process through a new channel and waits for its PID.
    async fn spawn(&mut self) -> Result<()> {
        let args: Vec<String> = self.launch.args.iter().map(|a| self.there(a)).collect();
        // What a restart starts without: nothing there yet at the first start.
        let forget: Vec<String> = (self.launch.forget_on_restart.iter())
            .map(|p| self.there(&p.display().to_string()))
            .collect();
        let script = wrapper(&self.dir, self.program, &args, &self.launch.env, &forget);
        let mut cmd = self.host.channel(&script);
        process::isolate(&mut cmd);
        let mut child = cmd.spawn().map_err(doing(format!(
            "starting ssh for node {} on {}",
            self.launch.name, self.host.dest
        )))?;
        let (tx, rx) = watch::channel(Heard::default());
        let stdout = child.stdout.take().expect("piped");
        std::thread::spawn(move || listen(stdout, tx));
        self.channel = Some(child);
        self.heard = rx.clone();
        self.fetched = false;
        let mut rx = rx;
        let said = tokio::time::timeout(
            WITHIN,
            rx.wait_for(|h| h.pid.is_some() || h.exit.is_some() || h.lost),
        )
        .await;
        let heard = match said {
            Ok(Ok(heard)) => heard.clone(),
            _ => Heard::default(),
        };
        match heard.pid {
            Some(pid) => {
                self.started
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((self.index, pid));
                Ok(())
            }
            None => {
                self.close_channel();
                Err(Error::Usage(format!(
                    "node {}: {} did not start it within {WITHIN:?}",
                    self.launch.name, self.host.dest
                )))
            }
        }
    }

    fn heard(&self) -> Heard {
        self.heard.borrow().clone()
    }

    /// Ends the channel here: its input closes, so the host kills the
    /// process group if it still runs.
    fn close_channel(&mut self) {
        if let Some(mut child) = self.channel.take() {
            drop(child.stdin.take());
            let _ = process::kill_now(child.id());
            let _ = child.wait();
        }
    }

    /// Kills the process group on the host and waits for the wrapper to
    /// say it ended.
    async fn kill_now(&mut self) {
        let heard = self.heard();
        let Some(child) = self.channel.as_mut() else {
            return;
        };
        if heard.exit.is_none() && !heard.lost {
            let asked = child
                .stdin
                .as_mut()
                .map(|s| s.write_all(b"kill\n").and_then(|()| s.flush()));
            let mut rx = self.heard.clone();
            let ended = tokio::time::timeout(WITHIN, rx.wait_for(|h| h.exit.is_some() || h.lost))
                .await
                .is_ok_and(|r| r.is_ok());
            if asked.is_none_or(|a| a.is_err()) || !ended {
                tracing::info!(
                    "{}: node {} did not end on its channel's word within {WITHIN:?}: killed by its pid",
                    self.host.dest,
                    self.launch.name
                );
                if let Some(pid) = heard.pid {
                    let _ = self
                        .host
                        .run(&format!("kill -KILL -{pid} 2>/dev/null; true"))
                        .await;
                }
            }
        }
        self.close_channel();
    }

    /// Copies the node's logs and configs from its folder on the host into
    /// its folder here.
    async fn fetch_logs(&mut self) {
        if self.fetched {
            return;
        }
        self.fetched = true;
        // Every file in one answer, each after a line with its name and size.
        let script = format!(
            "cd {} && for f in *.log *.conf; do [ -f \"$f\" ] && echo \"$f $(wc -c < \"$f\")\" && cat \"$f\"; done; true",
            quote(&self.dir)
        );
        let bytes = match self.host.run_bytes(&script).await {
            Ok(bytes) => bytes,
            Err(e) => return tracing::warn!("fetching the logs of node {}: {e}", self.launch.name),
        };
        for (name, content) in super::unpack(&bytes) {
            let _ = std::fs::write(self.launch.dir.join(name), content);
        }
    }
}

/// Reads the wrapper's lines until the channel closes.
fn listen(stdout: std::process::ChildStdout, tx: watch::Sender<Heard>) {
    for line in std::io::BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        match parse_said(&line) {
            Some(Said::Pid(pid)) => tx.send_modify(|h| h.pid = Some(pid)),
            Some(Said::Exit(status)) => tx.send_modify(|h| h.exit = Some(status)),
            None => {}
        }
    }
    tx.send_modify(|h| h.lost = h.exit.is_none());
}

impl NodeProcess for RemoteProcess {
    fn pid(&self) -> u32 {
        match self.channel {
            Some(_) => self.heard().pid.unwrap_or(0),
            None => 0,
        }
    }

    fn exited(&mut self) -> BoxFuture<'_, Option<String>> {
        Box::pin(async move {
            if self.channel.is_none() {
                return Some("was killed".into());
            }
            let heard = self.heard();
            let ended = match (heard.exit, heard.lost) {
                (Some(status), _) => status,
                (None, true) => format!("the connection to {} was lost", self.host.dest),
                (None, false) => return None,
            };
            self.fetch_logs().await;
            Some(ended)
        })
    }

    fn kill(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(self.kill_now())
    }

    fn restart(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            // Its logs stay on the host, appended to, until its removal.
            self.kill_now().await;
            self.spawn().await
        })
    }

    fn remove(mut self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            self.kill_now().await;
            self.fetch_logs().await;
        })
    }
}

impl Drop for RemoteProcess {
    fn drop(&mut self) {
        self.close_channel();
    }
}
