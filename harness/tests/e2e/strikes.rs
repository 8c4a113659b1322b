//! Strike points: where `pause` lands decides what it shows. After the
//! holder's last lease check (the default) no check can save the write; after
//! the read, the check notices; with fencing the storage refuses the write;
//! mid-Redlock-round, the validity check refuses the aged grant.

use crate::common;

use checker::{Results, Validity};
use common::{assert_valid, assert_verified, count, events, run_short};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Runs `config` under `pause` (with `extra`) for 7 s, with seeds 1, 2, 3
/// until `caught` holds: a race may need more than one seed (or a longer
/// run). Returns the last run.
fn pause_until(
    config: &str,
    extra: &[&str],
    caught: impl Fn(&Results) -> bool,
) -> (Results, PathBuf, tempfile::TempDir) {
    let mut last = None;
    for seed in ["1", "2", "3"] {
        let tmp = common::tmp();
        let (_, results, dir) = run_short(tmp.path(), config, "pause", "7", seed, extra);
        let done = caught(&results);
        last = Some((results, dir, tmp));
        if done {
            break;
        }
    }
    last.expect("three seeds ran")
}

/// Every `start-pause` names the point it struck, and it is `point`.
fn assert_struck_at(dir: &Path, point: &str) {
    assert_verified(dir, "start-pause");
    for e in events(dir, "start-pause") {
        assert_eq!(e["value"]["at"], point, "{e}");
        assert!(e["value"]["process"].is_u64(), "{e}");
    }
}

fn errors(results: &Results, kind: &str) -> u64 {
    results.stats.errors.get(kind).copied().unwrap_or(0)
}

#[test]
fn a_pause_after_the_lease_check_loses_an_update_that_no_check_prevents() {
    let (results, dir, _tmp) = pause_until("single", &[], |r| count(r, "lost-update") > 0);
    assert_struck_at(&dir, "checked");
    assert_eq!(results.valid, Validity::False, "{}", dir.display());
    assert!(
        count(&results, "lost-update") > 0,
        "no lost update in three seeds: {:?} in {}",
        results.anomalies,
        dir.display()
    );
    // The write's invoke is stamped when it leaves, after the pause: it was
    // sent after the rival's grant.
    assert!(
        count(&results, "unsafe-action") > 0,
        "{:?} in {}",
        results.anomalies,
        dir.display()
    );
}

#[test]
fn a_pause_after_the_read_overlaps_but_the_lease_check_stops_the_write() {
    let (results, dir, _tmp) = pause_until("single", &["--at", "read"], |r| {
        count(r, "lock-overlap") > 0
    });
    assert_struck_at(&dir, "read");
    assert!(count(&results, "lock-overlap") > 0, "{}", dir.display());
    assert_eq!(count(&results, "lost-update"), 0, "{}", dir.display());
    assert!(
        errors(&results, "lease-expired") > 0,
        "the holder's check refused no write: {:?}",
        results.stats.errors
    );
}

#[test]
fn fenced_storage_refuses_the_write_of_a_holder_paused_after_its_check() {
    let (results, dir, _tmp) = pause_until("fenced", &[], |r| errors(r, "stale-fence") > 0);
    assert_struck_at(&dir, "checked");
    assert_valid(&results, &dir);
    assert!(
        errors(&results, "stale-fence") > 0,
        "no stale write reached the storage in three seeds: {:?}",
        results.stats.errors
    );
}

