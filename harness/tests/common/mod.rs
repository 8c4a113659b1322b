//! Runs the real `lockstorm` binary against real `redis-server` processes.

#![allow(dead_code)]

use checker::verdict::Results;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn lockstorm(args: &[&str]) -> Run {
    lockstorm_with(args, &[])
}

pub fn lockstorm_with(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockstorm"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("lockstorm runs");
    Run {
        code: status
            .code()
            .expect("lockstorm exits, not killed by a signal"),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// A run in its own results folder; fails the test if the harness crashed.
pub fn run(results: &Path, args: &[&str]) -> (Run, Results, PathBuf) {
    let mut all = vec!["run", "--results", results.to_str().unwrap()];
    all.extend_from_slice(args);
    let run = lockstorm(&all);
    assert!(
        [0, 1, 2].contains(&run.code),
        "lockstorm failed with {}:\n{}\n{}",
        run.code,
        run.stdout,
        run.stderr
    );
    let group = std::fs::read_dir(results)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .expect("a results group folder");
    let dir = group.join("latest").canonicalize().expect("a latest link");
    let text = std::fs::read_to_string(dir.join("results.json")).expect("results.json");
    let results: Results = serde_json::from_str(&text).expect("results.json parses");
    assert_no_process_left(results_root(&group));
    (run, results, dir)
}

fn results_root(group: &Path) -> &Path {
    group.parent().unwrap()
}

/// Processes still running (or stopped) inside `root`: nodes and workers all
/// work inside their run folder, so any process whose cwd is under it is a
/// leftover.
pub fn leftover_processes(root: &Path) -> Vec<String> {
    let root = root.canonicalize().unwrap();
    let mut left = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) {
            if cwd.starts_with(&root) {
                let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
                left.push(format!("{pid}: {}", stat.trim()));
            }
        }
    }
    left
}

pub fn assert_no_process_left(root: &Path) {
    let left = leftover_processes(root);
    assert!(
        left.is_empty(),
        "processes left behind:\n{}",
        left.join("\n")
    );
}

pub fn count(results: &Results, anomaly: &str) -> u64 {
    results
        .anomalies
        .get(anomaly)
        .unwrap_or_else(|| panic!("results.json lacks anomaly {anomaly}"))
        .count
}

/// lockstorm iptables chains no live run owns: a run makes its chain's lock
/// file first, holds an exclusive `flock` on it, and deletes it only once the
/// chain is gone, so a chain whose lock file is there and free was left
/// behind. (A chain without one was not made by this lockstorm.)
pub fn orphaned_chains() -> Vec<String> {
    use nix::fcntl::{Flock, FlockArg};
    let out = Command::new("iptables")
        .arg("-S")
        .output()
        .expect("iptables runs (CI installs it)");
    let left_behind = |chain: &str| {
        std::fs::File::open(nemesis::net::lock_path(chain))
            .is_ok_and(|f| Flock::lock(f, FlockArg::LockExclusiveNonblock).is_ok())
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("-N "))
        .filter(|chain| chain.starts_with(nemesis::net::PREFIX) && left_behind(chain))
        .map(String::from)
        .collect()
}

/// A bare history in `dir` where two holders hold the lock at once: one
/// overlap, which only mutual exclusion forbids (`check` says INVALID, 1).
pub fn overlap_history(dir: &Path) -> PathBuf {
    let path = dir.join("h.jsonl");
    let lines = [
        r#"{"index":0,"time":10,"process":0,"type":"invoke","f":"acquire","value":null,"token":"a"}"#,
        r#"{"index":1,"time":20,"process":0,"type":"ok","f":"acquire","value":null,"token":"a"}"#,
        r#"{"index":2,"time":30,"process":1,"type":"invoke","f":"acquire","value":null,"token":"b"}"#,
        r#"{"index":3,"time":40,"process":1,"type":"ok","f":"acquire","value":null,"token":"b"}"#,
        r#"{"index":4,"time":50,"process":"harness","type":"invoke","f":"read","value":null}"#,
        r#"{"index":5,"time":60,"process":"harness","type":"ok","f":"read","value":0}"#,
    ];
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// How many events of the history have `f` equal to `op`.
pub fn events(dir: &Path, op: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("history.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["f"] == op)
        .collect()
}

/// Every `op` event carries the evidence that its fault took effect.
pub fn assert_verified(dir: &Path, op: &str) {
    let found = events(dir, op);
    assert!(!found.is_empty(), "no {op} event");
    for e in &found {
        assert!(e["value"]["verified"].is_object(), "{op} not verified: {e}");
    }
}

/// `lockstorm run --config C --nemesis N --time-limit T --seed S`, faults
/// every ~2 s, plus `extra`: the shape of most end-to-end runs.
pub fn run_short(
    results: &Path,
    config: &str,
    nemesis: &str,
    time_limit: &str,
    seed: &str,
    extra: &[&str],
) -> (Run, Results, PathBuf) {
    let mut args = vec![
        "--config",
        config,
        "--nemesis",
        nemesis,
        "--time-limit",
        time_limit,
    ];
    args.extend(["--nemesis-interval-ms", "2000", "--seed", seed]);
    args.extend_from_slice(extra);
    run(results, &args)
}
