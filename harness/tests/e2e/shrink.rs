//! `lockstorm shrink`: an INVALID run's faults cut down to the fewest that
//! still break its promise, printed as a command that does; a VALID run has
//! nothing to shrink; bad input is one line, exit 254.

use crate::common::{
    assert_no_process_left, assert_valid, e2e_slot, lockstorm, run_short, wait_for,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The printed command's arguments, after `lockstorm` (the test's folders
/// need no quoting).
fn printed_command(stdout: &str) -> Vec<String> {
    let line = stdout
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("lockstorm "))
        .unwrap_or_else(|| panic!("no command in:\n{stdout}"));
    line.split_whitespace().skip(1).map(String::from).collect()
}

fn value<'a>(args: &'a [String], flag: &str) -> &'a str {
    let i = args.iter().position(|a| a == flag);
    let i = i.unwrap_or_else(|| panic!("no {flag} in {args:?}"));
    &args[i + 1]
}

#[test]
fn an_unsafe_del_pause_run_shrinks_to_one_fault_whose_command_breaks_the_lock() {
    // A run, its shrink, the shrunk command and an interrupted shrink.
    crate::common::long_test();
    let tmp = crate::common::tmp();
    // Seed 1: two pauses in 12 s; the first anomaly comes with the first.
    let (out, _, dir) = run_short(tmp.path(), "unsafe-del", "pause", "12", "1", &[]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    let shrunk = lockstorm(&["shrink", dir.to_str().unwrap(), "--tries", "1"]);
    assert_eq!(shrunk.code, 0, "{}\n{}", shrunk.stdout, shrunk.stderr);
    assert!(shrunk.stdout.contains("kept 1 of the"), "{}", shrunk.stdout);
    let args = printed_command(&shrunk.stdout);
    let schedule = value(&args, "--schedule");
    assert!(
        !schedule.contains(',') && schedule.ends_with(":pause@checked"),
        "one fault: {schedule}"
    );
    assert_eq!(value(&args, "--seed"), "1");
    let limit: u64 = value(&args, "--time-limit").parse().unwrap();
    assert!(limit < 12, "the time limit shrank too: {limit}");
    // The candidates' runs are the run's own, not the user's latest.
    let latest = dir.parent().unwrap().join("latest").canonicalize().unwrap();
    assert_eq!(latest, dir, "shrink moved the latest link");
    assert!(dir.join("shrink").is_dir());
    // The printed command, run as the user would paste it, breaks it again.
    let mut again = vec!["run"];
    again.extend(args.iter().map(String::as_str));
    let again = lockstorm(&again);
    assert_eq!(again.code, 1, "{}\n{}", again.stdout, again.stderr);
    assert_no_process_left(tmp.path());
    interrupted_while_a_candidate_runs(&dir);
    assert_no_process_left(tmp.path());
}

/// Ctrl-C during a candidate's fault: the candidate heals and stops in
/// order, and shrink exits 2 saying it was interrupted.
fn interrupted_while_a_candidate_runs(dir: &Path) {
    let _slot = e2e_slot();
    let group = dir.join("shrink/unsafe-del-pause");
    let runs = || -> Vec<PathBuf> {
        let entries = std::fs::read_dir(&group).into_iter().flatten().flatten();
        entries.map(|e| e.path()).filter(|p| p.is_dir()).collect()
    };
    let before = runs();
    let child = Command::new(env!("CARGO_BIN_EXE_lockstorm"))
        .args(["shrink", dir.to_str().unwrap(), "--tries", "1"])
        .args(["--max-runs", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let history =
        |p: &PathBuf| std::fs::read_to_string(p.join("history.jsonl")).unwrap_or_default();
    let candidate = wait_for("a new candidate's pause", || {
        let mut new = runs().into_iter().filter(|p| !before.contains(p));
        new.find(|p| history(p).contains("start-pause"))
    });
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(stdout.contains("interrupted"), "{stdout}");
    assert!(history(&candidate).contains("stop-pause"), "not healed");
}

#[test]
fn a_valid_run_has_nothing_to_shrink_in_one_line() {
    let tmp = crate::common::tmp();
    let (_, results, dir) = run_short(tmp.path(), "single", "none", "4", "1", &[]);
    assert_valid(&results, &dir);
    let shrunk = lockstorm(&["shrink", dir.to_str().unwrap()]);
    assert_eq!(shrunk.code, 0, "{}", shrunk.stderr);
    assert_eq!(shrunk.stdout.lines().count(), 1, "{}", shrunk.stdout);
    assert!(
        shrunk.stdout.starts_with("nothing to shrink: "),
        "{}",
        shrunk.stdout
    );
    assert_eq!(shrunk.stderr, "");
    assert!(!dir.join("shrink").exists(), "nothing was run");
    // The same run made UNKNOWN: no promise broken, nothing to reproduce.
    let text = std::fs::read_to_string(dir.join("results.json")).unwrap();
    let unknown = text.replacen("\"valid\": true", "\"valid\": \"unknown\"", 1);
    assert_ne!(text, unknown, "results.json spells valid so");
    std::fs::write(dir.join("results.json"), unknown).unwrap();
    refused(&["shrink", dir.to_str().unwrap()], "is UNKNOWN");
}

/// Exit 254 with one line on stderr that holds `needle`.
fn refused(args: &[&str], needle: &str) {
    let out = lockstorm(args);
    assert_eq!(out.code, 254, "{args:?}: {}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains(needle),
        "{needle:?} not in {}",
        out.stderr
    );
}

#[test]
fn what_is_not_a_run_or_not_a_schedule_is_one_line_exit_254() {
    let tmp = crate::common::tmp();
    refused(
        &["shrink", tmp.path().to_str().unwrap()],
        "give a run folder",
    );
    let results = tmp.path().join("r");
    for (schedule, needle) in [
        ("1s:pause@sometime", "e.g. 1.5s:pause@checked"),
        ("1s:kill", "add it to --nemesis"),
        ("25s:pause", "use --time-limit 30 or more"),
    ] {
        let args = [
            "run",
            "--config",
            "single",
            "--nemesis",
            "pause",
            "--time-limit",
            "20",
            "--results",
            results.to_str().unwrap(),
            "--schedule",
            schedule,
        ];
        refused(&args, needle);
        assert!(!results.exists(), "a refused run made its folder");
    }
}
