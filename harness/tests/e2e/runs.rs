//! End-to-end runs against real Redis: the shipped configs under the pause
//! nemesis, and the negative controls that the checker must catch.
//! Fixed seeds, so a failure reproduces with the same schedule.

use crate::common;

use checker::Validity;
use common::{count, run};

/// Room for two or three pauses of 1.5 × TTL: the first, at about 1.5 s,
/// breaks the lock about a second later (seen at 2.3–2.4 s).
const PAUSE_RUN: &[&str] = &[
    "--nemesis",
    "pause",
    "--time-limit",
    "8",
    "--ttl-ms",
    "1000",
    "--work-ms",
    "200",
    "--nemesis-interval-ms",
    "2000",
    "--seed",
    "7",
];

fn with<'a>(base: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(more).copied().collect()
}

#[test]
fn single_under_pause_loses_mutual_exclusion() {
    let tmp = common::tmp();
    // Without the worker's own lease check the stale holder acts on the
    // data. Struck after its read, its write is invoked after the rival's
    // grant: an `unsafe-action` by the history alone.
    let (out, results, dir) = run(
        tmp.path(),
        &with(
            PAUSE_RUN,
            &["--config", "single", "--no-validity-check", "--at", "read"],
        ),
    );
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert_eq!(results.valid, Validity::False);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    assert!(count(&results, "unsafe-action") >= 1, "{}", out.stdout);
    assert!(results.stats.first_fault_time.is_some());
    common::assert_verified(&dir, "start-pause");
    assert!(out.stdout.contains("INVALID"), "{}", out.stdout);
    for file in [
        "run.json",
        "history.jsonl",
        "results.json",
        "harness.log",
        "nodes/n1/redis.log",
        "nodes/storage/redis.log",
    ] {
        assert!(dir.join(file).is_file(), "missing {file}");
    }
    // The pictures show what the checker found: a ✗ per unsafe action (up to
    // the examples kept) and the pause as a band.
    let timeline = std::fs::read_to_string(dir.join("timeline.svg")).unwrap();
    assert!(timeline.contains("✗"), "no unsafe action drawn");
    assert!(timeline.contains("pause"), "no fault band drawn");
    for png in ["latency.png", "rate.png"] {
        let bytes = std::fs::read(dir.join(png)).unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "{png} is not a PNG");
    }
}

#[test]
fn fenced_under_pause_keeps_the_data_safe() {
    let tmp = common::tmp();
    let (out, results, dir) = run(
        tmp.path(),
        &with(PAUSE_RUN, &["--config", "fenced", "--no-validity-check"]),
    );
    common::assert_valid(&results, &dir);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(count(&results, "stale-fence-accepted"), 0);
    assert_eq!(count(&results, "lost-update"), 0);
    // The paused holder came back and the storage refused it.
    let counter = results.counter().expect("a counter report");
    assert!(
        counter.stale_fence_rejected.writes >= 1,
        "no write was refused: {}",
        out.stdout
    );
    // Fencing does not prevent the overlap; it makes it harmless.
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
}

#[test]
fn unsafe_del_releases_another_holders_lock() {
    let tmp = common::tmp();
    let args = [
        "--config",
        "unsafe-del",
        "--nemesis",
        "none",
        "--time-limit",
        "5",
        "--ttl-ms",
        "500",
        "--work-ms",
        "700",
        "--seed",
        "3",
    ];
    let (out, results, _) = run(tmp.path(), &args);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "foreign-release") > 0, "{}", out.stdout);
}

#[test]
fn no_lock_loses_updates() {
    let tmp = common::tmp();
    let args = [
        "--config",
        "no-lock",
        "--nemesis",
        "none",
        "--time-limit",
        "4",
        "--seed",
        "5",
    ];
    let (out, results, _) = run(tmp.path(), &args);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lost-update") > 0, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
}

#[test]
fn single_without_faults_is_valid_and_rechecks_the_same() {
    let tmp = common::tmp();
    let args = [
        "--config",
        "single",
        "--nemesis",
        "none",
        "--time-limit",
        "6",
        "--seed",
        "11",
    ];
    let (out, results, dir) = run(tmp.path(), &args);
    common::assert_valid(&results, &dir);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(
        results.stats.acquired > 10,
        "only {} acquisitions",
        results.stats.acquired
    );
    for (name, anomaly) in &results.anomalies {
        assert_eq!(anomaly.count, 0, "{name}");
    }
    let counter = results.counter().expect("a counter report");
    assert_eq!(counter.final_value, Some(counter.acknowledged as i64));
    // A stored run re-checks to the same verdict.
    let again = common::lockstorm(&["check", "--json", dir.to_str().unwrap()]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    let rechecked: checker::Results = serde_json::from_str(&again.stdout).unwrap();
    assert_eq!(rechecked, results);
    // And `lockstorm report` lists it, with its redrawn pictures.
    let report = common::lockstorm(&["report", tmp.path().to_str().unwrap()]);
    assert_eq!(report.code, 0, "{}", report.stderr);
    assert!(
        report.stdout.starts_with("1 run(s) (1 redrawn)"),
        "{}",
        report.stdout
    );
    let page = std::fs::read_to_string(tmp.path().join("index.html")).unwrap();
    let leaf = dir.file_name().unwrap().to_str().unwrap();
    assert!(page.contains(leaf) && page.contains("VALID"), "{page}");
}
