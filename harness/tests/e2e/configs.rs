//! End-to-end runs of the `watchdog` config and the negative controls
//! `unsafe-key-per-worker` (and `unsafe-get-del`'s release, in its unit
//! test), against real Redis. Fixed seeds.

use crate::common;

use checker::Validity;
use common::{count, events, run_short};

/// Work three times as long as the lease: without renewal every hold
/// outlives its key. (Seed 7's pauses, in the runs under `pause`, come
/// about 1.3 and 4.4 s in; the first breaks the lock within a second.)
const SLOW_WORK: &[&str] = &["--work-ms", "3000", "--ttl-ms", "1000"];

/// Completions of `op` in the history with this type and error.
fn completions(dir: &std::path::Path, op: &str, kind: &str, error: Option<&str>) -> usize {
    events(dir, op)
        .iter()
        .filter(|e| e["type"] == kind && e["error"].as_str() == error)
        .count()
}

#[test]
fn single_loses_the_lock_when_work_outlasts_the_lease() {
    let tmp = common::tmp();
    let (out, results, _) = run_short(tmp.path(), "single", "none", "5", "5", SLOW_WORK);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert_eq!(results.valid, Validity::False);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
}

#[test]
fn watchdog_keeps_extending_the_lease_through_slow_work() {
    let tmp = common::tmp();
    let (out, results, dir) = run_short(tmp.path(), "watchdog", "none", "9", "5", SLOW_WORK);
    common::assert_valid(&results, &dir);
    assert_eq!(out.code, 0, "{}", out.stdout);
    // Every hold lasted three TTLs, so it was extended, and no renewal failed.
    let extended = completions(&dir, "extend", "ok", None);
    assert!(extended >= 6, "{extended} extends ok\n{}", out.stdout);
    assert_eq!(completions(&dir, "extend", "fail", Some("not-held")), 0);
    // And the writes went through: the renewed lease passed the check.
    let counter = results.counter().expect("a counter report");
    assert!(counter.acknowledged >= 2, "{}", out.stdout);
}

#[test]
fn watchdog_under_pause_loses_mutual_exclusion_and_the_stale_write_lands() {
    let tmp = common::tmp();
    // The default pause strikes after the holder's lease check, for 1.5 ×
    // TTL: the renewal thread is frozen with its worker, the key expires,
    // and the write that follows the pause is stale.
    let (out, results, dir) = run_short(
        tmp.path(),
        "watchdog",
        "pause",
        "7",
        "7",
        &["--ttl-ms", "1000", "--work-ms", "200"],
    );
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    assert!(count(&results, "lost-update") > 0, "{}", out.stdout);
    common::assert_verified(&dir, "start-pause");
    // Woken, the renewal finds the key someone else's: too late, the
    // write had passed its check before the pause.
    let lost = completions(&dir, "extend", "fail", Some("not-held"));
    assert!(lost >= 1, "no renewal found the lock lost\n{}", out.stdout);
}

#[test]
fn watchdog_paused_before_its_check_refuses_the_stale_write() {
    let tmp = common::tmp();
    // Struck after the read, before the check: the renewal that wakes with
    // the worker marks the lock lost, or the lease has run out; either way
    // the check refuses the write.
    let (out, results, dir) = run_short(
        tmp.path(),
        "watchdog",
        "pause",
        "7",
        "7",
        &["--ttl-ms", "1000", "--work-ms", "200", "--at", "read"],
    );
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    let refused = completions(&dir, "write", "fail", Some("not-held"))
        + completions(&dir, "write", "fail", Some("lease-expired"));
    assert!(refused >= 1, "no stale write refused\n{}", out.stdout);
}

#[test]
fn unsafe_key_per_worker_overlaps_without_any_fault() {
    let tmp = common::tmp();
    let (out, results, _) = run_short(tmp.path(), "unsafe-key-per-worker", "none", "4", "3", &[]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(results.stats.first_fault_time.is_none());
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    assert!(count(&results, "lost-update") > 0, "{}", out.stdout);
}
