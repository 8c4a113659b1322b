//! No container outlives its run. Every container carries the run's id and
//! its owner (boot, PID and start time of the harness process) as labels.
//! The run removes its containers at its end, on every path it controls; a
//! **reaper** — a small `lockstorm reap` process the harness starts, which
//! waits for its stdin to close — removes them when the harness dies any
//! other way (SIGKILL included: the kernel closes the pipe); and any later
//! start **sweeps** away containers whose owner is provably gone.

use super::api::{client, Api};
use crate::error::Result;
use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptionsBuilder};
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const RUN: &str = "lockstorm.run";
pub const OWNER: &str = "lockstorm.owner";
pub const NODE: &str = "lockstorm.node";

/// The labels of one run's containers.
#[derive(Clone, Debug)]
pub struct Labels {
    pub run: String,
    owner: String,
}

impl Labels {
    /// Labels for a new run of this process.
    pub fn fresh() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        Labels {
            run: format!("{}-{nanos:08x}", std::process::id()),
            owner: Owner::me().to_string(),
        }
    }

    pub fn of(&self, node: &str) -> [(String, String); 3] {
        [
            (RUN.into(), self.run.clone()),
            (OWNER.into(), self.owner.clone()),
            (NODE.into(), node.into()),
        ]
    }
}

/// A process as it can be recognised later: PID reuse gives another start
/// time, a reboot another boot id.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Owner {
    boot: String,
    pid: u32,
    start: u64,
}

impl Owner {
    fn me() -> Self {
        let pid = std::process::id();
        Owner {
            boot: boot_id(),
            pid,
            start: start_time(pid).unwrap_or(0),
        }
    }

    /// Gone for sure: another boot, no such process, or another process
    /// under its PID. A label we cannot read is not proof.
    fn is_gone(&self) -> bool {
        self.boot != boot_id() || start_time(self.pid) != Some(self.start)
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.boot, self.pid, self.start)
    }
}

impl std::str::FromStr for Owner {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        let mut parts = s.split('/');
        let (Some(boot), Some(pid), Some(start), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(());
        };
        Ok(Owner {
            boot: boot.to_string(),
            pid: pid.parse().map_err(|_| ())?,
            start: start.parse().map_err(|_| ())?,
        })
    }
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Field 22 of /proc/<pid>/stat: when the process started, in clock ticks since boot.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command may hold spaces and parentheses; fields resume after the last ')'.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// The containers carrying `label`; none when the daemon refuses the list,
/// an error when it does not answer.
async fn containers_labelled(
    api: &Api,
    label: String,
) -> Result<Vec<(String, HashMap<String, String>)>> {
    let what = format!("the list of containers labelled {label}");
    let filters = HashMap::from([("label", vec![label])]);
    let list = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    let listed = api
        .answer(&what, api.docker.list_containers(Some(list)))
        .await?;
    Ok(listed
        .unwrap_or_default()
        .into_iter()
        .filter_map(|c| Some((c.id?, c.labels.unwrap_or_default())))
        .collect())
}

async fn remove(api: &Api, id: &str) -> Result<()> {
    let force = RemoveContainerOptionsBuilder::new().force(true).build();
    let what = format!("the removal of container {id}");
    let _ = api
        .answer(&what, api.docker.remove_container(id, Some(force)))
        .await?;
    Ok(())
}

/// Removes every container of run `run`; returns how many there were.
pub async fn remove_run(api: &Api, run: &str) -> Result<usize> {
    let found = containers_labelled(api, format!("{RUN}={run}")).await?;
    for (id, _) in &found {
        remove(api, id).await?;
    }
    Ok(found.len())
}

/// Removes the containers of every run whose harness is provably gone.
pub async fn sweep(api: &Api) -> Result<usize> {
    let mut removed = 0;
    for (id, labels) in containers_labelled(api, OWNER.to_string()).await? {
        let gone = labels
            .get(OWNER)
            .and_then(|o| o.parse::<Owner>().ok())
            .is_some_and(|o| o.is_gone());
        if gone {
            tracing::info!("removing container {id} of a run that is gone");
            remove(api, &id).await?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// The reaper of one run, as the harness holds it: the write end of its stdin.
pub struct Reaper {
    child: Child,
}

impl Reaper {
    /// Starts `lockstorm reap` for `run`, in its own process group so a
    /// Ctrl-C at the terminal does not reach it, and without a parent-death
    /// signal: it must outlive the harness to do its job.
    pub fn start(daemon: &Path, run: &str) -> std::io::Result<Self> {
        use std::os::unix::process::CommandExt;
        let exe = std::env::current_exe()?;
        let child = Command::new(exe)
            .arg("reap")
            .arg("--daemon")
            .arg(daemon)
            .arg("--run")
            .arg(run)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        Ok(Reaper { child })
    }

    /// The run removed its own containers: close the reaper's stdin and
    /// wait (briefly) for it to find nothing left and exit.
    pub async fn dismiss(mut self) {
        drop(self.child.stdin.take());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = process::kill_now(self.child.id());
        let _ = self.child.wait();
    }
}

/// `lockstorm reap`: waits until stdin closes (the harness ended, one way
/// or another), then removes every container of `run`.
pub fn reap(daemon: &Path, run: &str) -> std::io::Result<usize> {
    let mut sink = [0u8; 64];
    let mut stdin = std::io::stdin().lock();
    while !matches!(stdin.read(&mut sink), Ok(0) | Err(_)) {}
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime
        .block_on(async { remove_run(&client(daemon).await?, run).await })
        .map_err(|e| std::io::Error::other(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_is_gone_only_when_proven() {
        let me = Owner::me();
        assert!(!me.is_gone(), "{me}");
        assert_eq!(me.to_string().parse::<Owner>(), Ok(me.clone()));
        let restarted = Owner {
            start: me.start + 1,
            ..me.clone()
        };
        assert!(restarted.is_gone(), "another process under the same PID");
        let rebooted = Owner {
            boot: "another-boot".into(),
            ..me.clone()
        };
        assert!(rebooted.is_gone());
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        let start = start_time(pid);
        child.wait().unwrap();
        let exited = Owner {
            pid,
            start: start.unwrap_or(1),
            ..me
        };
        assert!(exited.is_gone(), "a PID with no process");
        assert!("a/b".parse::<Owner>().is_err() && "x/1/2/3".parse::<Owner>().is_err());
    }
}