#[test]
fn redlock_refuses_a_grant_whose_round_a_pause_aged() {
    // Runs one after another: started early, it does not end the suite.
    common::long_test();
    // Under contention: frozen mid-round, the holder-to-be loses nothing
    // that matters. Valid.
    let tmp = common::tmp();
    let at = ["--at", "acquiring"];
    let (_, results, dir) = run_short(tmp.path(), "redlock", "pause", "8", "1", &at);
    assert_struck_at(&dir, "acquiring");
    assert_valid(&results, &dir);

    // Alone, the struck round still wins every node after the pause, and
    // only the elapsed-time check stands between it and a lease that has
    // already run out: it must refuse the round.
    let tmp = common::tmp();
    let alone = ["--at", "acquiring", "--workers", "1"];
    let (_, results, dir) = run_short(tmp.path(), "redlock", "pause", "8", "1", &alone);
    assert_struck_at(&dir, "acquiring");
    assert_valid(&results, &dir);
    let history: Vec<Value> = std::fs::read_to_string(dir.join("history.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for start in events(&dir, "start-pause") {
        let process = &start["value"]["process"];
        let after = |e: &&Value| e["time"].as_u64() > start["time"].as_u64();
        let completion = history
            .iter()
            .filter(after)
            .find(|e| &e["process"] == process && e["f"] == "acquire")
            .unwrap_or_else(|| panic!("process {process}'s acquire never completed"));
        assert_eq!(
            completion["type"], "fail",
            "an aged round was granted: {completion}"
        );
        let error = completion["error"].as_str().unwrap_or_default();
        assert!(error.starts_with("validity-expired"), "{completion}");
    }
}

#[test]
fn random_strikes_land_where_they_say() {
    let tmp = common::tmp();
    let (_, results, dir) = run_short(
        tmp.path(),
        "single",
        "pause",
        "13",
        "4",
        &["--at", "random"],
    );
    let points: std::collections::BTreeSet<String> = events(&dir, "start-pause")
        .iter()
        .map(|e| e["value"]["at"].as_str().unwrap().to_string())
        .collect();
    assert!(points.len() >= 2, "one point only: {points:?}");
    // The checker holds each strike to its point's bounding events.
    let misplaced: Vec<&String> = results
        .notes
        .iter()
        .filter(|n| n.contains("struck at"))
        .collect();
    assert!(misplaced.is_empty(), "{misplaced:?}");
    assert_ne!(results.valid, Validity::Unknown, "{:?}", results.notes);
}

#[test]
fn a_pause_between_get_and_del_deletes_the_next_holders_lock() {
    let (results, dir, _tmp) = pause_until("unsafe-get-del", &["--at", "releasing"], |r| {
        count(r, "foreign-release") > 0
    });
    assert_struck_at(&dir, "releasing");
    assert_eq!(results.valid, Validity::False, "{}", dir.display());
    assert!(
        count(&results, "foreign-release") > 0,
        "no foreign release in three seeds: {:?} in {}",
        results.anomalies,
        dir.display()
    );
}

/// A holder frozen inside its release past its TTL finds the key gone
/// (`not-held`): its lease ran out under it, as a lease is meant to, and
/// the next holder's grant came after it began releasing. Nothing it did
/// broke the lock, so no checker may say otherwise: the linearizability
/// search reads a `not-held` release as a hold that certainly ended at some
/// moment between its acquire and the refusal (it was `nonlinearizable`
/// alone when read as a release that did not happen).
fn a_pause_inside_the_release_lets_the_lease_run_out_as_designed(config: &str) {
    let tmp = common::tmp();
    let at = ["--at", "releasing"];
    let (out, results, dir) = run_short(tmp.path(), config, "pause", "7", "1", &at);
    assert_struck_at(&dir, "releasing");
    assert!(
        errors(&results, "not-held") > 0,
        "{config}: no release found its lease gone, so this run shows nothing: {}",
        out.stdout
    );
    assert_eq!(
        count(&results, "nonlinearizable"),
        0,
        "{config}: {}",
        out.stdout
    );
    assert_valid(&results, &dir);
}

#[test]
fn a_pause_inside_a_single_nodes_release_lets_the_lease_run_out_as_designed() {
    a_pause_inside_the_release_lets_the_lease_run_out_as_designed("single");
}

#[test]
fn a_pause_inside_a_redlock_release_lets_the_lease_run_out_as_designed() {
    a_pause_inside_the_release_lets_the_lease_run_out_as_designed("redlock");
}

#[test]
fn a_pause_inside_a_watchdog_release_lets_the_lease_run_out_as_designed() {
    a_pause_inside_the_release_lets_the_lease_run_out_as_designed("watchdog");
}
