//! Network faults through the fault proxy, end to end with real Redis: a
//! write delayed past the lease lands behind the next holder's and loses
//! updates, fencing refuses it; a late plain `DEL` takes the next holder's
//! lock, a late compare-and-delete harms nothing; a lost acquire reply is no
//! overlap by itself; a client adapter's own connections are partitioned; a
//! grant that arrives after its lease is taken by a library without a
//! validity check and refused by one with it.

use crate::common;

use common::{assert_all_caused, assert_verified, count, events, run_short};

/// Every `stop-<fault>` event carries the proxy's evidence of what it held.
fn stops(dir: &std::path::Path, fault: &str) -> Vec<serde_json::Value> {
    let found = events(dir, &format!("stop-{fault}"));
    assert!(!found.is_empty(), "no stop-{fault}");
    found.into_iter().map(|e| e["value"].clone()).collect()
}

#[test]
fn a_write_delayed_past_the_lease_lands_behind_the_next_holders_and_loses_updates() {
    // A 9 s run fits one delay (about 2 s in, the write lost about 7 s in);
    // on a busy host the one held write
    // can time out at the worker and land where it loses nothing (CI saw it
    // once), so up to three seeds.
    let mut runs = Vec::new();
    for seed in ["3", "4", "5"] {
        let tmp = common::tmp();
        let run = run_short(tmp.path(), "single", "delay", "9", seed, &[]);
        let lost = count(&run.1, "lost-update") > 0;
        runs.push((run, tmp));
        if lost {
            break;
        }
    }
    let ((out, results, dir), _tmp) = runs.pop().expect("a seed ran");
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lost-update") > 0, "{}", out.stdout);
    assert_all_caused(&results, "lost-update");
    // The storage took the held write after another's grant: the red ✗.
    assert!(count(&results, "unsafe-action") > 0, "{}", out.stdout);
    assert_all_caused(&results, "unsafe-action");
    assert_verified(&dir, "start-delay");
    let held: Vec<serde_json::Value> = stops(&dir, "delay");
    assert!(
        held.iter().any(|s| s["class"] == "write"
            && s["behind_another"] == true
            && s["held_ms"].as_u64() >= Some(3_000)),
        "no write held past the lease and let go behind another: {held:?}"
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert!(record["proxied_requests"].as_u64() > Some(0), "{record}");
}

#[test]
fn fencing_refuses_the_delayed_write_at_the_storage() {
    let tmp = common::tmp();
    let (out, _, dir) = run_short(tmp.path(), "fenced", "delay", "9", "3", &[]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_verified(&dir, "start-delay");
    let held = stops(&dir, "delay");
    assert!(
        held.iter()
            .any(|s| s["behind_another"] == true && s["accepted"] == false),
        "no held write went behind another's and was refused: the run did not test fencing: {held:?}"
    );
}

#[test]
fn a_late_plain_del_takes_the_next_holders_lock() {
    let tmp = common::tmp();
    let args = ["--at", "releasing"];
    let (out, results, dir) = run_short(tmp.path(), "unsafe-del", "delay", "9", "3", &args);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    assert_all_caused(&results, "lock-overlap");
    let held = stops(&dir, "delay");
    assert!(held.iter().all(|s| s["class"] == "release"), "{held:?}");
}

#[test]
fn a_late_compare_and_delete_finds_another_token_and_harms_nothing() {
    let tmp = common::tmp();
    let args = ["--at", "releasing"];
    let (out, _, dir) = run_short(tmp.path(), "single", "delay", "9", "3", &args);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(
        stops(&dir, "delay")
            .iter()
            .any(|s| s["behind_another"] == true),
        "the release never went behind another's grant: the run did not test it"
    );
}

#[test]
fn a_lost_acquire_reply_is_no_overlap_by_itself() {
    let tmp = common::tmp();
    let args = ["--at", "acquiring"];
    let (out, _, dir) = run_short(tmp.path(), "single", "lose-reply", "8", "3", &args);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_verified(&dir, "start-lose-reply");
    assert!(stops(&dir, "lose-reply").iter().all(|s| s["reset"] == 1));
    let lost = events(&dir, "acquire")
        .into_iter()
        .filter(|e| e["type"] == "info")
        .count();
    assert!(lost > 0, "no acquire ended info: the reply was not lost");
}

#[test]
fn a_partition_cuts_a_client_adapters_own_connections() {
    let tmp = common::tmp();
    // A 2 s lease rather than partition's default 6 s: a 2 s cut (about
    // 3.7 s in) and 2 s to settle fit a 9 s run.
    let args = ["--client", "redis-py", "--ttl-ms", "2000"];
    let (out, _, dir) = run_short(tmp.path(), "single", "partition", "9", "3", &args);
    assert!(
        out.code == 0 || out.code == 1,
        "refused or unknown: {}\n{}",
        out.stdout,
        out.stderr
    );
    assert_verified(&dir, "start-partition");
    let stopped = stops(&dir, "partition");
    assert!(
        stopped
            .iter()
            .any(|s| s["dropped_bytes"].as_u64() > Some(0)),
        "the adapter sent nothing across the cut: {stopped:?}"
    );
}

/// redis-py's `Sentinel.master_for` finds the primary through a Sentinel
/// whose answer the proxy rewrote: its acquire is caught on the primary's
/// proxy, which only a connection that stayed behind the proxy can be.
#[test]
fn a_library_that_asks_sentinel_for_the_primary_stays_behind_the_proxy() {
    let tmp = common::tmp();
    let args = ["--client", "redis-py", "--at", "acquiring"];
    let (out, _, dir) = run_short(tmp.path(), "replicated", "delay", "10", "3", &args);
    assert!(
        out.code == 0 || out.code == 1,
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    let caught = events(&dir, "start-delay");
    assert!(!caught.is_empty(), "no acquire reached the primary's proxy");
    for e in &caught {
        assert_eq!(e["node"], "n1", "the primary is n1: {e}");
        assert_eq!(e["value"]["class"], "acquire", "{e}");
    }
}

/// A granting reply held 800 ms against a 500 ms TTL, inside the Python
/// adapters' 1 s socket timeout: the library is told "granted" after its
/// lease ran out.
/// Three workers: enough to take the lock while the grant is held, and
/// fewer interpreters for the suite's two cores.
const LATE_GRANT: [&str; 10] = [
    "--at",
    "acquiring",
    "--ttl-ms",
    "500",
    "--pause-ms",
    "800",
    "--workers",
    "3",
    "--client",
    "",
];

fn late_grant(client: &str) -> (common::Run, checker::Results, tempfile::TempDir) {
    let tmp = common::tmp();
    let mut args = LATE_GRANT;
    args[9] = client;
    let (out, results, dir) = run_short(tmp.path(), "single", "delay", "8", "1", &args);
    assert_verified(&dir, "start-delay");
    let held = stops(&dir, "delay");
    assert!(
        held.iter()
            .any(|s| s["class"] == "acquire" && s["held_ms"].as_u64() >= Some(800)),
        "no grant held past the lease: {held:?}"
    );
    (out, results, tmp)
}

/// redis-py takes whatever grant arrives: with no validity check, a grant
/// whose lease already ran out makes a second holder.
#[test]
fn a_library_without_a_validity_check_takes_a_grant_that_came_after_its_lease() {
    let (out, results, _tmp) = late_grant("redis-py");
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    assert_all_caused(&results, "lock-overlap");
}

/// pottery measures how long its acquire took against the TTL (Redlock's
/// validity, even on one node) and refuses the late grant.
#[test]
fn a_library_with_a_validity_check_refuses_a_grant_that_came_after_its_lease() {
    let (out, results, _tmp) = late_grant("pottery");
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(count(&results, "lock-overlap"), 0, "{}", out.stdout);
}
