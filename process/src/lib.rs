//! OS process control, in one place: isolating children, pausing, resuming
//! and killing them by PID. lockstorm only ever signals processes it started.

// The pre_exec hook below is the unsafe this module owns (see its SAFETY note).
#![allow(unsafe_code)]

mod bounded;
mod guard;
pub use bounded::{output_within, run_within};
pub use guard::guard_group;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::io;
use std::os::unix::process::CommandExt;

fn signal(pid: u32, sig: Signal) -> io::Result<()> {
    kill(Pid::from_raw(pid as i32), sig).map_err(io::Error::from)
}

/// Signals the process group `leader` leads: [`isolate`] makes every child
/// its own group's leader, so a worker's own children (a client adapter)
/// and threads are struck with it.
fn signal_group(leader: u32, sig: Signal) -> io::Result<()> {
    nix::sys::signal::killpg(Pid::from_raw(leader as i32), sig).map_err(io::Error::from)
}

/// SIGKILL to a whole process group (a worker and its children).
pub fn kill_group(leader: u32) -> io::Result<()> {
    signal_group(leader, Signal::SIGKILL)
}

/// Freezes a process exactly where it is, as a GC pause or VM stall would.
pub fn suspend(pid: u32) -> io::Result<()> {
    signal(pid, Signal::SIGSTOP)
}

pub fn resume(pid: u32) -> io::Result<()> {
    signal(pid, Signal::SIGCONT)
}

/// SIGKILL. Works on a stopped process too; the caller still reaps it.
pub fn kill_now(pid: u32) -> io::Result<()> {
    signal(pid, Signal::SIGKILL)
}

/// SIGQUIT: PostgreSQL's immediate shutdown (no checkpoint, shared memory
/// removed as it exits).
pub fn quit(pid: u32) -> io::Result<()> {
    signal(pid, Signal::SIGQUIT)
}

pub fn terminate(pid: u32) -> io::Result<()> {
    signal(pid, Signal::SIGTERM)
}

/// SIGKILL to every child of `pid`, each by PID, `pid` frozen first so it
/// forks no more: a server whose children leave its process group
/// (PostgreSQL's backends each call `setsid`) is not killed whole by a
/// SIGKILL to its group. The caller kills `pid` itself next (SIGKILL ends
/// it frozen). Returns the children struck, for [`wait_gone`].
pub fn kill_children(pid: u32) -> Vec<u32> {
    if suspend(pid).is_err() {
        return Vec::new();
    }
    let kids = children(pid);
    for &kid in &kids {
        let _ = kill_now(kid);
    }
    kids
}

/// Waits up to `within` until none of `pids` runs any more (gone, or a
/// zombie its new parent has yet to reap); false if one still does.
pub fn wait_gone(pids: &[u32], within: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    loop {
        if pids.iter().all(|&p| matches!(state(p), None | Some('Z'))) {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The process state letter from /proc (`T` = stopped), if it still exists.
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses; the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The processes other than `pid` that hold the pipe or file `pid` reads
/// its stdin from: while one holds a pipe's write end, `pid` never reads
/// its end. Read from /proc, so best-effort (a process may come or go).
pub fn stdin_holders(pid: u32) -> Vec<u32> {
    let Ok(stdin) = std::fs::read_link(format!("/proc/{pid}/fd/0")) else {
        return Vec::new();
    };
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|p| p.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| p != pid)
        .filter(|p| {
            std::fs::read_dir(format!("/proc/{p}/fd"))
                .into_iter()
                .flatten()
                .flatten()
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == stdin))
        })
        .collect()
}

/// The parent PID from /proc, if the process still exists (a zombie does
/// until it is reaped, keeping its PID and so its group's id from reuse).
pub fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name: state, then the parent's PID.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Makes a child its own process group (a Ctrl-C at the terminal reaches only
/// the harness, which then shuts the run down in order) and has the kernel
/// kill it if the harness dies, so no node or worker outlives a crashed run.
pub fn isolate(cmd: &mut std::process::Command) {
    own_group_until_parent_dies(cmd, Signal::SIGKILL);
}

/// As [`isolate`], but the kernel sends SIGQUIT when the parent dies:
/// PostgreSQL's immediate shutdown, which removes the server's shared
/// memory as it exits (a SIGKILLed server leaves it behind for good).
pub fn isolate_quitting(cmd: &mut std::process::Command) {
    own_group_until_parent_dies(cmd, Signal::SIGQUIT);
}

