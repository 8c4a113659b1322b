//! Where the data lives: the counter in a real PostgreSQL (Debian's
//! `postgresql`) that the run starts, fenced by conditional statements, and
//! the locks the database gives. Each test's folder lets the server's user
//! through (`common::open_tmp`), so the data folder sits in the run's folder, where
//! the leftover checks look.

use crate::common;

use checker::{Results, Validity};
use serde_json::Value;
use std::path::PathBuf;

/// `lockstorm run --config C --nemesis N` for 7 s (one fault), seeded, plus `extra`:
/// its folder (kept while the returned `TempDir` lives) and results.json.
fn pg_run(
    config: &str,
    nemesis: &str,
    extra: &[&str],
) -> (tempfile::TempDir, Results, PathBuf, Value) {
    let tmp = common::open_tmp();
    let (_, mut results, mut dir) =
        common::run_short(tmp.path(), config, nemesis, "7", "29", extra);
    // On a loaded machine a 7 s run may end before any holder reaches the
    // strike point: it says it tested nothing (unknown). Such a run is no
    // evidence either way, so it gets one longer run.
    let tested_nothing = |r: &Results| r.notes.iter().any(|n| n.contains("no fault injected"));
    if nemesis != "none" && tested_nothing(&results) {
        (_, results, dir) = common::run_short(tmp.path(), config, nemesis, "14", "29", extra);
    }
    let data = dir.join("nodes/storage/data");
    assert!(
        !data.exists(),
        "the data folder outlived the run: {}",
        data.display()
    );
    let left = common::postgres_segments_left(&dir);
    assert!(left.is_empty(), "shared memory left behind: {left:?}");
    let text = std::fs::read_to_string(dir.join("results.json")).unwrap();
    (tmp, results, dir, serde_json::from_str(&text).unwrap())
}

