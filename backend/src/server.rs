//! A server lockstorm starts and manages, whichever program it runs: what
//! every kind shares, written once. [`Server`] is what the topology and its
//! faults see of each alike (a name, an address, a PID, and a kill, a
//! restart and a removal); [`Managed`] is the core each kind embeds (its
//! process, what that process said of itself, its folders, and how it ends);
//! and [`Kind`] is what a kind gives the shared bodies (its readiness, its
//! errors, what a restart does besides). The kinds are [`crate::node`]
//! (Redis), [`crate::postgres`], [`crate::etcd`] and [`crate::zookeeper`].
//!
//! `Kind` and `Managed` are public only in name: this module is private
//! and the crate root re-exports `Server` alone, so only this crate can
//! make a kind (it is sealed), and nothing outside calls a kind's hooks.

use crate::error::{Error, Result};
use crate::provision::NodeProcess;
use crate::reaper::DataFolder;
use nemesis::cluster::BoxFuture;
use std::net::Ipv4Addr;
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
                self.core().note_pid();
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

    /// Tells its data folder's reaper the process just launched, when the
    /// server writes no pid file of its own.
    pub(crate) fn note_pid(&self) {
        if let Some(data) = &self.data {
            data.note_pid(self.pid());
        }
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

pub(crate) use crate::provision::free_port;

/// A toy fourth kind, all in one place as a new kind would be: a `sleep`
/// process. What it holds, how it starts, and when it is ready are its
/// own; everything the tests below call is the shared bodies'.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::provision::{Launch, Program, Provisioner};

    struct Sleeper {
        core: Managed,
        /// Its readiness refuses the process (one that answers as another).
        refuse: bool,
        launches: u32,
    }

    impl Sleeper {
        async fn start(nodes_dir: &Path) -> Sleeper {
            let local = crate::local::Local::running(Path::new("sleep"));
            let mut core = Managed::new("toy", Ipv4Addr::LOCALHOST, nodes_dir).unwrap();
            core.port = free_port(Ipv4Addr::LOCALHOST).unwrap();
            let data = core.dir.join("data");
            std::fs::create_dir_all(&data).unwrap();
            let pid_file = core.dir.join("toy.pid");
            core.data = Some(DataFolder::reaped("toy", &data, &pid_file).unwrap());
            let launch = Launch {
                name: "toy".into(),
                program: Program::Server,
                args: vec!["600".into()],
                env: Vec::new(),
                dir: core.dir.clone(),
                reads: Vec::new(),
                writes: Vec::new(),
                output: core.dir.join("output.log"),
                served_clock: None,
                user: None,
                forget_on_restart: Vec::new(),
            };
            core.process = Some(local.launch(launch).await.unwrap());
            let mut toy = Sleeper {
                core,
                refuse: false,
                launches: 0,
            };
            toy.ready().await.unwrap();
            toy
        }
    }

    impl Server for Sleeper {
        fn role(&self) -> &'static str {
            "lock"
        }
    }

    impl Kind for Sleeper {
        fn core(&self) -> &Managed {
            &self.core
        }

        fn core_mut(&mut self) -> &mut Managed {
            &mut self.core
        }

        fn ready(&mut self) -> BoxFuture<'_, Result<()>> {
            Box::pin(async move {
                if let Some(status) = self.core.exited().await {
                    return Err(self.error(&format!("exited at start ({status})")));
                }
                if self.refuse {
                    return Err(self.error("answers as another"));
                }
                self.launches += 1;
                self.core.identity = format!("launch {}", self.launches);
                Ok(())
            })
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_kind_is_killed_restarted_and_removed_by_the_shared_bodies() {
        let tmp = tempfile::tempdir().unwrap();
        let mut toy = Sleeper::start(tmp.path()).await;
        let first = toy.pid();
        assert_ne!(first, 0, "not running");
        assert_eq!(toy.addr(), format!("127.0.0.1:{}", toy.core.port));
        let seen = toy.node_ref();
        assert_eq!((seen.name.as_str(), seen.pid), ("toy", first));
        assert_eq!(seen.run_id, "launch 1");
        assert_eq!(toy.died().await, None, "alive");

        assert_eq!(toy.kill().await, Some(first));
        assert_eq!(toy.pid(), 0, "killed, still counted up");
        assert_eq!(toy.died().await, None, "a fault's kill is no death");
        assert_eq!(toy.kill().await, None, "nothing left to kill");

        toy.restart().await.unwrap();
        let second = toy.pid();
        assert!(second != 0 && second != first, "{first} then {second}");
        assert_eq!(toy.node_ref().run_id, "launch 2", "the new identity");

        // A death nobody here caused is seen, and said how it happened.
        process::kill_now(second).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let died = loop {
            match toy.died().await {
                Some(status) => break status,
                None if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                None => panic!("its death was not seen"),
            }
        };
        assert!(died.contains("signal: 9"), "{died}");

        // A restart whose process is not ready leaves the server down.
        toy.refuse = true;
        let refused = toy.restart().await.unwrap_err().to_string();
        assert!(refused.contains("answers as another"), "{refused}");
        assert_eq!(toy.pid(), 0, "a refused process still counts as the server");

        let data = toy.core.dir.join("data");
        assert!(data.is_dir());
        toy.remove().await;
        assert!(!data.exists(), "its data outlived its removal");
        let removed = toy.restart().await.unwrap_err().to_string();
        assert!(
            removed.contains("was removed and cannot restart"),
            "{removed}"
        );
    }
}