/// As [`isolate`], but the kernel sends SIGTERM when the parent dies: for a
/// child that ends itself in order on that signal. A matrix's cell is a
/// whole run that stops so (heals its faults, stops its nodes and workers);
/// its own group keeps a Ctrl-C at the terminal from reaching it: the
/// matrix passes one on with [`interrupt`]. A worker kills its whole group
/// on it, its client adapter's children with it, which a SIGKILL of the
/// worker alone would leave running.
pub fn isolate_run(cmd: &mut std::process::Command) {
    own_group_until_parent_dies(cmd, Signal::SIGTERM);
}

/// SIGINT: asks a run to stop in order, as a Ctrl-C does.
pub fn interrupt(pid: u32) -> io::Result<()> {
    signal(pid, Signal::SIGINT)
}

fn own_group_until_parent_dies(cmd: &mut std::process::Command, death: Signal) {
    let parent = std::process::id();
    // SAFETY: the closure runs between fork and exec and only makes
    // async-signal-safe system calls.
    unsafe {
        cmd.pre_exec(move || {
            nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0))?;
            nix::sys::prctl::set_pdeathsig(death)?;
            // The harness died before the line above took effect.
            if nix::unistd::getppid().as_raw() as u32 != parent {
                return Err(io::Error::other("the harness exited"));
            }
            Ok(())
        });
    }
}

/// Has the kernel kill the child when the thread that started it exits, so
/// a client adapter never outlives its worker, even a worker killed while
/// the adapter is stopped (it would not see its stdin close). The child
/// stays in its parent's process group: a pause of the worker freezes it.
pub fn die_with_parent(cmd: &mut std::process::Command) {
    let parent = std::process::id();
    // SAFETY: as in `isolate`, only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            if nix::unistd::getppid().as_raw() as u32 != parent {
                return Err(io::Error::other("the parent exited"));
            }
            Ok(())
        });
    }
}

/// Whether a child has exited, without reaping it. Until it is reaped its
/// pid cannot be reused, so the process group it led keeps its id: kill the
/// group ([`kill_group`]), then reap. Reaped first, the id could name a new
/// group by the time of the kill (another worker's, even). A pid that is
/// not an unreaped child of ours reads as exited.
pub fn exited(pid: u32) -> bool {
    !matches!(exit_status(pid), Ok(None))
}

/// How the child `pid` ended, if it has, without reaping it (see
/// [`exited`]); worded as `std`'s `ExitStatus` is.
pub fn exit_status(pid: u32) -> io::Result<Option<String>> {
    use nix::sys::wait::{WaitPidFlag, WaitStatus};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
    Ok(match wait_id(pid, flags)? {
        WaitStatus::Exited(_, code) => Some(format!("exit status: {code}")),
        WaitStatus::Signaled(_, signal, core) => Some(format!(
            "signal: {} ({signal}){}",
            signal as i32,
            if core { " (core dumped)" } else { "" }
        )),
        _ => None,
    })
}

/// Blocks until a child has exited, leaving it unreaped (see [`exited`]).
pub fn wait_exited(pid: u32) {
    use nix::sys::wait::WaitPidFlag;
    while wait_id(pid, WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) == Err(nix::errno::Errno::EINTR)
    {
    }
}

fn wait_id(
    pid: u32,
    flags: nix::sys::wait::WaitPidFlag,
) -> nix::Result<nix::sys::wait::WaitStatus> {
    nix::sys::wait::waitid(nix::sys::wait::Id::Pid(Pid::from_raw(pid as i32)), flags)
}

/// `pid (command)`, as messages name a process (the command from /proc,
/// empty once it is gone).
pub fn named(pid: u32) -> String {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    format!("{pid} ({})", comm.trim())
}

/// The descendants of `pid` that left its process group (they called
/// `setsid` or `setpgid`), as `pid (command)`: killing the group misses
/// them. Found through each process's `/proc/<pid>/task/*/children`, so a
/// double-forked daemon, whose parent has exited, is not seen.
pub fn strays(pid: u32) -> Vec<String> {
    let group = |p: u32| nix::unistd::getpgid(Some(Pid::from_raw(p as i32))).ok();
    let Some(own) = group(pid) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut todo = vec![pid];
    while let Some(parent) = todo.pop() {
        for child in children(parent) {
            match group(child) {
                // Its own descendants went with it: it is the one to name.
                Some(g) if g != own => found.push(named(child)),
                _ => todo.push(child),
            }
        }
    }
    found
}

/// The children of every thread of `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Resumes a suspended process when dropped, so a fault is healed even when
/// the task that injected it is cancelled.
pub struct Suspended {
    pid: u32,
    group: bool,
    /// Its children, frozen with it ([`Suspended::tree`]).
    children: Vec<u32>,
}

