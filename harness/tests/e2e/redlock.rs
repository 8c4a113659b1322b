//! Redlock on five real nodes: what it tolerates (a minority of faulty nodes)
//! and what breaks it (pauses, clock jumps on a majority, Kleppmann's bare
//! majority with one clock jump, nodes restarted empty).

use crate::common;

use common::{count, events, run_short};
use std::collections::BTreeSet;

fn redlock(
    args: &[&str],
    time_limit: &str,
) -> (
    common::Run,
    checker::Results,
    std::path::PathBuf,
    tempfile::TempDir,
) {
    let tmp = common::tmp();
    let (nemesis, extra) = (args[1], &args[2..]);
    let (out, results, dir) = run_short(tmp.path(), "redlock", nemesis, time_limit, "1", extra);
    (out, results, dir, tmp)
}

#[test]
fn clock_jumps_on_a_majority_break_redlock() {
    let (out, results, dir, _t) = redlock(&["--nemesis", "clock", "--targets", "majority"], "8");
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    common::assert_all_caused(&results, "lock-overlap");
    let jump = &events(&dir, "start-clock")[0]["value"];
    assert_eq!(jump["targets"].as_array().unwrap().len(), 3, "{jump}");
    // Each jumped node's TIME was read back moved, and back again on heal.
    common::assert_verified(&dir, "start-clock");
    common::assert_verified(&dir, "stop-clock");
}

/// One node's jump frees only that node's copy: a rival can complete a
/// majority only if the holder had a bare one (Kleppmann), so every
/// overlap's two majorities may share nothing but jumped nodes.
#[test]
fn a_clock_jump_on_one_node_breaks_redlock_only_through_a_bare_majority() {
    let (out, results, dir, _t) = redlock(&["--nemesis", "clock", "--targets", "one"], "10");
    overlaps_share_only_faulted_nodes(&out, &results, &dir, "start-clock");
}

/// A fault on one node frees only that node's copy of a key: a rival can
/// complete a majority only if the holder had a bare one (Kleppmann). So the
/// exit code follows the overlaps, and every overlap's two recorded
/// majorities share nothing but nodes that `fault_event` names as targets.
fn overlaps_share_only_faulted_nodes(
    out: &common::Run,
    results: &checker::Results,
    dir: &std::path::Path,
    fault_event: &str,
) {
    let faulted: BTreeSet<String> = events(dir, fault_event)
        .iter()
        .flat_map(|e| names(&e["value"]["targets"]))
        .collect();
    assert!(!faulted.is_empty(), "no {fault_event} happened");
    common::assert_verified(dir, fault_event);
    let granted = |index: u64| -> BTreeSet<String> {
        let all = events(dir, "acquire");
        let ok = all.iter().find(|e| e["index"] == index).unwrap();
        names(&ok["value"]["nodes"]).collect()
    };
    let overlaps = &results.anomalies["lock-overlap"];
    assert_eq!(
        out.code,
        u8::from(overlaps.count > 0) as i32,
        "{}",
        out.stdout
    );
    for pair in &overlaps.examples {
        let (a, b) = (granted(pair[0]), granted(pair[1]));
        assert!(a.len() >= 3 && b.len() >= 3, "{a:?} {b:?}");
        let shared: BTreeSet<String> = a.intersection(&b).cloned().collect();
        assert!(
            shared.is_subset(&faulted),
            "holders {pair:?} shared {shared:?}, but only {faulted:?} were hit by {fault_event}"
        );
    }
}

fn names(list: &serde_json::Value) -> impl Iterator<Item = String> + '_ {
    let list = list.as_array().map(Vec::as_slice).unwrap_or_default();
    list.iter().map(|n| n.as_str().unwrap().to_string())
}

/// Up to three seeds: the scenarios depend on which side wins the race for
/// the lock first (the issue allows three short runs for such faults).
/// `seconds` leaves a few seconds after the fault that completes the
/// scenario.
fn caught_within_three_runs(nemesis: &str, first_event: &str, seconds: &str) {
    let mut outcomes = Vec::new();
    for seed in ["1", "2", "3"] {
        let tmp = common::tmp();
        let (out, results, dir) = run_short(tmp.path(), "redlock", nemesis, seconds, seed, &[]);
        assert!(
            !events(&dir, first_event).is_empty(),
            "no {first_event}: {}",
            out.stdout
        );
        let orphans = common::orphaned_chains();
        assert!(orphans.is_empty(), "iptables rules left: {orphans:?}");
        if out.code == 1 && count(&results, "lock-overlap") > 0 {
            return;
        }
        outcomes.push(out.stdout);
    }
    panic!(
        "{nemesis} never broke Redlock in three runs:\n{}",
        outcomes.join("\n")
    );
}

#[test]
fn kleppmann_a_partition_leaves_a_bare_majority_and_one_clock_jump_breaks_redlock() {
    // The holder reaches n1-n3, n3 jumps, the other side takes n3-n5.
    // The jump follows the 6 s partition: about 9.6 s in with seed 1 (the
    // pair needs 20 s to fit whatever the seed).
    caught_within_three_runs("partition+clock", "start-partition", "20");
}

#[test]
fn two_nodes_restarted_empty_leave_a_bare_majority_and_one_clock_jump_breaks_redlock() {
    // n1 and n2 restart empty, n3 jumps, another worker takes n1-n3.
    // The jump follows the kill: about 4.6 s in with seed 1.
    caught_within_three_runs("kill+clock", "start-kill", "15");
}

#[test]
fn killing_the_holders_majority_breaks_redlock() {
    let (out, results, _, _t) = redlock(&["--nemesis", "kill", "--targets", "majority"], "12");
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
}

