//! A busy host is an unplanned pause: a worker that is not scheduled for a
//! while records a `stall`, and what goes wrong after it is put down to the
//! stall, not to nothing. The test itself plays the busy host: it freezes a
//! worker with SIGSTOP while no nemesis runs.

use crate::common;

use checker::Results;
use common::wait_for;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn json(path: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// The worker in its critical section, if the latest event of the history
/// is a read `ok`: that worker holds the lock and works for `--work-ms` now.
/// A worker `i` runs as process `i`, or `i + k·workers` after an `info`.
fn holder(run: &Path, workers: u64) -> Option<u64> {
    let history = std::fs::read_to_string(run.join("history.jsonl")).ok()?;
    let last = history
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["process"].is_u64())?;
    let holds = last["type"] == "ok" && last["f"] == "read";
    holds.then(|| last["process"].as_u64().unwrap() % workers)
}

#[test]
fn a_worker_frozen_outside_any_fault_records_a_stall_and_takes_the_blame() {
    let _slot = common::e2e_slot();
    let tmp = common::tmp();
    // The freeze (1.5 s) outlasts the lease (1 s): a rival takes the lock
    // while the frozen worker still holds it.
    let child = Command::new(env!("CARGO_BIN_EXE_lockstorm"))
        .args(["run", "--config", "single", "--nemesis", "none"])
        .args(["--ttl-ms", "1000", "--work-ms", "600", "--time-limit", "8"])
        .args(["--seed", "5", "--results", tmp.path().to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (run, record): (PathBuf, Value) = wait_for("run.json", || {
        let group = tmp.path().join("single-none");
        let run = std::fs::read_dir(group).ok()?.flatten().map(|e| e.path());
        let run = run.filter(|p| p.is_dir()).last()?;
        let record = json(&run.join("run.json"))?;
        Some((run, record))
    });
    let workers = record["options"]["workers"].as_u64().expect("workers");
    let mut child = child;
    let worker = wait_for("a worker in its critical section", || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("lockstorm ended early ({status}); see {}", run.display());
        }
        holder(&run, workers)
    });
    let pid = record["worker_pids"][worker as usize]
        .as_i64()
        .expect("worker pids") as i32;
    let who = format!("worker-{worker}");
    let frozen = Instant::now();
    kill(Pid::from_raw(pid), Signal::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    kill(Pid::from_raw(pid), Signal::SIGCONT).unwrap();
    let froze_ms = frozen.elapsed().as_millis() as u64;
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        [0, 1].contains(&out.status.code().unwrap_or(-1)),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let stalls = common::events(&run, "stall");
    let own: Vec<&Value> = stalls
        .iter()
        .filter(|s| s["process"] == who.as_str() && s["value"]["who"] == who.as_str())
        .collect();
    let ms = own.iter().filter_map(|s| s["value"]["ms"].as_u64()).max();
    assert!(
        ms.is_some_and(|ms| ms + 200 >= froze_ms && ms <= froze_ms + 1000),
        "{who} was frozen {froze_ms} ms; the stalls: {stalls:?}"
    );

    let results: Results = serde_json::from_str(
        &std::fs::read_to_string(run.join("results.json")).expect("results.json"),
    )
    .unwrap();
    let longest = results.stats.longest_stall_ms;
    assert!(
        results.stats.stalls >= 1 && longest + 200 >= froze_ms,
        "stats: {:?}",
        results.stats
    );
    assert!(stdout.contains("unplanned stalls: "), "{stdout}");
    let overlap = &results.anomalies["lock-overlap"];
    assert!(overlap.count > 0, "no rival took the lock: {stdout}");
    for (name, a) in results.anomalies.iter().filter(|(_, a)| a.count > 0) {
        assert_eq!(
            a.causes.get("stall").copied(),
            Some(a.count),
            "{name} not put down to the stall: {:?}\n{stdout}",
            a.causes
        );
    }
    assert!(
        stdout.contains(&format!("lock-overlap {}! (stall ", overlap.count)),
        "{stdout}"
    );
    // A test that expected VALID here would say why.
    let failed = std::panic::catch_unwind(|| common::assert_valid(&results, &run));
    let message = *failed.expect_err("not VALID").downcast::<String>().unwrap();
    let overlap_line = format!("lock-overlap {} (stall {})", overlap.count, overlap.count);
    assert!(
        message.contains(&overlap_line) && message.contains(&format!("\"{who}\" stalled")),
        "{message}"
    );
    common::assert_no_process_left(tmp.path());
}