impl Suspended {
    pub fn new(pid: u32) -> io::Result<Self> {
        suspend(pid)?;
        Ok(Suspended {
            pid,
            group: false,
            children: Vec::new(),
        })
    }
    /// Freezes `pid` and then each of its children by PID: a node whose
    /// children serve on their own (PostgreSQL's backends, each in a
    /// session of its own) is frozen whole, as a paused machine would be.
    pub fn tree(pid: u32) -> io::Result<Self> {
        let mut frozen = Suspended::new(pid)?;
        frozen.children = children(pid);
        for &kid in &frozen.children {
            let _ = suspend(kid);
        }
        Ok(frozen)
    }
    /// Freezes the whole group `leader` leads.
    pub fn group(leader: u32) -> io::Result<Self> {
        signal_group(leader, Signal::SIGSTOP)?;
        Ok(Suspended {
            pid: leader,
            group: true,
            children: Vec::new(),
        })
    }
    pub fn pid(&self) -> u32 {
        self.pid
    }
    /// The children frozen with it by PID ([`Suspended::tree`]).
    pub fn children(&self) -> &[u32] {
        &self.children
    }
}

impl Drop for Suspended {
    fn drop(&mut self) {
        for &kid in &self.children {
            let _ = resume(kid);
        }
        let _ = match self.group {
            true => signal_group(self.pid, Signal::SIGCONT),
            false => resume(self.pid),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::{Duration, Instant};

    fn wait_for_state(pid: u32, want: char) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if state(pid) == Some(want) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    #[test]
    fn the_holders_of_a_childs_stdin_pipe_are_found_until_they_let_go() {
        let mut child = Command::new("sleep")
            .arg("30")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Another test's child, between its fork and its exec, may hold a
        // copy for a moment: ours is what must be there, then gone.
        let me = std::process::id();
        assert!(
            stdin_holders(child.id()).contains(&me),
            "we hold its write end"
        );
        drop(child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        while !stdin_holders(child.id()).is_empty() {
            assert!(Instant::now() < deadline, "{:?}", stdin_holders(child.id()));
            std::thread::sleep(Duration::from_millis(5));
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_tree_is_frozen_and_killed_with_its_children_outside_its_group() {
        // A parent whose child leaves its group, as a PostgreSQL backend does.
        let mut parent = Command::new("sh")
            .args(["-c", "setsid sleep 30 & wait"])
            .spawn()
            .unwrap();
        let pid = parent.id();
        let deadline = Instant::now() + Duration::from_secs(5);
        let kid = loop {
            if let Some(&kid) = children(pid).first() {
                break kid;
            }
            assert!(Instant::now() < deadline, "the child never started");
            std::thread::sleep(Duration::from_millis(5));
        };
        {
            let _frozen = Suspended::tree(pid).unwrap();
            assert!(wait_for_state(pid, 'T') && wait_for_state(kid, 'T'));
        }
        assert!(wait_for_state(kid, 'S'), "resumed with its parent");
        let struck = kill_children(pid);
        assert_eq!(struck, vec![kid]);
        kill_now(pid).unwrap();
        parent.wait().unwrap();
        assert!(
            wait_gone(&[kid], Duration::from_secs(5)),
            "the child outside the group died"
        );
    }

    #[test]
    fn suspends_resumes_and_kills_a_real_child() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        isolate(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let pid = child.id();
        {
            let _paused = Suspended::new(pid).unwrap();
            assert!(wait_for_state(pid, 'T'), "not stopped: {:?}", state(pid));
        }
        assert!(wait_for_state(pid, 'S'), "not resumed: {:?}", state(pid));
        // Its own process group, so a terminal's Ctrl-C does not reach it.
        let pgid = nix::unistd::getpgid(Some(Pid::from_raw(pid as i32))).unwrap();
        assert_eq!(pgid.as_raw() as u32, pid);
        assert_eq!(parent(pid), Some(std::process::id()));
        suspend(pid).unwrap();
        kill_now(pid).unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success());
        assert_eq!(state(pid), None);
    }

    #[test]
    fn a_group_is_frozen_and_killed_with_its_leader() {
        // The leader starts a child of its own, as a worker starts an adapter.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 30 & echo $!; wait"]);
        cmd.stdout(std::process::Stdio::piped());
        isolate(&mut cmd);
        let mut leader = cmd.spawn().unwrap();
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(leader.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let child: u32 = line.trim().parse().unwrap();
        {
            let _paused = Suspended::group(leader.id()).unwrap();
            assert!(wait_for_state(leader.id(), 'T'), "leader not stopped");
            assert!(wait_for_state(child, 'T'), "its child not stopped");
        }
        assert!(wait_for_state(child, 'S'), "child not resumed");
        kill_group(leader.id()).unwrap();
        assert!(!leader.wait().unwrap().success());
        assert!(
            wait_for_state(child, 'Z') || state(child).is_none(),
            "child survived"
        );
    }
}