fn rejected(json: &Value, what: &str) -> u64 {
    json["checkers"]["counter"]["stale_fence_rejected"][what]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn fenced_writes_and_reads_in_postgres_refuse_the_stale_holder() {
    // Paused after its check, the holder's write carries an old fence.
    let (_tmp, results, dir, json) = pg_run("fenced", "pause", &["--storage", "postgres"]);
    common::assert_valid(&results, &dir);
    common::assert_verified(&dir, "start-pause");
    assert!(
        rejected(&json, "writes") >= 1,
        "no stale write refused: {json}"
    );
    // Paused right after its grant, its read comes after the next holder's.
    let at_grant = ["--storage", "postgres", "--at", "acquired"];
    let (_tmp, results, dir, json) = pg_run("fenced", "pause", &at_grant);
    common::assert_valid(&results, &dir);
    assert!(
        rejected(&json, "reads") >= 1,
        "no stale read refused: {json}"
    );
}

#[test]
fn a_row_lock_keeps_the_data_safe_under_pauses_crashes_and_a_paused_server() {
    // Runs one after another: started early, it does not end the suite.
    common::long_test();
    // Each fault, and the event that carries its evidence.
    for (nemesis, extra, evidence) in [
        ("pause", &[][..], "start-pause"),
        ("crash", &[][..], "stop-crash"),
        (
            "pause-node",
            &["--targets", "storage"][..],
            "start-pause-node",
        ),
    ] {
        let (_tmp, results, dir, json) = pg_run("pg-row-lock", nemesis, extra);
        common::assert_valid(&results, &dir);
        common::assert_verified(&dir, evidence);
        if nemesis == "pause-node" {
            // Every backend frozen with the postmaster: each sits in a
            // session of its own, and a SIGSTOP of the postmaster alone
            // left them serving.
            for e in common::events(&dir, evidence) {
                let children = e["value"]["verified"]["children"]
                    .as_array()
                    .map_or(0, Vec::len);
                assert!(children > 0, "no backend frozen with the server: {e}");
            }
        }
        assert!(
            json["checkers"]["counter"]["acknowledged"].as_u64() > Some(0),
            "{nemesis}: nothing was written: {json}"
        );
    }
}

#[test]
fn an_advisory_lock_breaks_when_its_session_ends_and_a_fence_keeps_the_data() {
    // Runs one after another: started early, it does not end the suite.
    common::long_test();
    let (_tmp, results, dir, _) = pg_run("pg-advisory", "terminate-session", &[]);
    assert_eq!(results.valid, Validity::False, "{}", dir.display());
    common::assert_verified(&dir, "start-terminate-session");
    assert!(common::count(&results, "lock-overlap") >= 1);
    common::assert_all_caused(&results, "lock-overlap");
    let (_tmp, results, dir, json) = pg_run("pg-advisory-fenced", "terminate-session", &[]);
    common::assert_valid(&results, &dir);
    assert!(
        rejected(&json, "writes") >= 1,
        "no stale write refused: {json}"
    );
    // No fault at all: the server ends every session idle longer than the
    // work, the holder's lock session among them.
    let idle = [
        "--postgres-setting",
        "idle_session_timeout=300",
        "--work-ms",
        "600",
    ];
    let (_tmp, results, dir, _) = pg_run("pg-advisory", "none", &idle);
    assert_eq!(results.valid, Validity::False, "{}", dir.display());
    assert!(
        common::count(&results, "lock-overlap") >= 1,
        "{}",
        dir.display()
    );
}

#[test]
fn no_server_or_data_folder_outlives_an_interrupted_or_killed_harness() {
    // A holder held by `terminate-session` for a minute: the harness is
    // signalled mid-fault.
    let run = common::held_for_a_minute("pg-advisory", "terminate-session");
    let group = "pg-advisory-terminate-session";
    common::nothing_outlives_a_signalled_harness(&run, group, "start-terminate-session", |dir| {
        vec![dir.join("nodes/storage/data/PG_VERSION")]
    });
}

#[test]
fn a_setting_postgresql_refuses_is_one_line_naming_it() {
    let tmp = common::open_tmp();
    let results = tmp.path().to_str().unwrap();
    let args = [
        "run",
        "--config",
        "pg-advisory",
        "--time-limit",
        "8",
        "--results",
        results,
    ];
    let out =
        common::lockstorm(&[&args[..], &["--postgres-setting", "no_such_setting=1"]].concat());
    let line = common::one_line_254(&out);
    assert!(
        line.contains("--postgres-setting no_such_setting"),
        "{line}"
    );
    assert!(
        line.contains("unrecognized configuration parameter"),
        "{line}"
    );
    common::assert_no_process_left(tmp.path());
}

#[test]
fn a_missing_postgresql_is_one_line_saying_how_to_install_it() {
    common::missing_server_line(
        "pg-row-lock",
        ("LOCKSTORM_POSTGRES_BIN", "/nonexistent/postgresql/bin"),
        "postgresql",
    );
}

/// A `postgres` that hangs when asked its version is killed at the probe's
/// deadline, with what it started, and the run is refused in one line.
#[test]
fn a_postgres_that_hangs_is_stopped_at_its_deadline_and_named() {
    let tmp = common::tmp();
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let pids = tmp.path().join("pids");
    let script = format!(
        "#!/bin/sh\nsleep 300 &\necho $! >> {0}\necho $$ >> {0}\nwait\n",
        pids.display()
    );
    std::fs::write(bin.join("postgres"), script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("postgres"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = common::lockstorm_with(
        &[
            "run",
            "--config",
            "pg-row-lock",
            "--time-limit",
            "2",
            "--results",
            tmp.path().join("results").to_str().unwrap(),
        ],
        &[("LOCKSTORM_POSTGRES_BIN", bin.to_str().unwrap())],
    );
    let line = common::one_line_254(&out);
    assert!(
        line.contains("ran past") && line.contains("LOCKSTORM_POSTGRES_BIN"),
        "{line}"
    );
    // Its deadline, not the 300 s it would sleep (the test's own time
    // includes waiting for a run slot, so the line is the measure).
    assert!(line.contains("ran past 10 s"), "{line}");
    let started: Vec<u32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(|p| p.parse().unwrap())
        .collect();
    assert!(!started.is_empty());
    assert!(
        nemesis::process::wait_gone(&started, std::time::Duration::from_secs(5)),
        "left running: {started:?}"
    );
}

/// A results folder PostgreSQL's user may not enter (0700, as `mktemp -d`
/// makes it, when the suite runs as root): the server keeps its data where
/// it can reach, works there, and leaves nothing behind.
#[test]
fn a_private_results_folder_still_runs_postgresql_and_leaves_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = common::tmp();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let (out, results, dir) = common::run_short(tmp.path(), "pg-advisory", "none", "4", "30", &[]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(results.stats.acquired > 0, "nothing was tested");
    let left = common::postgres_segments_left(&dir);
    assert!(left.is_empty(), "shared memory left behind: {left:?}");
    // Its data folder lived beside the template, and went with the run.
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let pid = record["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|n| n["pid"].as_u64())
        .expect("a node's pid");
    assert!(
        nemesis::process::wait_gone(&[pid as u32], std::time::Duration::from_secs(5)),
        "the server {pid} outlived the run"
    );
}
