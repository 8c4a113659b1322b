//! The wall clock of a node whose program reads the time without libc,
//! served by the harness: etcd is Go, and Go reads `CLOCK_REALTIME` through
//! the vDSO, which the time shim (an `LD_PRELOAD` library) never sees.
//!
//! The node starts under a seccomp filter that hands each of its
//! `clock_gettime(CLOCK_REALTIME)` system calls to the harness (a user
//! notification), and every other call (`CLOCK_MONOTONIC` included) to the
//! kernel. So that the wall clock is read by a system call at all, the
//! vDSO is hidden from the program: stopped at its `exec` (ptrace), its
//! auxiliary vector's `AT_SYSINFO_EHDR` entry becomes `AT_IGNORE`, and Go
//! (as glibc) then falls back to the system call. A thread of the harness
//! answers each call with real time shifted as the node's control file
//! says ([`crate::clock::TimeControl`], the file the shim reads for a
//! Redis node), so the clock nemesis moves an etcd member's clock as it
//! moves a Redis node's. Local backend, x86-64 Linux only; the harness must
//! be allowed to trace its own children (root, or Yama's `ptrace_scope` 0
//! or 1, the usual default).

#![allow(unsafe_code)]

use crate::clock::{real_now_ns, TimeControl};
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The descriptor the child keeps its notification listener at, for the
/// harness to take a copy of (`pidfd_getfd`) while the child is stopped.
const LISTENER_FD: RawFd = 999;

/// `AUDIT_ARCH_X86_64`: the filter lets through system calls of any other
/// architecture's numbering untouched.
const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;

// Classic BPF opcodes (linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;

// Offsets in `struct seccomp_data`.
const NR_AT: u32 = 0;
const ARCH_AT: u32 = 4;
const ARG0_AT: u32 = 16;

// Auxiliary vector keys (elf.h).
const AT_NULL: u64 = 0;
const AT_IGNORE: u64 = 1;
const AT_SYSINFO_EHDR: u64 = 33;

/// How often the serving thread looks whether it should stop.
const POLL_MS: u16 = 200;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump_if(k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: JEQ_K,
        jt,
        jf,
        k,
    }
}

/// `clock_gettime(CLOCK_REALTIME, …)` of x86-64 to the listener; the rest
/// to the kernel.
fn filter() -> Vec<libc::sock_filter> {
    vec![
        stmt(LD_W_ABS, ARCH_AT),
        jump_if(AUDIT_ARCH_X86_64, 1, 0),
        stmt(RET_K, libc::SECCOMP_RET_ALLOW),
        stmt(LD_W_ABS, NR_AT),
        jump_if(libc::SYS_clock_gettime as u32, 1, 0),
        stmt(RET_K, libc::SECCOMP_RET_ALLOW),
        stmt(LD_W_ABS, ARG0_AT),
        jump_if(libc::CLOCK_REALTIME as u32, 1, 0),
        stmt(RET_K, libc::SECCOMP_RET_ALLOW),
        stmt(RET_K, libc::SECCOMP_RET_USER_NOTIF),
    ]
}

/// Whether this machine can serve a node's clock: x86-64 Linux.
pub fn supported() -> Result<(), String> {
    match cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        true => Ok(()),
        false => Err("serving a Go program's clock needs x86-64 Linux".into()),
    }
}

