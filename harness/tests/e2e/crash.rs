//! Processes dying under a run: a worker SIGKILLed while it holds the lock,
//! and the storage node SIGKILLed under every worker.

use crate::common;

use checker::Validity;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `lockstorm run` in the background, so the test can strike while it runs.
struct Background {
    child: Child,
    results: PathBuf,
}

impl Background {
    fn start(results: &Path, args: &[&str]) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_lockstorm"))
            .args(["run", "--results", results.to_str().unwrap()])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("lockstorm starts");
        Background {
            child,
            results: results.to_path_buf(),
        }
    }

    /// The run folder and its `run.json`, once the run has written it.
    fn run_json(&mut self) -> (PathBuf, Value) {
        self.poll("run.json", |results| {
            let path = std::fs::read_dir(results)
                .ok()?
                .flatten()
                .flat_map(|group| std::fs::read_dir(group.path()).into_iter().flatten())
                .flatten()
                .map(|run| run.path())
                .find(|run| run.join("run.json").exists())?;
            let text = std::fs::read_to_string(path.join("run.json")).ok()?;
            let json = serde_json::from_str(&text).ok()?;
            Some((path, json))
        })
    }

    /// Waits until `found` finds something in the history, which grows as
    /// the run goes; fails the test if the run ends first.
    fn watch_history<T>(
        &mut self,
        dir: &Path,
        what: &str,
        found: impl Fn(&[Value]) -> Option<T>,
    ) -> T {
        let path = dir.join("history.jsonl");
        self.poll(what, |_| found(&read_history(&path)))
    }

    fn poll<T>(&mut self, what: &str, mut probe: impl FnMut(&Path) -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(t) = probe(&self.results) {
                return t;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("lockstorm exited ({status}) before {what}");
            }
            assert!(Instant::now() < deadline, "no {what} within 60 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the run to end: its exit code and first line of output.
    fn finish(self) -> (i32, String) {
        let out = self.child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let code = out.status.code().expect("lockstorm exits, not killed");
        assert!(
            [0, 1, 2].contains(&code),
            "lockstorm failed with {code}:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        common::assert_no_process_left(&self.results);
        (code, stdout)
    }
}

/// The complete lines of a history (the last may still be half written).
fn read_history(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn client(e: &Value) -> Option<u64> {
    e["process"].as_u64()
}

/// The holder is SIGKILLed right after its acquire; a worker waiting for the
/// lock is SIGKILLed with its acquire in flight. Both deaths are recorded,
/// the op in flight completes as `info`, and replacements carry on under new
/// process ids. The dead holder's key lives on until its TTL, then another
/// worker takes the lock: no overlap, since a dead process believes nothing.
#[test]
fn a_killed_worker_is_recorded_as_crashed_and_replaced_not_blamed_as_a_second_holder() {
    let tmp = common::tmp();
    let args = [
        "--config",
        "single",
        "--time-limit",
        "15",
        "--seed",
        "1",
        "--work-ms",
        "2000",
        "--ttl-ms",
        "3000",
    ];
    let mut run = Background::start(tmp.path(), &args);
    let (dir, record) = run.run_json();
    let pids: Vec<u32> = serde_json::from_value(record["worker_pids"].clone()).unwrap();
    let workers = pids.len() as u64;

    let holder = run.watch_history(&dir, "an acquire ok", |events| {
        events
            .iter()
            .find(|e| e["f"] == "acquire" && e["type"] == "ok")
            .and_then(client)
    });
    let holder_worker = (holder % workers) as usize;
    nemesis::process::kill_now(pids[holder_worker]).unwrap();
    // A worker whose last event is an acquire invoke is waiting for the lock.
    let waiter = run.watch_history(&dir, "a worker waiting for the lock", |events| {
        let mut last = vec![None; workers as usize];
        for e in events.iter().filter(|e| client(e).is_some()) {
            last[(client(e).unwrap() % workers) as usize] = Some(e);
        }
        (0..workers as usize).find(|&w| {
            w != holder_worker
                && last[w].is_some_and(|e| e["f"] == "acquire" && e["type"] == "invoke")
        })
    });
    nemesis::process::kill_now(pids[waiter]).unwrap();

    let (code, stdout) = run.finish();
    let history = read_history(&dir.join("history.jsonl"));
    let results = std::fs::read_to_string(dir.join("results.json")).unwrap();
    assert_eq!(
        code, 0,
        "a dead holder must not count as a second holder:\n{stdout}\n{results}"
    );
    for (worker, name) in [(holder_worker, "holder"), (waiter, "waiter")] {
        assert_crash_recorded(&history, worker, pids[worker], workers, name);
    }
    // The waiter died with its acquire in flight: completed as info.
    let crash = crash_of(&history, waiter).unwrap();
    let last_process = crash["value"]["process"].as_u64().unwrap();
    let completion = history
        .iter()
        .rev()
        .find(|e| client(e) == Some(last_process) && e["f"] == "acquire")
        .unwrap();
    assert_eq!(
        (completion["type"].as_str(), completion["error"].as_str()),
        (Some("info"), Some("crashed")),
        "the waiter's acquire in flight completes as info: {completion}"
    );
    let results: checker::Results = serde_json::from_str(&results).unwrap();
    assert_eq!(results.valid, Validity::True);
}

fn crash_of(history: &[Value], worker: usize) -> Option<&Value> {
    history
        .iter()
        .find(|e| e["f"] == "crash" && e["value"]["worker"] == worker)
}

/// A `crash` event by the harness names the dead worker, its pid and signal;
/// afterwards the worker's index acquires under a process id it never used.
fn assert_crash_recorded(history: &[Value], worker: usize, pid: u32, workers: u64, name: &str) {
    let crash = crash_of(history, worker)
        .unwrap_or_else(|| panic!("no crash event for the {name} (worker {worker})"));
    assert_eq!(crash["process"], "harness", "{crash}");
    assert_eq!(crash["type"], "info", "{crash}");
    assert_eq!(crash["value"]["pid"], pid, "{crash}");
    assert_eq!(crash["value"]["signal"], 9, "{crash}");
    let at = crash["index"].as_u64().unwrap();
    let of_worker = |e: &&Value| client(e).is_some_and(|p| p % workers == worker as u64);
    let (before, after): (Vec<&Value>, Vec<&Value>) = history
        .iter()
        .filter(of_worker)
        .partition(|e| e["index"].as_u64().unwrap() < at);
    let dead_ids = before.iter().filter_map(|e| client(e)).max().unwrap();
    assert_eq!(crash["value"]["process"], dead_ids, "{crash}");
    let replacement = after
        .iter()
        .filter(|e| e["f"] == "acquire" && e["type"] == "invoke")
        .filter_map(|e| client(e))
        .next();
    assert!(
        replacement.is_some_and(|p| p > dead_ids),
        "the {name}'s replacement acquires under a new id after the crash at {at}: {replacement:?}"
    );
    assert!(
        after
            .iter()
            .all(|e| client(e) != Some(dead_ids) || e["type"] == "info"),
        "after the crash only the harness completes the dead process's op"
    );
}

/// With the storage node gone every op fails at once; a worker that retried
/// at once would fill the disk. Workers back off, and the run still ends
/// with a verdict.
#[test]
fn workers_back_off_when_the_storage_node_is_gone() {
    let tmp = common::tmp();
    let args = ["--config", "single", "--time-limit", "12", "--seed", "1"];
    let mut run = Background::start(tmp.path(), &args);
    let (dir, record) = run.run_json();
    let storage = record["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "storage")
        .expect("run.json names the storage node");
    run.watch_history(&dir, "a write ok", |events| {
        events
            .iter()
            .any(|e| e["f"] == "write" && e["type"] == "ok")
            .then_some(())
    });
    nemesis::process::kill_now(storage["pid"].as_u64().unwrap() as u32).unwrap();

    let (code, stdout) = run.finish();
    assert!([1, 2].contains(&code), "a verdict, not {code}:\n{stdout}");
    let history = read_history(&dir.join("history.jsonl"));
    let failed = |e: &&Value| {
        client(e).is_some()
            && (e["f"] == "read" || e["f"] == "write")
            && e["type"] != "ok"
            && e["type"] != "invoke"
    };
    let first = history
        .iter()
        .find(failed)
        .expect("a storage op fails once the node is gone")["time"]
        .as_u64()
        .unwrap();
    let clients_after: Vec<u64> = history
        .iter()
        .filter(|e| client(e).is_some() && e["type"] != "invoke")
        .map(|e| e["time"].as_u64().unwrap())
        .filter(|&t| t >= first)
        .collect();
    let span = (clients_after.iter().max().unwrap() - first) as f64 / 1e9;
    let rate = clients_after.len() as f64 / span.max(1.0);
    assert!(
        rate < 100.0,
        "{} client ops in {span:.1} s after the storage died: {rate:.0} ops/s, a busy loop",
        clients_after.len()
    );
}

/// The only worker is SIGKILLed at its first grant; the pause nemesis must
/// then freeze its replacement, not the dead pid.
#[test]
fn the_nemesis_strikes_the_replacement_of_a_crashed_worker() {
    let tmp = common::tmp();
    let args = [
        "--config",
        "single",
        "--nemesis",
        "pause",
        "--workers",
        "1",
        "--time-limit",
        "12",
        "--nemesis-interval-ms",
        "3000",
        "--seed",
        "1",
    ];
    let mut run = Background::start(tmp.path(), &args);
    let (dir, record) = run.run_json();
    let dead: u32 = record["worker_pids"][0].as_u64().unwrap() as u32;
    run.watch_history(&dir, "an acquire ok", |events| {
        let ok = |e: &&Value| e["f"] == "acquire" && e["type"] == "ok";
        events.iter().find(ok).map(|_| ())
    });
    nemesis::process::kill_now(dead).unwrap();

    let (_, stdout) = run.finish();
    let history = read_history(&dir.join("history.jsonl"));
    let crash = crash_of(&history, 0).expect("the worker's crash is recorded");
    let after_crash = |e: &&Value| e["index"].as_u64() > crash["index"].as_u64();
    let pause = history
        .iter()
        .filter(after_crash)
        .find(|e| e["f"] == "start-pause")
        .unwrap_or_else(|| panic!("no pause after the crash:\n{stdout}"));
    assert_ne!(pause["value"]["pid"], dead, "paused the dead pid: {pause}");
    assert!(
        pause["value"]["process"].as_u64() > crash["value"]["process"].as_u64(),
        "the paused holder is the replacement: {pause} after {crash}"
    );
}
