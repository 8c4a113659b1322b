//! The local backend: each node is a real `redis-server` (or
//! `redis-sentinel`) child process of the harness, in its own process group
//! and killed by the kernel if the harness dies. A node is killed as a
//! group, so whatever it started (a wrapper script's server) goes with it.

use crate::error::{doing, Error, Result};
use crate::provision::{Launch, NodeProcess, Program, Provisioner};
use nemesis::cluster::BoxFuture;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use store::BackendRecord;

pub struct Local {
    server: PathBuf,
    sentinel: Option<PathBuf>,
}

impl Local {
    /// Finds `redis-server`, and `redis-sentinel` when the run needs it.
    pub fn find(sentinel: bool) -> Result<Self> {
        Ok(Local {
            server: find_redis_server()?,
            sentinel: sentinel.then(find_redis_sentinel).transpose()?,
        })
    }

    pub fn server(&self) -> &Path {
        &self.server
    }

    /// A backend whose `Program::Server` is `server`, whatever it is: for
    /// the tests of what every server shares, on a process that is not Redis.
    #[cfg(test)]
    pub(crate) fn running(server: &Path) -> Self {
        Local {
            server: server.to_path_buf(),
            sentinel: None,
        }
    }
}

impl Provisioner for Local {
    fn launch(&self, launch: Launch) -> BoxFuture<'_, Result<Box<dyn NodeProcess>>> {
        Box::pin(async move {
            let program = match &launch.program {
                Program::Server => self.server.clone(),
                Program::Sentinel => self.sentinel.clone().ok_or_else(|| {
                    Error::Usage("this run did not look for redis-sentinel".into())
                })?,
                Program::Found(found) => found.path.clone(),
            };
            let mut node = LocalProcess {
                launch,
                program,
                child: None,
                clock: None,
            };
            node.spawn()?;
            Ok(Box::new(node) as Box<dyn NodeProcess>)
        })
    }

    fn record(&self) -> BackendRecord {
        BackendRecord {
            kind: "local".into(),
            ..BackendRecord::default()
        }
    }

    fn redis_version(&self) -> String {
        redis_version(&self.server)
    }

    fn finish(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// How long a killed node's children outside its group may take to die.
const STRAYS_GONE_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

struct LocalProcess {
    launch: Launch,
    program: PathBuf,
    child: Option<Child>,
    /// The thread serving its wall clock, for a `served_clock` launch.
    clock: Option<nemesis::served_clock::ServedClock>,
}

impl LocalProcess {
    fn spawn(&mut self) -> Result<()> {
        let l = &self.launch;
        // Kept, not discarded: Redis reports a bad configuration (Sentinel's
        // FATAL line) on stderr before it opens its log file.
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&l.output)
            .map_err(doing(format!("creating {}", l.output.display())))?;
        let err = out
            .try_clone()
            .map_err(doing(format!("opening {}", l.output.display())))?;
        // A node that writes outside its folder does so because its user
        // cannot reach the run's folder (PostgreSQL's, as root, in a
        // private results folder): it works there, not in a folder it
        // could not enter.
        let cwd = match l.user {
            Some(_) => l.writes.first().unwrap_or(&l.dir),
            None => &l.dir,
        };
        let mut cmd = Command::new(&self.program);
        cmd.args(&l.args)
            .envs(l.env.iter().map(|(k, v)| (k, v)))
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        if let Some((uid, gid)) = l.user {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(gid);
        }
        match &l.program {
            Program::Found(found) if found.quits => process::isolate_quitting(&mut cmd),
            _ => process::isolate(&mut cmd),
        }
        // Last: from here the child's wall-clock reads wait for this thread.
        if l.served_clock.is_some() {
            nemesis::served_clock::prepare(&mut cmd);
        }
        let child = match cmd.spawn() {
            Ok(child) => child,
            // Its wall clock is served through seccomp and ptrace, set up
            // in the child before its exec: an EPERM there is a refusal of
            // those (a program that cannot be run gives EACCES or ENOENT).
            Err(e) if l.served_clock.is_some() && e.raw_os_error() == Some(nix::libc::EPERM) => {
                return Err(Error::Usage(format!(
                    "node {}: cannot serve its wall clock: this machine refused ptrace or seccomp to lockstorm ({e}); the clock nemesis moves an etcd member's clock through them: run as root, allow tracing of children (sysctl kernel.yama.ptrace_scope=0, or a container with CAP_SYS_PTRACE and seccomp unconfined), or choose another --nemesis",
                    l.name
                )))
            }
            Err(e) => {
                return Err(doing(format!(
                    "starting {} for node {}",
                    self.program.display(),
                    l.name
                ))(e))
            }
        };
        self.child = Some(child);
        if let Some(control) = &l.served_clock {
            // The child waits, stopped at its exec, for this thread (its tracer).
            let pid = self.child.as_ref().map_or(0, Child::id);
            match nemesis::served_clock::attach(pid, control) {
                Ok(clock) => self.clock = Some(clock),
                Err(e) => {
                    let name = l.name.clone();
                    self.kill_now();
                    return Err(Error::Usage(format!(
                        "node {name}: cannot serve its wall clock ({e}): the clock nemesis moves an etcd member's clock through ptrace and seccomp, which this machine refuses (run as root, or choose another --nemesis)"
                    )));
                }
            }
        }
        Ok(())
    }

    /// SIGKILL to the node's whole group (it leads one: `process::isolate`),
    /// then reaps it. SIGKILL also ends a stopped process. Nothing reaps the
    /// node before this (`exited` only looks), and an exited leader not yet
    /// reaped keeps its PID, so the group's id is still this node's: it
    /// cannot have passed to a process that is not ours.
    fn kill_now(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // Its thread ends as the node does (the listener hangs up) or
        // within a poll of this.
        self.clock = None;
        // Its children that left the group (PostgreSQL's backends) first:
        // the node is down only once every process of it is.
        let strays = process::kill_children(child.id());
        let _ = process::kill_group(child.id());
        let _ = child.wait();
        if !process::wait_gone(&strays, STRAYS_GONE_WITHIN) {
            tracing::warn!(
                "node {}: a child of its killed process still runs after {STRAYS_GONE_WITHIN:?}",
                self.launch.name
            );
        }
    }
}

