//! Commands with a deadline: every program lockstorm runs to completion (a
//! version probe, `initdb`, an installer step, a user's fault command) runs
//! in a process group of its own that dies with the harness, and is killed
//! as a group when it runs past its deadline, so neither a hung program nor
//! a child it left behind outlives the step.

use std::io;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// How often a running command is looked at.
const POLL: Duration = Duration::from_millis(20);

/// Runs `cmd` (stdin from nowhere unless the caller set it; stdout and
/// stderr as the caller set them) and waits at most `within`. `None`: it
/// ran past its deadline, and its whole group was killed and the leader
/// reaped. A child it started in the background, still in its group, is
/// left running when the command itself ends in time: a fault command's
/// restarted server is the user's.
pub fn run_within(cmd: &mut Command, within: Duration) -> io::Result<Option<ExitStatus>> {
    crate::isolate(cmd);
    let mut child = cmd.spawn()?;
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            // The leader is not reaped yet, so the group's id is still ours.
            let _ = crate::kill_group(child.id());
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(POLL);
    }
}

/// As [`run_within`], with no input and stdout and stderr captured. They go to unnamed
/// files, not pipes: a child left holding a pipe would keep its reader
/// waiting for an end that never comes. Past the deadline: an error of
/// kind `TimedOut` that says so.
pub fn output_within(cmd: &mut Command, within: Duration) -> io::Result<Output> {
    use std::io::{Read, Seek};
    let mut out = tempfile::tempfile()?;
    let mut err = tempfile::tempfile()?;
    // A probe that waited for input would wait until its deadline.
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(err.try_clone()?);
    let status = run_within(cmd, within)?.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "{} ran past {} s and was stopped",
                cmd.get_program().to_string_lossy(),
                within.as_secs_f64()
            ),
        )
    })?;
    let read = |f: &mut std::fs::File| -> io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        f.rewind()?;
        f.read_to_end(&mut bytes)?;
        Ok(bytes)
    };
    Ok(Output {
        status,
        stdout: read(&mut out)?,
        stderr: read(&mut err)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_that_ends_in_time_gives_its_output_and_status() {
        let out = output_within(
            Command::new("sh").args(["-c", "echo said; echo whined >&2; exit 3"]),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "said\n");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "whined\n");
    }

    #[test]
    fn a_background_child_holding_stdout_does_not_keep_the_caller_waiting() {
        let started = Instant::now();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 30 & echo $!"]);
        let out = output_within(&mut cmd, Duration::from_secs(10)).unwrap();
        assert!(out.status.success());
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        // The sleeper is ours: stop it by its pid.
        let pid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        crate::kill_now(pid).unwrap();
    }

    #[test]
    fn a_hung_command_is_killed_with_its_children_at_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        let script = format!("sleep 300 & echo $! > {0}; sleep 300", pids.display());
        let started = Instant::now();
        let err = output_within(
            Command::new("sh").args(["-c", &script]),
            Duration::from_millis(500),
        )
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        assert!(err.to_string().contains("ran past 0.5 s"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let child: u32 = std::fs::read_to_string(&pids)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            crate::wait_gone(&[child], Duration::from_secs(5)),
            "the command's background child {child} outlived its group's kill"
        );
    }
}
