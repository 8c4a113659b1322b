//! Verdicts that must not claim more than was tested: runs with no fault, no
//! lock granted or an interruption are `unknown`; `check` agrees with `run`
//! and with itself across formats.

use crate::common;

use common::lockstorm;
use std::path::Path;

/// One history op: (time in ms, process, type, f, value, token).
type Op = (u64, &'static str, &'static str, &'static str, &'static str);

/// Two workers taking turns on the lock and the counter, then the final read.
fn clean_ops() -> Vec<Op> {
    vec![
        (1_000, "0", "invoke", "acquire", "nil"),
        (1_010, "0", "ok", "acquire", "nil"),
        (1_020, "0", "invoke", "read", "nil"),
        (1_030, "0", "ok", "read", "0"),
        (1_040, "0", "invoke", "write", "1"),
        (1_050, "0", "ok", "write", "1"),
        (1_060, "0", "invoke", "release", "nil"),
        (1_070, "0", "ok", "release", "nil"),
        (300_000, "1", "invoke", "acquire", "nil"),
        (300_010, "1", "ok", "acquire", "nil"),
        (300_020, "1", "invoke", "read", "nil"),
        (300_030, "1", "ok", "read", "1"),
        (300_040, "1", "invoke", "write", "2"),
        (300_050, "1", "ok", "write", "2"),
        (300_060, "1", "invoke", "release", "nil"),
        (300_070, "1", "ok", "release", "nil"),
        (600_000, "harness", "invoke", "read", "nil"),
        (600_010, "harness", "ok", "read", "2"),
    ]
}

fn token(process: &str) -> &'static str {
    match process {
        "0" => "a",
        _ => "b",
    }
}

/// `extra` (a fault's events) among [`clean_ops`], in time order.
fn with_clean_ops(extra: &[Op]) -> Vec<Op> {
    let mut ops: Vec<Op> = extra.iter().copied().chain(clean_ops()).collect();
    ops.sort_by_key(|o| o.0);
    ops
}

fn jsonl(ops: &[Op]) -> String {
    ops.iter()
        .enumerate()
        .map(|(i, &(ms, p, t, f, v))| {
            let process: serde_json::Value = p
                .parse::<u64>()
                .map_or_else(|_| p.into(), serde_json::Value::from);
            let mut e = serde_json::json!({
                "index": i, "time": ms * 1_000_000, "process": process, "type": t, "f": f,
                "value": serde_json::from_str::<serde_json::Value>(&v.replace("nil", "null")).unwrap(),
            });
            if matches!(f, "acquire" | "release") {
                e["token"] = token(p).into();
            }
            e.to_string() + "\n"
        })
        .collect()
}

fn edn(ops: &[Op]) -> String {
    ops.iter()
        .enumerate()
        .map(|(i, &(ms, p, t, f, v))| {
            let process = match p.parse::<u64>() {
                Ok(n) => n.to_string(),
                Err(_) => format!(":{p}"),
            };
            let token = match f {
                "acquire" | "release" => format!(", :token \"{}\"", token(p)),
                _ => String::new(),
            };
            format!(
                "{{:type :{t}, :f :{f}, :process {process}, :time {}, :index {i}, :value {v}{token}}}\n",
                ms * 1_000_000
            )
        })
        .collect()
}

fn check(args: &[&str]) -> common::Run {
    let mut all = vec!["check"];
    all.extend_from_slice(args);
    lockstorm(&all)
}

/// A stored run folder: `run.json` as given, and the clean history.
fn run_folder(dir: &Path, run_json: serde_json::Value, ops: &[Op]) {
    std::fs::write(dir.join("run.json"), run_json.to_string()).unwrap();
    std::fs::write(dir.join("history.jsonl"), jsonl(ops)).unwrap();
}

#[test]
fn a_clean_history_is_valid_in_both_formats() {
    let tmp = common::tmp();
    let (j, e) = (tmp.path().join("h.jsonl"), tmp.path().join("h.edn"));
    std::fs::write(&j, jsonl(&clean_ops())).unwrap();
    std::fs::write(&e, edn(&clean_ops())).unwrap();
    let a = check(&[j.to_str().unwrap()]);
    let b = check(&["--format", "edn", e.to_str().unwrap()]);
    assert_eq!((a.code, b.code), (0, 0), "{}\n{}", a.stdout, b.stdout);
}

