//! One running adapter process: its pipes, one request at a time, and the
//! ways it can fail. Replies are waited for on the worker's *running* time,
//! so a pause that froze worker and adapter together does not read as a
//! hung adapter once they resume.

use super::protocol::{parse_reply, Op, Reply, Request};
use super::AdapterSpec;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How often a wait for a reply wakes (to run its idle work and count time).
const POLL: Duration = Duration::from_millis(2);
/// One wake-up never counts for more than this: a longer gap is the
/// process having been stopped, not the adapter being slow.
const MAX_STEP: Duration = Duration::from_millis(50);

/// Why a request got no usable reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No reply within the budget: the op's outcome is unknown.
    Hung(String),
    /// It exited or closed its stdout: the op's outcome is unknown.
    Died(String),
    /// It broke the protocol: the message names the line or the problem,
    /// and running it again would repeat it.
    Broken(String),
    /// Its program cannot be started (not found, not executable): bad input,
    /// as a missing file is.
    Unstartable(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Hung(m) | Failure::Died(m) | Failure::Broken(m) | Failure::Unstartable(m) => {
                f.write_str(m)
            }
        }
    }
}

pub struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Its stdout, line by line; `None` once it closes.
    lines: Receiver<Option<String>>,
    next_id: u64,
    spec: AdapterSpec,
}

impl Session {
    /// Starts the adapter, its stderr appended to the spec's file.
    pub fn start(spec: &AdapterSpec) -> Result<Session, Failure> {
        let (program, args) = spec
            .argv
            .split_first()
            .ok_or_else(|| Failure::Broken("the adapter command is empty".into()))?;
        let cannot = |e: std::io::Error| {
            Failure::Broken(format!(
                "cannot start the adapter `{}`: {e}",
                spec.command()
            ))
        };
        if let Some(dir) = spec.stderr.parent() {
            std::fs::create_dir_all(dir).map_err(cannot)?;
        }
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.stderr)
            .map_err(cannot)?;
        let _ = writeln!(log, "--- lockstorm: starting `{}`", spec.command());
        let mut cmd = Command::new(program);
        if let Some(cwd) = &spec.cwd {
            cmd.current_dir(cwd);
        }
        cmd.args(args)
            .envs(&spec.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log);
        nemesis::process::die_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(|e| {
            Failure::Unstartable(format!(
                "cannot start the adapter `{}`: {e} (check the program and its path: a relative one is taken from the folder lockstorm runs in)",
                spec.command()
            ))
        })?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(Some(line)).is_err() {
                    return;
                }
            }
            let _ = tx.send(None);
        });
        Ok(Session {
            stdin: child.stdin.take(),
            child,
            lines,
            next_id: 0,
            spec: spec.clone(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `op` and waits up to `budget` of running time for its reply,
    /// calling `idle` every few milliseconds meanwhile.
    pub fn call(
        &mut self,
        op: Op,
        budget: Duration,
        mut idle: impl FnMut(),
    ) -> Result<Reply, Failure> {
        // A line before any request is one nobody asked for.
        match self.lines.try_recv() {
            Ok(Some(line)) => {
                return Err(Failure::Broken(format!(
                    "the adapter wrote a line nobody asked for (before {}): {line:?}",
                    op.name()
                )))
            }
            Ok(None) => return Err(self.died(&op)),
            Err(_) => {}
        }
        let request = Request {
            id: self.next_id,
            op,
        };
        self.next_id += 1;
        let sent = match &mut self.stdin {
            Some(stdin) => stdin
                .write_all(request.line().as_bytes())
                .and_then(|()| stdin.flush())
                .is_ok(),
            None => false,
        };
        if !sent {
            return Err(self.died(&request.op));
        }
        let mut spent = Duration::ZERO;
        loop {
            let step = Instant::now();
            match self.lines.recv_timeout(POLL) {
                Ok(Some(line)) => return parse_reply(&line, &request).map_err(Failure::Broken),
                Ok(None) => return Err(self.died(&request.op)),
                Err(RecvTimeoutError::Disconnected) => return Err(self.died(&request.op)),
                Err(RecvTimeoutError::Timeout) => {}
            }
            spent += step.elapsed().min(MAX_STEP);
            if spent >= budget {
                return Err(Failure::Hung(format!(
                    "the adapter did not answer {} #{} within {} ms",
                    request.op.name(),
                    request.id,
                    budget.as_millis()
                )));
            }
            idle();
        }
    }

    /// What became of an adapter whose stdout closed: its exit status if it
    /// exited, and the end of its stderr.
    fn died(&mut self, op: &Op) -> Failure {
        let deadline = Instant::now() + Duration::from_secs(1);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break format!("exited ({status})"),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
                _ => break "closed its stdout".to_string(),
            }
        };
        Failure::Died(format!(
            "the adapter `{}` {status} during {}{}",
            self.spec.command(),
            op.name(),
            self.spec.stderr_tail()
        ))
    }
}

impl Session {
    /// Closes its stdin, which asks it to exit; one that has not within
    /// half a second is killed. Either way it is reaped. Returns whether it
    /// exited on its own.
    pub fn close(mut self) -> bool {
        self.end()
    }

    fn end(&mut self) -> bool {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_millis(500);
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return true,
                Ok(None) => std::thread::sleep(POLL),
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        false
    }
}

/// No adapter outlives its session.
impl Drop for Session {
    fn drop(&mut self) {
        self.end();
    }
}
