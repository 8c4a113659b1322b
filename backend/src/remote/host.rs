//! One host of `--nodes`: its multiplexed OpenSSH connection, the address
//! it is reached at, its folder for the run, and the commands the run
//! sends it, every one under a deadline.

use super::{quote, Destination};
use crate::error::{Error, Result};
use nemesis::cluster::BoxFuture;
use openssh::{KnownHosts, Session, SessionBuilder};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// How long a connection, or any one command on a host, may take: a
/// loaded machine's sshd has taken over 10 s to run a first `mkdir`.
pub const WITHIN: Duration = Duration::from_secs(30);

/// A command that takes longer is noted in the run's log.
pub const SLOW: Duration = Duration::from_secs(1);

/// How the harness logs in to the hosts.
#[derive(Clone, Debug, Default)]
pub struct Login {
    /// `--ssh-key`: this key only (else the user's keys, agent and config).
    pub key: Option<PathBuf>,
    /// The host keys to accept, and no others (the lab's); else the user's
    /// known hosts, with a new host's key added and a changed one refused.
    pub known_hosts: Option<PathBuf>,
}

pub struct Host {
    pub dest: Destination,
    session: Session,
    /// The address the harness reached it at, as the host saw it
    /// (`$SSH_CONNECTION`): where its nodes listen.
    pub addr: Ipv4Addr,
    /// The run's folder on it: every file the run makes there.
    pub home: String,
}

impl Host {
    /// Logs in to `dest` and makes the run's folder `home` there.
    pub async fn connect(dest: &Destination, login: &Login, home: &str) -> Result<Host> {
        let mut builder = SessionBuilder::default();
        builder
            .connect_timeout(WITHIN)
            .server_alive_interval(Duration::from_secs(5))
            .control_directory(std::env::temp_dir())
            // A master the harness could not close (it was killed) goes
            // by itself once idle.
            .control_persist(openssh::ControlPersist::IdleFor(
                std::num::NonZeroUsize::new(60).expect("not zero"),
            ));
        match &login.known_hosts {
            Some(file) => builder
                .known_hosts_check(KnownHosts::Strict)
                .user_known_hosts_file(file),
            None => builder.known_hosts_check(KnownHosts::Add),
        };
        if let Some(key) = &login.key {
            builder.keyfile(key);
        }
        if let Some(port) = dest.port {
            builder.port(port);
        }
        let refused = |why: String| {
            Error::Usage(format!(
                "cannot log in to {dest} over SSH ({why}): check that the host is up and runs sshd, and the key (--ssh-key) or your ~/.ssh/config"
            ))
        };
        let session =
            match tokio::time::timeout(WITHIN + WITHIN, builder.connect(dest.target())).await {
                Ok(Ok(session)) => session,
                Ok(Err(e)) => return Err(refused(one_line(&e))),
                Err(_) => return Err(refused(format!("no answer within {WITHIN:?}"))),
            };
        let mut host = Host {
            dest: dest.clone(),
            session,
            addr: Ipv4Addr::UNSPECIFIED,
            home: home.to_string(),
        };
        let said = host
            .run(&format!("mkdir -p {} && echo $SSH_CONNECTION", quote(home)))
            .await?;
        // "client-ip client-port server-ip server-port"
        host.addr = said
            .split_whitespace()
            .nth(2)
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| {
                Error::Usage(format!(
                    "{dest} did not say which IPv4 address it was reached at ($SSH_CONNECTION: {:?}): give --nodes an address or name it has on IPv4",
                    said.trim()
                ))
            })?;
        Ok(host)
    }

    /// Runs `script` with `sh -c` and returns its stdout; a non-zero exit
    /// or a deadline passed is an error quoting its stderr.
    pub async fn run(&self, script: &str) -> Result<String> {
        self.run_with(script, None).await
    }

    /// As [`Self::run`], `input` its stdin.
    pub async fn run_with(&self, script: &str, input: Option<&[u8]>) -> Result<String> {
        let out = self.exchange(script, input, WITHIN).await?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// As [`Self::run`], under a deadline of its own (an install).
    pub async fn run_within(&self, script: &str, within: Duration) -> Result<String> {
        let out = self.exchange(script, None, within).await?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// As [`Self::run`], its stdout as it came.
    pub async fn run_bytes(&self, script: &str) -> Result<Vec<u8>> {
        self.exchange(script, None, WITHIN).await
    }

    async fn exchange(
        &self,
        script: &str,
        input: Option<&[u8]>,
        within: Duration,
    ) -> Result<Vec<u8>> {
        let dest = &self.dest;
        let failed = |why: String| Error::Usage(format!("on {dest}: {why}"));
        let mut cmd = self.session.command("sh");
        cmd.arg("-c")
            .arg(script)
            .stdout(openssh::Stdio::piped())
            .stderr(openssh::Stdio::piped());
        cmd.stdin(match input {
            Some(_) => openssh::Stdio::piped(),
            None => openssh::Stdio::null(),
        });
        let work = async {
            let mut child = cmd.spawn().await.map_err(|e| failed(one_line(&e)))?;
            if let (Some(bytes), Some(mut stdin)) = (input, child.stdin().take()) {
                stdin
                    .write_all(bytes)
                    .await
                    .map_err(|e| failed(e.to_string()))?;
            }
            child
                .wait_with_output()
                .await
                .map_err(|e| failed(one_line(&e)))
        };
        let began = std::time::Instant::now();
        let output = tokio::time::timeout(within, work).await.map_err(|_| {
            failed(format!(
                "`{}` took longer than {within:?}",
                first_line(script)
            ))
        })??;
        if began.elapsed() > SLOW {
            let took = began.elapsed().as_secs_f64();
            tracing::info!("{dest}: `{}` took {took:.1} s", first_line(script));
        }
        if !output.status.success() {
            let err = String::from_utf8_lossy(&output.stderr);
            return Err(failed(format!(
                "`{}` failed ({}): {}",
                first_line(script),
                output.status,
                err.trim().replace('\n', "; ")
            )));
        }
        Ok(output.stdout)
    }

    /// The programs of `needed` the host lacks on its PATH.
    pub async fn missing(&self, needed: &[(&str, &str)]) -> Result<Vec<String>> {
        let names: Vec<String> = needed.iter().map(|(p, _)| quote(p)).collect();
        let script = format!(
            "for p in {}; do command -v \"$p\" >/dev/null 2>&1 || echo \"$p\"; done",
            names.join(" ")
        );
        Ok(self
            .run(&script)
            .await?
            .lines()
            .map(str::to_string)
            .collect())
    }

    /// The `ssh` command of a long-lived channel to the host through its
    /// master, running `script`: the caller spawns it as its own child.
    pub fn channel(&self, script: &str) -> std::process::Command {
        let mut cmd = std::process::Command::new("ssh");
        cmd.arg("-S")
            .arg(self.session.control_socket())
            .args(["-o", "BatchMode=yes", "-T", "none", "sh", "-c"])
            .arg(quote(script))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        cmd
    }

    /// Whether a TCP connection from this host to `addr` is accepted
    /// within `within` (bash's `/dev/tcp`).
    pub async fn connects(&self, addr: &str, within: Duration) -> Result<bool> {
        let (ip, port) = addr.rsplit_once(':').unwrap_or((addr, "0"));
        let secs = within.as_secs_f64().max(0.1);
        let script = format!(
            "timeout {secs:.1} bash -c {} && echo yes || echo no",
            quote(&format!("exec 3<>/dev/tcp/{ip}/{port}"))
        );
        Ok(self.run(&script).await?.trim() == "yes")
    }

    /// Removes the run's folder and closes the connection.
    pub async fn close(self) -> Result<()> {
        let removed = self.run(&format!("rm -rf {}", quote(&self.home))).await;
        let _ = tokio::time::timeout(WITHIN, self.session.close()).await;
        removed.map(|_| ())
    }
}

/// The processes of a host as a fault acts on them, by PID.
impl nemesis::cluster::Host for Host {
    fn name(&self) -> String {
        self.dest.to_string()
    }

    fn suspend_group(&self, pid: u32) -> BoxFuture<'_, std::io::Result<()>> {
        Box::pin(async move { self.signal_group("STOP", pid).await })
    }

    fn resume_group(&self, pid: u32) -> BoxFuture<'_, std::io::Result<()>> {
        Box::pin(async move { self.signal_group("CONT", pid).await })
    }

    fn states(&self, pids: &[u32]) -> BoxFuture<'_, std::io::Result<Vec<(u32, char)>>> {
        let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
        Box::pin(async move {
            let script = format!("ps -o pid=,stat= -p {} || true", pids.join(","));
            let out = self.run(&script).await.map_err(std::io::Error::other)?;
            Ok(parse_states(&out))
        })
    }

    fn group_states(&self, pid: u32) -> BoxFuture<'_, std::io::Result<Vec<(u32, char)>>> {
        Box::pin(async move {
            let script = format!("ps -o pid=,stat= -g {pid} || true");
            let out = self.run(&script).await.map_err(std::io::Error::other)?;
            Ok(parse_states(&out))
        })
    }
}