/// Delayed restart (Redlock's advice): down longer than the 6 s TTL. The
/// kill comes about 4 s in, the restart 7 s later.
#[test]
fn a_killed_majority_that_stays_down_past_the_ttl_keeps_redlock_safe() {
    let args = [
        "--nemesis",
        "kill",
        "--targets",
        "majority",
        "--restart-ms",
        "7000",
    ];
    let (out, results, dir, _t) = redlock(&args, "16");
    common::assert_valid(&results, &dir);
    assert_eq!(out.code, 0, "{}", out.stdout);
}

/// One node killed and restarted empty breaks it too whenever the holder
/// had a bare majority including that node: a rival completes a majority
/// with the empty node. Whether that happens depends on the race for the
/// lock, so assert what the history shows, not a verdict.
#[test]
fn one_node_restarted_empty_breaks_redlock_only_through_a_bare_majority() {
    let (out, results, dir, _t) = redlock(&["--nemesis", "kill", "--targets", "one"], "10");
    overlaps_share_only_faulted_nodes(&out, &results, &dir, "start-kill");
}

#[test]
fn no_redlock_lease_survives_a_pause_and_its_check_notices_a_pause_before_it() {
    // Frozen after its read, before its check: the check notices the lease
    // ran out and refuses the stale write.
    let args = ["--nemesis", "pause", "--ttl-ms", "1000", "--at", "read"];
    let (out, before_check, _, _t) = redlock(&args, "8");
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&before_check, "lock-overlap") > 0, "{}", out.stdout);
    assert_eq!(count(&before_check, "lost-update"), 0, "{}", out.stdout);
    assert!(
        before_check.counter().unwrap().lease_expired > 0,
        "{}",
        out.stdout
    );
}

/// Frozen after its check (the default point), right before its write: the
/// same careful holder writes stale, so a lease check does not close the gap.
#[test]
fn a_redlock_lease_check_does_not_close_the_gap_after_it() {
    let (out, after_check, _, _t) = redlock(&["--nemesis", "pause", "--ttl-ms", "1000"], "8");
    assert_eq!(out.code, 1, "{}", out.stdout);
    // Its write was invoked before the pause, so it is not an
    // `unsafe-action` (that needs the rival's grant certainly before the
    // invoke); the counter shows the damage.
    assert!(count(&after_check, "lost-update") > 0, "{}", out.stdout);
}

#[test]
fn a_partition_of_a_minority_or_a_majorities_ring_keeps_redlock_safe() {
    let (out, _, dir, _t) = redlock(&["--nemesis", "partition", "--targets", "ring"], "14");
    assert_eq!(out.code, 0, "{}", out.stdout);
    // Probes across the cut links failed while the nodes still took the harness's.
    common::assert_verified(&dir, "start-partition");
}

#[test]
fn a_clock_jump_on_a_single_node_breaks_single() {
    let tmp = common::tmp();
    let (out, results, _) = run_short(tmp.path(), "single", "clock", "6", "1", &[]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    common::assert_all_caused(&results, "lock-overlap");
    common::assert_all_caused(&results, "lost-update");
}

#[test]
fn the_rslock_crate_is_broken_by_a_majority_clock_jump_like_any_redlock() {
    let tmp = common::tmp();
    let (out, results, _) = run_short(tmp.path(), "redlock-rslock", "clock", "7", "1", &[]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
}

/// The clock nemesis on the client side: a holder whose lease clock runs
/// behind believes in a lease that has expired, and its own check lets a
/// stale write through. Same run without the skew: the check refuses it.
#[test]
fn a_lagging_lease_clock_defeats_the_holders_own_check() {
    // Runs one after another: started early, it does not end the suite.
    common::long_test();
    // The skew must outlast the holder's check, 1.5 s after it acquired.
    let honest = [
        "--clock-jump-ms",
        "0",
        "--ttl-ms",
        "1000",
        "--work-ms",
        "1500",
        "--fault-ms",
        "3000",
    ];
    let tmp = common::tmp();
    let (out, results, _) = run_short(tmp.path(), "single", "clock", "7", "3", &honest);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert_eq!(count(&results, "unsafe-action"), 0, "{}", out.stdout);

    let tmp = common::tmp();
    let skewed = [&honest[..], &["--holder-skew-ms", "-5000"]].concat();
    let (out, fooled, dir) = run_short(tmp.path(), "single", "clock", "7", "3", &skewed);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(!events(&dir, "skew").is_empty(), "no skew was sent");
    assert!(count(&fooled, "unsafe-action") > 0, "{}", out.stdout);
    granted_attempts_lie_within_their_acquires(&dir);
}

/// A rival that began waiting before the fooled holder's grant is certainly
/// later only through the time its winning attempt was sent: each acquire
/// `ok` records it, between the op's invoke and its `ok`.
fn granted_attempts_lie_within_their_acquires(dir: &std::path::Path) {
    let mut invoked = std::collections::HashMap::new();
    let mut oks = 0;
    for e in events(dir, "acquire") {
        let time = e["time"].as_u64().unwrap();
        match e["type"].as_str().unwrap() {
            "invoke" => {
                invoked.insert(e["process"].to_string(), time);
            }
            "ok" => {
                let sent = e["value"]["attempt_sent"].as_u64().expect("attempt_sent");
                let from = invoked[&e["process"].to_string()];
                assert!(
                    (from..=time).contains(&sent),
                    "{e} sent at {sent}, invoked at {from}"
                );
                oks += 1;
            }
            _ => {}
        }
    }
    assert!(oks > 0, "no acquire was granted");
}
