//! A server lockstorm starts and manages, whichever program it runs: what
//! every kind shares, written once. [`Server`] is what the topology and its
//! faults see of each alike (a name, an address, a PID, and a kill, a
//! restart and a removal); [`Managed`] is the core each kind embeds (its
//! process, what that process said of itself, its folders, and how it ends);
//! and [`Kind`] is what a kind gives the shared bodies (its readiness, its
//! errors, what a restart does besides). The kinds are [`crate::node`]
//! (Redis), [`crate::postgres`] and [`crate::etcd`].
//!
//! `Kind` and `Managed` are public only in name: this module is private
//! and the crate root re-exports `Server` alone, so only this crate can
//! make a kind (it is sealed), and nothing outside calls a kind's hooks.

use crate::error::{Error, Result};
use crate::provision::NodeProcess;
use crate::reaper::DataFolder;
use nemesis::cluster::BoxFuture;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A running server of the run, whichever kind.
pub trait Server: Kind {
    /// What `run.json` calls its part (`lock`, `replica`, `sentinel`, `storage`).
    fn role(&self) -> &'static str;

    fn name(&self) -> &str {
        &self.core().name
    }

    /// The address its clients talk to (an etcd member's client address).
    fn addr(&self) -> String {
        let core = self.core();
        format!("{}:{}", core.ip, core.port)
    }

    /// The live process's PID (0 while the server is down).
    fn pid(&self) -> u32 {
        self.core().pid()
    }

    /// Its stdout and stderr (PostgreSQL's and etcd's log).
    fn output_log(&self) -> PathBuf {
        self.core().dir.join("output.log")
    }

    /// The server as a fault sees it.
    fn node_ref(&self) -> nemesis::NodeRef {
        let core = self.core();
        nemesis::NodeRef {
            name: core.name.clone(),
            pid: core.pid(),
            run_id: core.identity.clone(),
        }
    }

    /// How its process ended, if it did while the harness counted it as
    /// up: a fault's kill takes the process first (PID 0), so this is a
    /// death nobody here caused.
    fn died(&mut self) -> BoxFuture<'_, Option<String>> {
        Box::pin(async move {
            if self.pid() == 0 {
                return None;
            }
            self.core_mut().process.as_mut()?.exited().await
        })
    }

    /// SIGKILLs the server (with its process group) and waits until it is
    /// gone (SIGKILL also ends a stopped process): a crash. Returns the PID
    /// it had, if it was running.
    fn kill(&mut self) -> BoxFuture<'_, Option<u32>> {
        Box::pin(async move {
            let pid = self.pid();
            self.core_mut().process.as_mut()?.kill().await;
            (pid != 0).then_some(pid)
        })
    }

    /// Starts the server again after a kill, on the same address and port
    /// and folder, and waits until it is ready. A start that fails leaves
    /// it down (pid 0), so it counts as down rather than as something else
    /// that may answer in its place.
    fn restart(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.kill().await;
            self.before_restart();
            let Some(process) = self.core_mut().process.as_mut() else {
                return Err(self.error("was removed and cannot restart"));
            };
            let mut launched = process.restart().await;
            if launched.is_ok() {
                self.relaunched();
                launched = self.ready().await;
            }
            if launched.is_err() {
                self.kill().await;
            }
            launched
        })
    }

    /// Ends the server for good and removes what held it (its container)
    /// and its data folder; its logs stay in the run's folder.
    fn remove(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.core_mut().end().await;
            self.core_mut().data = None;
        })
    }
}

/// What a kind of server gives the shared bodies of [`Server`].
pub trait Kind: Send + Sync {
    fn core(&self) -> &Managed;
    fn core_mut(&mut self) -> &mut Managed;

    /// Waits until the process just started answers, and answers as ours
    /// (setting [`Managed::identity`]), or fails early if it exited.
    fn ready(&mut self) -> BoxFuture<'_, Result<()>>;

    /// An error of this server, quoting its own last words: by default the
    /// last line of its output.
    fn error(&self, message: &str) -> Error {
        let core = self.core();
        let log = core.dir.join("output.log");
        let mut message = message.to_string();
        let output = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(last) = output.lines().rev().find(|l| !l.trim().is_empty()) {
            message = format!("{message}: \"{}\"", last.trim());
        }
        Error::Node {
            name: core.name.clone(),
            message,
            log,
        }
    }