impl Host {
    async fn signal_group(&self, signal: &str, pid: u32) -> std::io::Result<()> {
        if pid == 0 {
            return Err(std::io::Error::other("the node is down"));
        }
        self.run(&format!("kill -{signal} -{pid}"))
            .await
            .map(|_| ())
            .map_err(std::io::Error::other)
    }
}

/// `ps -o pid=,stat=`'s lines, each pid with the first letter of its state.
fn parse_states(out: &str) -> Vec<(u32, char)> {
    out.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let pid = words.next()?.parse().ok()?;
            let state = words.next()?.chars().next()?;
            Some((pid, state))
        })
        .collect()
}

fn first_line(script: &str) -> &str {
    script.lines().next().unwrap_or("")
}

/// An error and its causes, on one line (ssh's own words included).
fn one_line(e: &dyn std::error::Error) -> String {
    let mut said = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        said.push_str(": ");
        said.push_str(&c.to_string());
        cause = c.source();
    }
    said.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// How to log in to `dest`: `key` when given; a lab's host (`lockstorm
/// lab up`) with the lab's key unless another was given, and only with
/// the host key the lab made for it; any other host as the user's own
/// `ssh` would.
pub fn login_for(dest: &Destination, key: Option<&Path>) -> Login {
    let lab_home = crate::lab::home();
    let lab = crate::lab::read(&lab_home).ok().flatten();
    let in_lab = lab.is_some_and(|lab| {
        lab.hosts
            .iter()
            .any(|h| h.destination() == dest.to_string())
    });
    Login {
        key: key
            .map(Path::to_path_buf)
            .or_else(|| in_lab.then(|| crate::lab::key(&lab_home))),
        known_hosts: in_lab.then(|| crate::lab::known_hosts(&lab_home)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ps_lines_give_each_pid_its_state_letter() {
        assert_eq!(
            parse_states("  41 Tl\n 42 S\nbad\n"),
            vec![(41, 'T'), (42, 'S')]
        );
    }
}
