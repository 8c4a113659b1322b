//! A paused worker outlives a harness killed by SIGKILL unless something
//! resumes it: a stopped process does not act on its parent-death signal
//! until it is continued, and the kernel's own rescue (SIGHUP and SIGCONT
//! to a stopped group that the death orphans) does not come when the new
//! parent shares the worker's session. So each worker forks a guard: a
//! process of its own group (a pause of the worker's group does not stop
//! it) that dies with the worker and, when the harness's end of the
//! worker's stdin closes, continues the worker's group. The worker then
//! acts on the signal that was waiting and ends its group.

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use nix::unistd::{fork, ForkResult, Pid};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

/// Forks the guard of the calling process's group, watching `lifeline`
/// (the read end of a pipe whose write end only the harness holds). Call
/// it while the process has one thread: after a fork only the calling
/// thread exists, and the guard makes only async-signal-safe calls, but
/// that is sound only before other threads hold locks. Refused otherwise.
pub fn guard_group(lifeline: BorrowedFd<'_>) -> io::Result<()> {
    if threads() != Some(1) {
        return Err(io::Error::other(
            "the guard must be forked while the process has one thread",
        ));
    }
    let group = nix::unistd::getpgrp();
    let parent = nix::unistd::getpid();
    // SAFETY: the process has a single thread (checked above), so the
    // child is a full copy with no lock held by a vanished thread; it
    // makes only async-signal-safe system calls and leaves by `_exit`.
    match unsafe { fork() }.map_err(io::Error::from)? {
        ForkResult::Parent { .. } => Ok(()),
        ForkResult::Child => {
            watch(lifeline, group, parent);
            // SAFETY: `_exit` is async-signal-safe and runs no destructor
            // or exit handler that belongs to the parent.
            unsafe { nix::libc::_exit(0) }
        }
    }
}

/// The guard's whole life: its own group, its parent's death its own,
/// then wait for the lifeline's hang-up and continue `group`.
fn watch(lifeline: BorrowedFd<'_>, group: Pid, parent: Pid) {
    let own = nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0));
    let dies = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    if own.is_err() || dies.is_err() || nix::unistd::getppid() != parent {
        return;
    }
    // Nothing of the parent's output is ours to hold open.
    let _ = nix::unistd::close(1);
    let _ = nix::unistd::close(2);
    let mut fds = [PollFd::new(lifeline.as_fd(), PollFlags::empty())];
    loop {
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {
                let seen = fds[0].revents().unwrap_or(PollFlags::empty());
                if seen.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL) {
                    break;
                }
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        }
    }
    // The group is our parent's, alive while we are (we die with it).
    let _ = nix::sys::signal::killpg(group, Signal::SIGCONT);
}

/// The process's thread count, from /proc.
fn threads() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))?
        .trim()
        .parse()
        .ok()
}
