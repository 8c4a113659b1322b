//! Node faults on a deployment lockstorm did not start, by the user's own
//! commands (`--fault-cmd kill="ssh db1 sudo systemctl kill -s KILL redis"`,
//! `--fault-cmd failover="aws elasticache test-failover …"`): lockstorm runs
//! the command at the scheduled moment and checks its effect as it checks
//! its own faults. A killed node must come back answering with a new
//! `run_id`; a failover must show the Sentinels naming another primary. A
//! command that fails, hangs, or whose effect is not seen in time leaves
//! the fault unverified, and the run unknown.

use crate::role::Role;
use crate::target::{Endpoint, Target};
use nemesis::NodeRef;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The faults a command may stand in for.
pub const FAULTS: [&str; 2] = ["kill", "failover"];

/// How long a command may run.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// `--fault-cmd NAME=COMMAND`, read: fault name → command.
pub fn parse(given: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut commands = BTreeMap::new();
    for g in given {
        let (name, command) = g.split_once('=').ok_or_else(|| {
            format!("--fault-cmd {g}: write it as FAULT=COMMAND, e.g. --fault-cmd kill=\"ssh db1 sudo systemctl kill -s KILL redis\"")
        })?;
        if !FAULTS.contains(&name) {
            return Err(format!(
                "--fault-cmd {name}=…: a command can stand in for {} only",
                FAULTS.join(" or ")
            ));
        }
        if command.trim().is_empty() {
            return Err(format!("--fault-cmd {name}=: the command is empty"));
        }
        if commands
            .insert(name.to_string(), command.to_string())
            .is_some()
        {
            return Err(format!("--fault-cmd {name} is given twice: keep one"));
        }
    }
    Ok(commands)
}

/// The commands of one run, and what they did.
pub struct Commands {
    commands: BTreeMap<String, String>,
    target: Target,
    /// Each command's output goes to `<dir>/<fault>.log`.
    dir: PathBuf,
    /// How long a killed node may take to answer again with a new run id.
    back_within: Duration,
    /// The node as it was before its kill, until it is back.
    killed: Mutex<HashMap<String, NodeRef>>,
}

impl Commands {
    pub fn new(
        commands: BTreeMap<String, String>,
        target: Target,
        dir: PathBuf,
        back_within: Duration,
    ) -> Self {
        Commands {
            commands,
            target,
            dir,
            back_within,
            killed: Mutex::new(HashMap::new()),
        }
    }

    /// The node at `addr` as a fault sees it: not our process (pid 0), with
    /// the run id its `INFO server` reports.
    pub fn node_ref(&self, name: &str, addr: &str) -> Result<NodeRef, String> {
        let run_id = self
            .run_id(addr)
            .map_err(|e| format!("INFO from {name}: {e}"))?;
        Ok(NodeRef {
            name: name.to_string(),
            pid: 0,
            run_id,
        })
    }

    /// Runs `fault`'s command with the node named in its environment
    /// (`LOCKSTORM_NODE`, `LOCKSTORM_NODE_ADDR`); `None` without one.
    pub fn run(&self, fault: &str, name: &str, addr: &str) -> Option<Result<String, String>> {
        let command = self.commands.get(fault)?;
        Some(self.run_one(fault, command, name, addr))
    }