/// Makes `cmd`'s child install the filter, keep its listener at
/// [`LISTENER_FD`] and stop at its `exec` for [`attach`]. Register it after
/// every other `pre_exec`: from here on the child's wall-clock reads wait
/// for the harness.
pub fn prepare(cmd: &mut Command) {
    let program = filter();
    // SAFETY: the closure runs between fork and exec and makes only
    // async-signal-safe system calls (prctl, seccomp, dup2, close, ptrace) on
    // memory built before the fork.
    unsafe {
        cmd.pre_exec(move || {
            // What lets a process without CAP_SYS_ADMIN install a filter;
            // the node gains no privilege at its exec anyway.
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            let prog = libc::sock_fprog {
                len: program.len() as u16,
                filter: program.as_ptr() as *mut libc::sock_filter,
            };
            let fd = libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &prog as *const libc::sock_fprog,
            );
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::dup2(fd as RawFd, LISTENER_FD) < 0 {
                return Err(io::Error::last_os_error());
            }
            libc::close(fd as RawFd);
            if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A node's served clock: the thread answering its wall-clock reads, until
/// the node is gone or this is dropped.
pub struct ServedClock {
    stop: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
}

impl ServedClock {
    /// How many wall-clock reads it has answered.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
}

impl Drop for ServedClock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// For the child `pid` that [`prepare`] made stop at its `exec`: hides its
/// vDSO, takes its listener, lets it run, and serves its wall clock from
/// the control file at `control`. Called by the thread that spawned it (its
/// tracer). On an error the child is still stopped: the caller kills it.
pub fn attach(pid: u32, control: &Path) -> io::Result<ServedClock> {
    let target = Pid::from_raw(pid as i32);
    match waitpid(target, Some(WaitPidFlag::__WALL))? {
        WaitStatus::Stopped(_, Signal::SIGTRAP) => {}
        other => {
            return Err(io::Error::other(format!(
                "the node did not stop at its exec ({other:?})"
            )))
        }
    }
    let control = TimeControl::open(control)?;
    hide_vdso(target)?;
    let listener = take_listener(pid)?;
    ptrace::detach(target, None)?;
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let (stopping, counting) = (stop.clone(), served.clone());
    std::thread::Builder::new()
        .name(format!("clock-{pid}"))
        .spawn(move || serve(&listener, &control, &stopping, &counting))?;
    Ok(ServedClock { stop, served })
}

/// Turns the `AT_SYSINFO_EHDR` entry of the stopped child's auxiliary
/// vector into `AT_IGNORE`. At the `exec` stop its stack is the kernel's:
/// `argc`, the argument pointers and a null, the environment pointers and
/// a null, then the vector's key-value pairs up to `AT_NULL`.
fn hide_vdso(target: Pid) -> io::Result<()> {
    let sp = ptrace::getregs(target)?.rsp;
    let mem = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{target}/mem"))?;
    let word = |at: u64| -> io::Result<u64> {
        let mut bytes = [0u8; 8];
        mem.read_exact_at(&mut bytes, at)?;
        Ok(u64::from_ne_bytes(bytes))
    };
    let argc = word(sp)?;
    let mut at = sp + 8 * (argc + 2);
    while word(at)? != 0 {
        at += 8;
    }
    at += 8;
    loop {
        match word(at)? {
            // No vDSO (a kernel booted with `vdso=0`): its reads are
            // system calls already.
            AT_NULL => return Ok(()),
            AT_SYSINFO_EHDR => return mem.write_all_at(&AT_IGNORE.to_ne_bytes(), at),
            _ => at += 16,
        }
    }
}

/// A copy of the stopped child's listener.
fn take_listener(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: plain system calls; each descriptor they return is new and
    // owned here.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0);
        if pidfd < 0 {
            return Err(io::Error::last_os_error());
        }
        let pidfd = OwnedFd::from_raw_fd(pidfd as RawFd);
        let fd = libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), LISTENER_FD, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd as RawFd))
    }
}

/// Answers each wall-clock read with real time shifted as `control` says,
/// written into the caller's `timespec`, until every process of the node
/// is gone (the listener hangs up) or `stop` is set.
fn serve(listener: &OwnedFd, control: &TimeControl, stop: &AtomicBool, served: &AtomicU64) {
    let fd = listener.as_raw_fd();
    while !stop.load(Ordering::Relaxed) {
        let mut poll = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, POLL_MS as i32) };
        if ready < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
        if poll.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            return;
        }
        if poll.revents & libc::POLLIN == 0 {
            continue;
        }
        // SAFETY: the kernel fills the zeroed request; the answer names
        // its id; the write goes to the caller's memory only while its
        // call is still pending (ID_VALID), and no further than a timespec.
        unsafe {
            let mut request: libc::seccomp_notif = std::mem::zeroed();
            if libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut request) < 0 {
                // ENOENT: the caller was killed in the meantime.
                continue;
            }
            let now = control.get().apply(real_now_ns());
            let time = libc::timespec {
                tv_sec: now.div_euclid(1_000_000_000),
                tv_nsec: now.rem_euclid(1_000_000_000),
            };
            let size = std::mem::size_of::<libc::timespec>();
            let local = libc::iovec {
                iov_base: &time as *const libc::timespec as *mut libc::c_void,
                iov_len: size,
            };
            let remote = libc::iovec {
                iov_base: request.data.args[1] as *mut libc::c_void,
                iov_len: size,
            };
            let mut answer: libc::seccomp_notif_resp = std::mem::zeroed();
            answer.id = request.id;
            let pending = libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &request.id) == 0;
            let written = pending
                && libc::process_vm_writev(request.pid as libc::pid_t, &local, 1, &remote, 1, 0)
                    == size as isize;
            match written {
                true => served.fetch_add(1, Ordering::Relaxed),
                false => {
                    answer.error = -libc::EFAULT;
                    0
                }
            };
            libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_SEND, &mut answer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `date`, a libc program that reads the wall clock through the vDSO
    /// too, prints the served time: an hour ahead, and back to real time
    /// once the control file says so.
    #[test]
    fn a_child_reads_the_wall_clock_the_control_file_sets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("time.ctl");
        let control = TimeControl::create(&path).unwrap();
        let date = |control: &Path| {
            let mut cmd = Command::new("date");
            cmd.arg("+%s").stdout(std::process::Stdio::piped());
            prepare(&mut cmd);
            let child = cmd.spawn().unwrap();
            let served = attach(child.id(), control).unwrap();
            let out = child.wait_with_output().unwrap();
            let said: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
            (said - real_now_ns() / 1_000_000_000, served.served())
        };
        control.set(3_600_000_000_000, 1.0).unwrap();
        let (ahead, served) = date(&path);
        assert!((3599..=3600).contains(&ahead), "date was {ahead} s ahead");
        assert!(served >= 1, "no read served");
        control.set(0, 1.0).unwrap();
        let (ahead, _) = date(&path);
        assert!((-1..=0).contains(&ahead), "date was {ahead} s ahead");
    }
}