#[test]
fn an_event_beyond_the_reorder_window_gets_the_same_verdict_in_both_formats() {
    let tmp = common::tmp();
    // The first holder's release reaches the file after everything else,
    // five minutes late: streamed (either format), it cannot be put back in
    // order.
    let mut ops = clean_ops();
    let late: Vec<Op> = ops.drain(6..8).collect();
    ops.extend(late);
    let (j, e) = (tmp.path().join("h.jsonl"), tmp.path().join("h.edn"));
    std::fs::write(&j, jsonl(&ops)).unwrap();
    std::fs::write(&e, edn(&ops)).unwrap();
    let streamed = check(&[j.to_str().unwrap()]);
    let whole = check(&["--format", "edn", e.to_str().unwrap()]);
    assert_eq!(
        (streamed.code, whole.code),
        (0, 0),
        "JSONL and EDN of one clean history disagree:\n{}\n{}",
        streamed.stdout,
        whole.stdout
    );
    // Both formats stream, and fall back alike.
    for out in [&streamed, &whole] {
        assert!(out.stdout.contains("sorted in memory"), "{}", out.stdout);
    }
}

#[test]
fn a_history_the_streamed_search_cannot_settle_in_pieces_is_checked_whole() {
    // Long enough to be searched in pieces; then a worker whose release
    // reply was lost, taken for gone, acts again.
    let long = checker::generate::valid_history(7, 5, 12_000, 20);
    let back = checker::generate::with_lost_worker_back(&long).expect("a lost reply");
    let tmp = common::tmp();
    let path = tmp.path().join("h.jsonl");
    let lines: Vec<String> = back
        .events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect();
    std::fs::write(&path, lines.join("\n")).unwrap();
    let out = check(&["--promise", "mutual-exclusion", path.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(
        out.stdout.contains("checked whole, in memory"),
        "{}",
        out.stdout
    );
}

#[test]
fn check_of_an_interrupted_run_stays_unknown() {
    let tmp = common::tmp();
    let record = serde_json::json!({
        "promise": "mutual-exclusion",
        "interrupted": true,
        "interrupted_at_ms": 4200,
    });
    run_folder(tmp.path(), record, &clean_ops());
    let out = check(&[tmp.path().to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("interrupted after 4.2 s"),
        "{}",
        out.stdout
    );
}

#[test]
fn check_of_a_run_whose_scheduled_fault_never_started_is_unknown() {
    let tmp = common::tmp();
    let record = serde_json::json!({
        "promise": "mutual-exclusion",
        "options": {"config": "single", "nemesis": "pause"},
        "schedule": [{"at_ms": 2000, "action": "pause", "duration_ms": 3000}],
    });
    run_folder(tmp.path(), record, &clean_ops());
    let out = check(&[tmp.path().to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("no fault injected"), "{}", out.stdout);
    // Stored before faults had to fit: an empty schedule, a nemesis asked for.
    let record = serde_json::json!({
        "promise": "mutual-exclusion",
        "options": {"config": "replicated", "nemesis": "failover"},
        "schedule": [],
    });
    run_folder(tmp.path(), record, &clean_ops());
    let out = check(&[tmp.path().to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("no fault injected"), "{}", out.stdout);
}

#[test]
fn check_of_a_run_that_never_granted_a_lock_is_unknown() {
    let tmp = common::tmp();
    let ops: Vec<Op> = vec![
        (1_000, "0", "invoke", "acquire", "nil"),
        (3_000, "0", "fail", "acquire", "nil"),
        (4_000, "harness", "invoke", "read", "nil"),
        (4_010, "harness", "ok", "read", "0"),
    ];
    run_folder(
        tmp.path(),
        serde_json::json!({"promise": "mutual-exclusion"}),
        &ops,
    );
    let out = check(&[tmp.path().to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("no lock was ever granted"),
        "{}",
        out.stdout
    );
}

/// A lock never granted is a setup that could not run the lock (a key in
/// the way, a login without the rights): the `deadlock` it shows decides
/// nothing about the lock.
#[test]
fn a_deadlock_in_a_run_that_never_granted_the_lock_is_unknown_not_invalid() {
    let tmp = common::tmp();
    let mut ops: Vec<Op> = Vec::new();
    for i in 0..10u64 {
        ops.push((1_000 + i * 1_000, "0", "invoke", "acquire", "nil"));
        ops.push((1_500 + i * 1_000, "0", "fail", "acquire", "nil"));
    }
    ops.push((12_000, "harness", "invoke", "read", "nil"));
    ops.push((12_010, "harness", "ok", "read", "0"));
    run_folder(
        tmp.path(),
        serde_json::json!({"promise": "mutual-exclusion"}),
        &ops,
    );
    let folder = tmp.path().to_str().unwrap();
    let out = check(&["--deadlock-ms", "3000", folder]);
    assert!(out.stdout.contains("deadlock 1"), "{}", out.stdout);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("no lock was ever granted"),
        "{}",
        out.stdout
    );
}

/// Faults that met no holder, no grant and no write could not have broken
/// the lock: a run whose faults all met nothing is unknown; one that met a
/// holder is judged.
#[test]
fn a_run_whose_faults_met_no_holder_grant_or_write_is_unknown() {
    let tmp = common::tmp();
    let record = serde_json::json!({
        "promise": "mutual-exclusion",
        "options": {"config": "single", "nemesis": "partition"},
    });
    let between_holds = with_clean_ops(&[
        (100_000, "nemesis", "info", "start-partition", "nil"),
        (200_000, "nemesis", "info", "stop-partition", "nil"),
    ]);
    run_folder(tmp.path(), record.clone(), &between_holds);
    let out = check(&[tmp.path().to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("no fault met the lock"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("1 of 1 met none"), "{}", out.stdout);
    // The same partition while worker 0 holds the lock met it.
    let ops = with_clean_ops(&[
        (1_015, "nemesis", "info", "start-partition", "nil"),
        (1_045, "nemesis", "info", "stop-partition", "nil"),
    ]);
    run_folder(tmp.path(), record, &ops);
    let out = check(&[tmp.path().to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("met 1 hold(s), 0 op(s) in flight, 0 grant(s), 1 write(s)"),
        "{}",
        out.stdout
    );
}

/// A `failover` the run's end cut short after its cut and before its kill
/// met a holder, but failed nothing over: its stop event says so, and a
/// run with no other fault tested no failover.
#[test]
fn a_run_whose_only_fault_was_cut_short_by_its_end_is_unknown() {
    let tmp = common::tmp();
    let record = serde_json::json!({
        "promise": "mutual-exclusion",
        "options": {"config": "replicated", "nemesis": "failover"},
    });
    let stop = r#"{"target": "n1", "interrupted": "the run ended before the kill"}"#;
    let ops = with_clean_ops(&[
        (1_005, "nemesis", "info", "start-failover", "nil"),
        (1_065, "nemesis", "info", "stop-failover", stop),
    ]);
    run_folder(tmp.path(), record, &ops);
    let out = check(&[tmp.path().to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    for said in [
        "1 fault(s) were cut short by the run's end before they acted",
        "1 of 1 cut short by the run's end",
    ] {
        assert!(out.stdout.contains(said), "{said}: {}", out.stdout);
    }
}

/// A history of the shape of Jepsen's etcd lock test (Knossos's
/// `data/mutex/bad/etcd.edn`), written here from its description: five
/// processes take turns, each round the other four try to release a lock
/// they do not hold (`:fail … :not-held`), and at the end a holder's
/// release fails for another reason and a second process is granted. A
/// Jepsen `:fail` did not happen, so the holder still held: INVALID, the
/// two grants the witness. Reading the refused releases as `info` (lockstorm
/// from 2c85b13 until now) let one float past the last grant and called
/// it valid; on Knossos's own file it gave up at 5 M states.
#[test]
fn a_jepsen_etcd_lock_history_is_invalid_with_failed_releases_that_did_not_happen() {
    let mut lines: Vec<(u64, String)> = Vec::new();
    let mut ev = |ms: u64, ty: &str, f: &str, p: u64, error: Option<&str>| {
        let error = error.map(|e| format!(", :error {e}")).unwrap_or_default();
        let at = ms * 1_000_000;
        lines.push((
            ms,
            format!("{{:type :{ty}, :f :{f}, :process {p}, :time {at}{error}"),
        ));
    };
    let mut t = 0;
    for round in 0..40 {
        let holder = round % 5;
        ev(t, "invoke", "acquire", holder, None);
        ev(t + 5, "ok", "acquire", holder, None);
        for (k, p) in (0..5).filter(|&p| p != holder).enumerate() {
            let k = k as u64;
            ev(t + 1 + k, "invoke", "release", p, None);
            ev(t + 9 + k, "fail", "release", p, Some(":not-held"));
        }
        ev(t + 12, "invoke", "release", holder, None);
        ev(t + 14, "ok", "release", holder, None);
        t += 20;
    }
    ev(t, "invoke", "acquire", 0, None);
    ev(t + 5, "ok", "acquire", 0, None); // index 481
    ev(t + 10, "invoke", "release", 0, None);
    let lease = "[:not-found \"etcdserver: requested lease not found\"]";
    ev(t + 12, "fail", "release", 0, Some(lease));
    ev(t + 15, "invoke", "acquire", 1, None);
    ev(t + 20, "ok", "acquire", 1, None); // index 485
    lines.sort_by_key(|(ms, _)| *ms);
    let edn: Vec<String> = lines
        .iter()
        .enumerate()
        .map(|(i, (_, l))| format!("{l}, :index {i}}}"))
        .collect();
    let tmp = common::tmp();
    let file = tmp.path().join("etcd-shaped.edn");
    std::fs::write(&file, format!("[{}]\n", edn.join("\n"))).unwrap();
    let file = file.to_str().unwrap();
    let out = check(&[
        "--format",
        "edn",
        "--promise",
        "mutual-exclusion",
        "--json",
        file,
    ]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let results: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let nonlinear = &results["anomalies"]["nonlinearizable"];
    assert_eq!(nonlinear["count"], 1, "{results}");
    assert_eq!(
        nonlinear["examples"],
        serde_json::json!([[481, 485]]),
        "{results}"
    );
    // Decided, not given up on: a search that stays small.
    let states = results["checkers"]["nonlinearizable"]["states"]
        .as_u64()
        .unwrap();
    assert!(states < 10_000, "{states} states");
}

#[test]
fn a_corrupt_run_json_does_not_block_check_with_a_promise() {
    let tmp = common::tmp();
    std::fs::write(tmp.path().join("run.json"), "{\"promise\": ").unwrap();
    std::fs::write(tmp.path().join("history.jsonl"), jsonl(&clean_ops())).unwrap();
    let dir = tmp.path().to_str().unwrap();
    let out = check(&["--promise", "mutual-exclusion", dir]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("could not be read"), "{}", out.stdout);
    let out = check(&[dir]);
    assert_eq!(out.code, 254, "{}", out.stderr);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("give --promise"), "{}", out.stderr);
}

#[test]
fn a_lock_only_history_is_valid_its_counter_checker_not_applicable() {
    let tmp = common::tmp();
    let ops: Vec<Op> = clean_ops()
        .into_iter()
        .filter(|op| matches!(op.3, "acquire" | "release"))
        .collect();
    let (j, e) = (tmp.path().join("h.jsonl"), tmp.path().join("h.edn"));
    std::fs::write(&j, jsonl(&ops)).unwrap();
    std::fs::write(&e, edn(&ops)).unwrap();
    for out in [
        check(&[j.to_str().unwrap()]),
        check(&["--format", "edn", e.to_str().unwrap()]),
    ] {
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    }
    let out = check(&["--json", j.to_str().unwrap()]);
    let results: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        results["checkers"]["counter"]["not_applicable"],
        "the history has no counter reads or writes",
        "{results:#}"
    );
}

/// Bad input: one line naming `needle`, exit 254, no folder made.
fn refused(args: &[&str], needle: &str) {
    let tmp = common::tmp();
    let mut all = vec!["run", "--results", tmp.path().to_str().unwrap()];
    all.extend_from_slice(args);
    let out = lockstorm(&all);
    assert_eq!(out.code, 254, "{args:?}: {}{}", out.stdout, out.stderr);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
    let made = std::fs::read_dir(tmp.path()).unwrap().count();
    assert_eq!(made, 0, "{args:?} left a folder behind");
}

#[test]
fn a_time_limit_that_fits_no_fault_is_refused_naming_the_time_it_needs() {
    refused(
        &[
            "--config",
            "replicated",
            "--nemesis",
            "failover",
            "--time-limit",
            "20",
        ],
        "no fault fits in --time-limit 20 s",
    );
    refused(
        &["--nemesis", "pause", "--time-limit", "5", "--seed", "1"],
        "use --time-limit 7 or more",
    );
}

#[test]
fn every_numeric_option_out_of_its_range_is_refused_naming_it() {
    let max = "18446744073709551615";
    for (option, value) in [
        ("--time-limit", max),
        ("--ttl-ms", max),
        ("--work-ms", max),
        ("--pause-ms", max),
        ("--node-pause-ms", max),
        ("--restart-ms", max),
        ("--fault-ms", max),
        ("--down-after-ms", max),
        ("--failover-timeout-ms", max),
        ("--nemesis-interval-ms", "0"),
        ("--acquire-timeout-ms", max),
        ("--op-timeout-ms", "0"),
        ("--workers", "0"),
        ("--clock-jump-ms", "9223372036854775807"),
        ("--holder-skew-ms", "-9223372036854775808"),
    ] {
        refused(
            &["--nemesis", "pause", option, value],
            &format!("{option} {value} is out of range: use "),
        );
    }
}

#[test]
fn an_interrupted_run_records_when_and_rechecks_unknown() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let tmp = common::tmp();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_lockstorm"))
        .args([
            "run",
            "--config",
            "single",
            "--time-limit",
            "60",
            "--seed",
            "1",
        ])
        .args(["--results", tmp.path().to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The progress line shows the run is in its timed phase, listening for
    // Ctrl-C (earlier is the startup's business, not this test's).
    let mut child = child;
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("/60 s") {
        line.clear();
        let n = std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
        assert!(n > 0, "the run ended before its first progress line");
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let group = tmp.path().join("single-none/latest");
    let run = group.canonicalize().expect("a latest link");
    let history = std::fs::read_to_string(run.join("history.jsonl")).unwrap();
    assert!(
        history.contains(r#""type":"ok","f":"acquire""#),
        "no lock granted in 5 s"
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(record["interrupted"], true);
    let at = record["interrupted_at_ms"]
        .as_u64()
        .expect("interrupted_at_ms");
    assert!((5_000..60_000).contains(&at), "interrupted at {at} ms");
    let again = check(&[run.to_str().unwrap()]);
    assert_eq!(
        again.code, 2,
        "re-checking an interrupted run upgraded it:\n{}",
        again.stdout
    );
    assert!(
        again.stdout.contains("interrupted after"),
        "{}",
        again.stdout
    );
    common::assert_no_process_left(tmp.path());
}

fn matrix(results: &Path, args: &[&str]) -> common::Run {
    let mut all = vec!["matrix", "--results", results.to_str().unwrap()];
    all.extend_from_slice(args);
    lockstorm(&all)
}

#[test]
fn a_matrix_with_nothing_to_run_or_a_zero_time_limit_is_refused() {
    for args in [
        &["--configs", "single", "--nemeses", "failover"][..],
        &[
            "--configs",
            "single",
            "--nemeses",
            "none",
            "--time-limit",
            "0",
        ],
    ] {
        let tmp = common::tmp();
        let out = matrix(tmp.path(), args);
        assert_eq!(out.code, 254, "{args:?}: {}{}", out.stdout, out.stderr);
        assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
        let made = std::fs::read_dir(tmp.path()).unwrap().count();
        assert_eq!(made, 0, "{args:?} left a folder behind");
    }
}

#[test]
fn a_matrix_pair_whose_time_limit_fits_no_fault_is_skipped_with_the_reason() {
    let tmp = common::tmp();
    let args = ["--configs", "single", "--nemeses", "none,pause"];
    let out = matrix(tmp.path(), &[&args[..], &["--time-limit", "3"]].concat());
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let plan = out.stdout.lines().next().unwrap_or_default();
    assert!(plan.starts_with("matrix: 1 pair(s)"), "{}", out.stdout);
    assert!(plan.contains("about 1 min"), "{}", out.stdout);
    let summary = common::matrix_summary(tmp.path());
    let rows: Vec<&str> = summary["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["nemesis"].as_str().unwrap())
        .collect();
    assert_eq!(rows, ["none"], "{summary:#}");
    let skipped = &summary["skipped"][0];
    assert_eq!(skipped["nemesis"], "pause", "{summary:#}");
    let reason = skipped["reason"].as_str().unwrap();
    assert!(
        reason.contains("no fault fits in --time-limit 3 s"),
        "{reason}"
    );
}

/// `matrix` on `single × none, pause`, 20 s runs, `jobs` cells at once, in
/// its own process group (a terminal's Ctrl-C reaches every process of the
/// foreground job): Ctrl-C once every running cell's history exists; its
/// exit code and what it printed after the plan.
fn interrupt_a_matrix(jobs: &str, running: &[&str]) -> (Option<i32>, String, String) {
    use nix::sys::signal::{killpg, Signal};
    use nix::unistd::Pid;
    use std::os::unix::process::CommandExt;
    let tmp = common::tmp();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lockstorm"))
        .args(["matrix", "--configs", "single", "--nemeses", "none,pause"])
        .args(["--time-limit", "20", "--jobs", jobs])
        .args(["--results", tmp.path().to_str().unwrap()])
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut plan = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut plan).unwrap();
    assert!(plan.starts_with("matrix: 2 pair(s)"), "{plan}");
    assert!(plan.contains(&format!("{jobs} at once")), "{plan}");
    // Each running cell's history exists: they are under way.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let started = |group: &str| {
        let dir = tmp.path().join(group);
        dir.is_dir()
            && std::fs::read_dir(dir)
                .unwrap()
                .flatten()
                .any(|e| e.path().join("history.jsonl").is_file())
    };
    while !running.iter().all(|g| started(g)) {
        assert!(std::time::Instant::now() < deadline, "no run started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    killpg(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    common::assert_no_process_left(tmp.path());
    (out.status.code(), rest, stderr)
}

#[test]
fn an_interrupted_matrix_exits_2_and_its_summary_says_so() {
    let (code, rest, stderr) = interrupt_a_matrix("1", &["single-none"]);
    assert_eq!(code, Some(2), "{rest}\n{stderr}");
    assert!(rest.contains("**Interrupted**"), "{rest}");
    assert!(
        !rest.contains("single | pause"),
        "ran on after Ctrl-C: {rest}"
    );
}

#[test]
fn an_interrupted_matrix_stops_every_running_cell_in_order() {
    // Both cells run at once; the one SIGINT the matrix passes on to each
    // stops it as a Ctrl-C stops a run: healed, checked, unknown.
    let (code, rest, stderr) = interrupt_a_matrix("2", &["single-none", "single-pause"]);
    assert_eq!(code, Some(2), "{rest}\n{stderr}");
    assert!(rest.contains("**Interrupted**"), "{rest}");
    for pair in [
        "| single | none | 1 | UNKNOWN",
        "| single | pause | 1 | UNKNOWN",
    ] {
        assert!(rest.contains(pair), "no {pair}: {rest}");
    }
    assert_eq!(stderr.matches("SIGINT: interrupted").count(), 2, "{stderr}");
    assert!(
        !stderr.contains("again"),
        "a cell got two signals: {stderr}"
    );
}

#[test]
fn a_history_line_longer_than_1_mib_or_malformed_with_its_newline_is_bad_input() {
    let tmp = common::tmp();
    let long = tmp.path().join("long");
    std::fs::write(&long, vec![b'0'; 3 << 20]).unwrap();
    let first = jsonl(&clean_ops()[..1]);
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(&bad, first + "not json\n").unwrap();
    for (args, needle) in [
        (vec![long.to_str().unwrap()], "longer than 1 MiB"),
        (
            vec!["--format", "edn", long.to_str().unwrap()],
            "longer than 1 MiB",
        ),
        (vec![bad.to_str().unwrap()], "history line 2:"),
    ] {
        let out = check(&args);
        assert_eq!(out.code, 254, "{args:?}: {}{}", out.stdout, out.stderr);
        assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
        assert!(out.stderr.contains(needle), "{}", out.stderr);
    }
}

#[test]
fn report_exits_non_zero_and_says_why_when_a_run_folder_cannot_be_read() {
    let tmp = common::tmp();
    let good = tmp.path().join("single-none/20261129T114541");
    std::fs::create_dir_all(&good).unwrap();
    run_folder(
        &good,
        serde_json::json!({"promise": "mutual-exclusion"}),
        &clean_ops(),
    );
    let broken = tmp.path().join("single-pause/20261129T114600");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("history.jsonl"), jsonl(&clean_ops())).unwrap();
    let out = lockstorm(&["report", tmp.path().to_str().unwrap()]);
    assert_eq!(out.code, 254, "{}{}", out.stdout, out.stderr);
    let page = std::fs::read_to_string(tmp.path().join("index.html")).unwrap();
    assert!(
        page.contains("run.json is missing: the run stopped before writing it"),
        "{page}"
    );
}

/// Process 0 "crashes" at 2 s, then writes (ok) and releases at 3.5 s while
/// process 1 holds. Honoured, the crash would end 0's hold and hide the
/// overlap; so a process acting after its own crash, or a crash line a
/// client wrote, leaves the verdict unknown with the event named.
#[test]
fn a_history_whose_crash_cannot_be_believed_is_unknown_naming_the_event() {
    let lines = [
        r#"{"index":0,"time":1000000000,"process":0,"type":"invoke","f":"acquire","value":null}"#,
        r#"{"index":1,"time":1000000100,"process":0,"type":"ok","f":"acquire","value":null,"token":"a"}"#,
        r#"{"index":2,"time":2000000000,"process":"harness","type":"info","f":"crash","value":{"process":0},"token":"a"}"#,
        r#"{"index":3,"time":2500000000,"process":1,"type":"invoke","f":"acquire","value":null}"#,
        r#"{"index":4,"time":2500000100,"process":1,"type":"ok","f":"acquire","value":null,"token":"b"}"#,
        r#"{"index":5,"time":3500000000,"process":0,"type":"invoke","f":"write","value":1}"#,
        r#"{"index":6,"time":3500000100,"process":0,"type":"ok","f":"write","value":1}"#,
        r#"{"index":7,"time":3500000200,"process":0,"type":"invoke","f":"release","value":null,"token":"a"}"#,
        r#"{"index":8,"time":3500000300,"process":0,"type":"fail","f":"release","value":null,"token":"a","error":"not-held"}"#,
        r#"{"index":9,"time":4000000000,"process":1,"type":"invoke","f":"release","value":null,"token":"b"}"#,
        r#"{"index":10,"time":4000000100,"process":1,"type":"ok","f":"release","value":null,"token":"b"}"#,
        r#"{"index":11,"time":4100000000,"process":"harness","type":"invoke","f":"read","value":null}"#,
        r#"{"index":12,"time":4100000100,"process":"harness","type":"ok","f":"read","value":1}"#,
    ];
    let tmp = common::tmp();
    let cases = [
        (
            "harness",
            "process 0 acted (write invoke) after its own crash (event 2)",
        ),
        ("client", "a crash recorded by client process 1"),
    ];
    for (who, note) in cases {
        let text: String = lines
            .iter()
            .map(|l| match who {
                "client" => l.replace(r#""process":"harness","type":"info","f":"crash""#, r#""process":1,"type":"info","f":"crash""#),
                _ => l.to_string(),
            } + "\n")
            .collect();
        let path = tmp.path().join(format!("{who}.jsonl"));
        std::fs::write(&path, text).unwrap();
        let out = check(&[path.to_str().unwrap()]);
        assert_eq!(out.code, 2, "{who}: {}", out.stdout);
        assert!(out.stdout.contains("UNKNOWN"), "{who}: {}", out.stdout);
        assert!(out.stdout.contains(note), "{who}: {}", out.stdout);
    }
}