    fn run_one(
        &self,
        fault: &str,
        command: &str,
        name: &str,
        addr: &str,
    ) -> Result<String, String> {
        use std::io::Write;
        let log_path = self.dir.join(format!("{fault}.log"));
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .map_err(|e| format!("opening {}: {e}", log_path.display()))
        };
        let mut log = open()?;
        let _ = writeln!(
            log,
            "--- lockstorm: {fault} of {name} ({addr}): `{command}`"
        );
        let said_from = log.metadata().map(|m| m.len()).unwrap_or(0);
        // Its output goes straight to the log, not through a pipe: a server
        // the command starts in the background (a restart) keeps its
        // stdout, and a pipe it held would never reach its end.
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", command])
            .env("LOCKSTORM_NODE", name)
            .env("LOCKSTORM_NODE_ADDR", addr)
            .stdin(std::process::Stdio::null())
            .stdout(open()?)
            .stderr(open()?);
        let status = nemesis::process::run_within(&mut cmd, COMMAND_TIMEOUT)
            .map_err(|e| format!("starting `{command}`: {e}"))?;
        let said = std::fs::read(&log_path)
            .map(|all| {
                String::from_utf8_lossy(&all[(said_from as usize).min(all.len())..]).into_owned()
            })
            .unwrap_or_default();
        let tail = said.trim().lines().last().unwrap_or_default().to_string();
        let Some(status) = status else {
            let _ = writeln!(log, "--- lockstorm: stopped after {COMMAND_TIMEOUT:?}");
            return Err(format!(
                "`{command}` ran past {COMMAND_TIMEOUT:?} and was stopped, with its children"
            ));
        };
        let _ = writeln!(log, "--- lockstorm: {status}");
        match status.success() {
            true => Ok(tail),
            false => Err(format!("`{command}` {status}: {tail}")),
        }
    }

    /// Kills a node by the user's command: the node as it was before.
    pub fn kill(&self, name: &str, addr: &str) -> std::io::Result<NodeRef> {
        let before = self.node_ref(name, addr).map_err(std::io::Error::other)?;
        match self.run("kill", name, addr) {
            None => Err(std::io::Error::other("no --fault-cmd kill was given")),
            Some(Err(why)) => Err(std::io::Error::other(why)),
            Some(Ok(_)) => {
                let mut killed = self.killed.lock().unwrap_or_else(|e| e.into_inner());
                killed.insert(name.to_string(), before.clone());
                Ok(before)
            }
        }
    }

    /// Waits until the node killed by the command answers with a new run id.
    pub fn back(&self, name: &str, addr: &str) -> Result<NodeRef, String> {
        let before = {
            let killed = self.killed.lock().unwrap_or_else(|e| e.into_inner());
            killed.get(name).cloned()
        }
        .ok_or_else(|| format!("{name} was not killed by a fault command"))?;
        let deadline = Instant::now() + self.back_within;
        let mut last = String::from("no answer yet");
        while Instant::now() < deadline {
            match self.node_ref(name, addr) {
                Ok(now) if now.run_id != before.run_id => return Ok(now),
                Ok(_) => last = format!("still run_id {}", before.run_id),
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "{name} did not answer with a new run_id within {:?} of the fault command ({last})",
            self.back_within
        ))
    }

    /// The node's `ROLE`: `master` or `slave`.
    pub fn role(&self, addr: &str) -> Result<String, String> {
        let reply: redis::Value = redis::cmd("ROLE")
            .query(&mut self.connect(addr)?)
            .map_err(|e| e.to_string())?;
        Ok(match Role::parse(&reply) {
            Some(Role::Master { .. }) => "master".into(),
            Some(Role::Replica { .. }) => "slave".into(),
            Some(Role::Sentinel) => "sentinel".into(),
            Some(Role::Other { name }) => name,
            None => String::new(),
        })
    }

    fn run_id(&self, addr: &str) -> Result<String, String> {
        crate::reach::run_id(&mut self.connect(addr)?).map_err(|e| e.to_string())
    }

    /// A connection to a node at `addr`, as the run reaches it (a TLS
    /// target's bridge), logged in.
    fn connect(&self, addr: &str) -> Result<redis::Connection, String> {
        let via: std::net::SocketAddr = addr.parse().map_err(|_| format!("bad address {addr}"))?;
        let at = Endpoint {
            via: Some(via),
            ..Endpoint::new(via.ip().to_string(), via.port())
        };
        crate::reach::connect(&self.target, &at, Duration::from_secs(2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_commands_are_read_and_bad_ones_named() {
        let given = vec!["kill=ssh db1 sudo systemctl kill -s KILL redis".to_string()];
        let read = parse(&given).unwrap();
        assert_eq!(read["kill"], "ssh db1 sudo systemctl kill -s KILL redis");
        for (bad, says) in [
            ("kill", "FAULT=COMMAND"),
            ("pause=x", "kill or failover only"),
            ("kill=  ", "empty"),
        ] {
            let why = parse(&[bad.to_string()]).unwrap_err();
            assert!(why.contains(says), "{bad}: {why}");
        }
        let twice = parse(&["kill=a".into(), "kill=b".into()]).unwrap_err();
        assert!(twice.contains("twice"), "{twice}");
    }
}