impl NodeProcess for LocalProcess {
    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    fn exited(&mut self) -> BoxFuture<'_, Option<String>> {
        let status = self.child.as_ref().map(|c| process::exit_status(c.id()));
        Box::pin(async move {
            match status {
                None => Some("never started".into()),
                Some(Ok(status)) => status,
                Some(Err(e)) => Some(format!("cannot be waited for ({e})")),
            }
        })
    }

    fn kill(&mut self) -> BoxFuture<'_, ()> {
        self.kill_now();
        Box::pin(async {})
    }

    fn restart(&mut self) -> BoxFuture<'_, Result<()>> {
        self.kill_now();
        forget(&self.launch.forget_on_restart);
        let spawned = self.spawn();
        Box::pin(async move { spawned })
    }

    fn remove(mut self: Box<Self>) -> BoxFuture<'static, ()> {
        self.kill_now();
        Box::pin(async {})
    }
}

/// Removes what a restart starts without (files or folders; those not
/// there are nothing to remove).
pub(crate) fn forget(paths: &[PathBuf]) {
    for path in paths {
        let _ = std::fs::remove_file(path).or_else(|_| std::fs::remove_dir_all(path));
    }
}

impl Drop for LocalProcess {
    fn drop(&mut self) {
        self.kill_now();
    }
}

/// Finds `redis-server`: `$LOCKSTORM_REDIS_SERVER`, else the PATH.
pub fn find_redis_server() -> Result<PathBuf> {
    find_program("redis-server", "redis-server", "LOCKSTORM_REDIS_SERVER")
}

/// Finds `redis-sentinel`: `$LOCKSTORM_REDIS_SENTINEL`, else the PATH.
pub fn find_redis_sentinel() -> Result<PathBuf> {
    find_program(
        "redis-sentinel",
        "redis-sentinel",
        "LOCKSTORM_REDIS_SENTINEL",
    )
}

fn find_program(
    program: &'static str,
    package: &'static str,
    env: &'static str,
) -> Result<PathBuf> {
    let missing = |looked: String| Error::MissingProgram {
        program,
        package,
        env,
        looked,
    };
    if let Some(path) = std::env::var_os(env) {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Ok(path);
        }
        return Err(missing(format!("{env}={} is not a file", path.display())));
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .ok_or_else(|| missing("not on PATH".into()))
}

/// `redis-server --version`, for `run.json`.
pub fn redis_version(server: &Path) -> String {
    process::output_within(Command::new(server).arg("--version"), crate::PROBE_WITHIN)
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("unknown ({e})"))
}