    /// What a restart does once the old process is gone, before the new
    /// one starts.
    fn before_restart(&mut self) {}

    /// What a restart does once the new process started, before it is ready.
    fn relaunched(&mut self) {}
}

/// How a server ends for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGKILL, as every removal does.
    Kill,
    /// SIGQUIT first (with SIGCONT, in case it is paused), waited for up
    /// to [`SHUTDOWN`], then SIGKILL of what is left: for a server that
    /// must clean up as it exits. PostgreSQL's immediate shutdown removes
    /// its shared memory; a SIGKILLed postmaster leaves its System V
    /// segment and its dynamic segments in `/dev/shm` behind, one of each
    /// per run, until the machine's limit of segments (4096 by default)
    /// stops every later server from starting.
    Quit,
}

/// How long a [`Stop::Quit`] may take before the server is killed.
const SHUTDOWN: Duration = Duration::from_secs(5);

/// The core of a managed server: what every kind keeps alike. Dropping it
/// ends the process (as [`Self::stop`] says, then by the process's own
/// drop), then removes the data folder (fields drop in order).
pub struct Managed {
    pub(crate) name: String,
    pub(crate) ip: Ipv4Addr,
    /// The port its clients talk to (fixed once it started: a restart
    /// keeps it).
    pub(crate) port: u16,
    /// Its folder in the run (absolute, like every path in its
    /// arguments): its logs, and its data unless that lives elsewhere.
    pub(crate) dir: PathBuf,
    pub(crate) process: Option<Box<dyn NodeProcess>>,
    /// What the process said of itself when it became ready, new with each
    /// process: Redis's `run_id`, or the start time that stands for it.
    pub(crate) identity: String,
    pub(crate) stop: Stop,
    /// Its data folder, when the server keeps one apart from its logs.
    pub(crate) data: Option<DataFolder>,
}

impl Managed {
    /// A server not started yet, in its own folder under `nodes_dir`
    /// (made here).
    pub(crate) fn new(name: &str, ip: Ipv4Addr, nodes_dir: &Path) -> Result<Self> {
        let dir = std::path::absolute(nodes_dir.join(name)).map_err(crate::error::doing(
            format!("finding the folder of node {name}"),
        ))?;
        std::fs::create_dir_all(&dir)
            .map_err(crate::error::doing(format!("creating {}", dir.display())))?;
        Ok(Managed {
            name: name.to_string(),
            ip,
            port: 0,
            dir,
            process: None,
            identity: String::new(),
            stop: Stop::Kill,
            data: None,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.process.as_ref().map_or(0, |p| p.pid())
    }

    /// How the process ended, if it has (one removed has ended).
    pub(crate) async fn exited(&mut self) -> Option<String> {
        match self.process.as_mut() {
            Some(process) => process.exited().await,
            None => Some("was removed".into()),
        }
    }

    /// Ends the process for good, as [`Self::stop`] says; the data stays
    /// (a start that retries on another port reuses it).
    pub(crate) async fn end(&mut self) {
        let Some(process) = self.process.take() else {
            return;
        };
        if self.stop == Stop::Quit {
            let (pid, name) = (process.pid(), self.name.clone());
            let _ = tokio::task::spawn_blocking(move || quit(&name, pid)).await;
        }
        process.remove().await;
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        // The process ends as it drops (its own Drop), after its shutdown.
        if let (Stop::Quit, Some(process)) = (self.stop, &self.process) {
            quit(&self.name, process.pid());
        }
    }
}

/// A [`Stop::Quit`] of the server `pid` (0: none runs), waited for up to
/// [`SHUTDOWN`].
fn quit(name: &str, pid: u32) {
    if pid == 0 || process::quit(pid).is_err() {
        return;
    }
    let _ = process::resume(pid);
    if !process::wait_gone(&[pid], SHUTDOWN) {
        tracing::warn!(
            "node {name}: no shutdown within {SHUTDOWN:?} of SIGQUIT: killed, what it cleans up as it exits (PostgreSQL's shared memory) may be left"
        );
    }
}

/// A free port on `ip`, for a server to bind: someone else may take it
/// first, so a kind that binds it retries on another when told the
/// address is in use.
pub(crate) fn free_port(ip: Ipv4Addr) -> Result<u16> {
    TcpListener::bind((ip, 0))
        .and_then(|l| Ok(l.local_addr()?.port()))
        .map_err(crate::error::doing(format!("finding a free port on {ip}")))
}
