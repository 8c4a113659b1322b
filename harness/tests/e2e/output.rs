//! Output that nobody reads, or that cannot be written, never makes the
//! harness panic: a closed pipe (`lockstorm check … | head -1`) keeps the
//! verdict's exit code, a full disk is one clear line and 255. Logs going
//! into a pipe carry no terminal colour codes.

use crate::common;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn lockstorm(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockstorm"));
    cmd.args(args).stderr(Stdio::piped());
    cmd
}

fn assert_no_panic(stderr: &[u8]) {
    let stderr = String::from_utf8_lossy(stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn check_into_a_closed_pipe_keeps_the_verdicts_exit_code() {
    let tmp = common::tmp();
    let history = common::overlap_history(tmp.path());
    let mut child = lockstorm(&["check", history.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader is gone before the summary is written: EPIPE.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_no_panic(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the verdict (INVALID) is the exit code"
    );
}

#[test]
fn check_onto_a_full_disk_says_so_in_one_line_and_exits_255() {
    let tmp = common::tmp();
    let history = common::overlap_history(tmp.path());
    for json in [false, true] {
        let mut args = vec!["check", history.to_str().unwrap()];
        if json {
            args.push("--json");
        }
        let full = std::fs::File::create("/dev/full").unwrap();
        let out = lockstorm(&args).stdout(full).output().unwrap();
        assert_no_panic(&out.stderr);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(255), "json {json}: {stderr}");
        assert!(stderr.contains("No space left"), "json {json}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "json {json}: {stderr}");
    }
}

#[test]
fn a_run_onto_a_full_disk_keeps_its_results_and_exits_255() {
    let tmp = common::tmp();
    let results = tmp.path().to_str().unwrap();
    let full = std::fs::File::create("/dev/full").unwrap();
    let out = lockstorm(&["--config", "single", "--nemesis", "none"])
        .args(["--time-limit", "1", "--seed", "3", "--results", results])
        .stdout(full)
        .output()
        .unwrap();
    assert_no_panic(&out.stderr);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(255), "{stderr}");
    assert!(stderr.contains("No space left"), "{stderr}");
    let latest = tmp.path().join("single-none").join("latest");
    assert!(latest.join("results.json").is_file(), "{stderr}");
    common::assert_no_process_left(tmp.path());
}

#[test]
fn warnings_into_a_pipe_have_no_colour_codes() {
    let tmp = common::tmp();
    let results = tmp.path().to_str().unwrap();
    let child = lockstorm(&["--config", "single", "--nemesis", "none"])
        .args(["--time-limit", "60", "--seed", "3", "--results", results])
        .stdout(Stdio::null())
        .env_remove("NO_COLOR")
        .spawn()
        .unwrap();
    // Interrupting it once workers record events makes the harness warn.
    let deadline = Instant::now() + Duration::from_secs(30);
    let recording = || {
        let group = tmp.path().join("single-none");
        let run = std::fs::read_dir(group).ok()?.flatten().next()?.path();
        let len = std::fs::metadata(run.join("history.jsonl")).ok()?.len();
        (len > 0).then_some(())
    };
    while recording().is_none() {
        assert!(Instant::now() < deadline, "the run did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("WARN"), "no warning to look at: {stderr}");
    assert!(
        !stderr.contains('\x1b'),
        "colour codes in a pipe: {stderr:?}"
    );
}
