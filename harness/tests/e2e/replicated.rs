//! The two ways a replicated Redis loses a lock, against real primaries,
//! replicas and Sentinels: a primary that restarts empty before Sentinel
//! notices, and a failover to a replica that never received the key.

use crate::common;

use common::{count, events, run_short};

#[test]
fn a_primary_restarted_empty_before_sentinel_notices_loses_the_lock() {
    let tmp = common::tmp();
    // --restart-ms 300 is well under Sentinel's down-after (1000 ms).
    let (out, results, dir) = run_short(tmp.path(), "replicated", "kill", "15", "1", &[]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    assert!(!events(&dir, "start-kill").is_empty());
    assert_eq!(
        events(&dir, "start-kill").len(),
        events(&dir, "stop-kill").len()
    );
    // Lost before Sentinel did anything: the restarted, empty primary granted it.
    let overlap_at = results.anomalies["lock-overlap"].first_time.unwrap();
    if let Some(switch) = events(&dir, "switch-master").first() {
        assert!(
            overlap_at < switch["time"].as_u64().unwrap(),
            "{}",
            out.stdout
        );
    }
}

/// `--restart-at-vote` on Sentinel: the primary comes back as soon as a
/// Sentinel holds it objectively down (`o_down`), and the failover it began
/// goes on: every restart names the Sentinel that said so, and a replica is
/// promoted after the restart. (Whether it had resynced from the empty
/// primary first is the race the option times: 4 of 6 kills here.)
#[test]
fn a_primary_back_as_sentinel_fails_it_over_is_replaced_all_the_same() {
    let tmp = common::tmp();
    let args = ["--restart-at-vote"];
    let (out, _, dir) = run_short(tmp.path(), "replicated", "kill", "16", "1", &args);
    assert!(matches!(out.code, 0 | 1), "{}", out.stdout);
    let restarts = events(&dir, "stop-kill");
    assert!(!restarts.is_empty(), "{}", out.stdout);
    for r in &restarts {
        let by = r["value"]["at_vote"]["by"].as_str().unwrap_or_default();
        assert!(by.starts_with("Sentinel s") && by.contains("o_down"), "{r}");
    }
    let back = restarts[0]["time"].as_u64().unwrap();
    let promoted = events(&dir, "promoted");
    assert!(
        promoted.iter().any(|p| p["time"].as_u64().unwrap() > back),
        "no promotion after {back}: {}",
        out.stdout
    );
}

fn failover(
    results: &std::path::Path,
    time_limit: &str,
    extra: &[&'static str],
) -> (common::Run, checker::Results, std::path::PathBuf) {
    let outcome = run_short(results, "replicated", "failover", time_limit, "4", extra);
    let orphans = common::orphaned_chains();
    assert!(orphans.is_empty(), "iptables rules left: {orphans:?}");
    outcome
}

/// The race a failover loses the lock in: the promoted replica grants it
/// again while the old holder is still inside its critical section. 5.5 s
/// of work (within the 6 s lease) gives Sentinel that long to promote. A
/// loaded machine's Sentinel has still been seen to promote nobody before a
/// 24 s run ended (CI, once in three runs); such a run is `unknown` (its one
/// failover was cut short), so the race is given two runs, as Redlock's
/// scenarios are given three.
#[test]
fn a_failover_to_a_replica_without_the_key_loses_the_lock() {
    let mut outcomes = Vec::new();
    for seed in ["4", "5"] {
        let tmp = common::tmp();
        let args = ["--work-ms", "5500"];
        let (out, results, dir) =
            run_short(tmp.path(), "replicated", "failover", "24", seed, &args);
        let orphans = common::orphaned_chains();
        assert!(orphans.is_empty(), "iptables rules left: {orphans:?}");
        let promoted = events(&dir, "promoted");
        match promoted.as_slice() {
            // The run ended before the vote: the failover says it was cut short.
            [] => {
                let stop = &events(&dir, "stop-failover")[0]["value"];
                assert!(stop["interrupted"].is_string(), "{stop}");
                assert_eq!(out.code, 2, "cut short, yet decided: {}", out.stdout);
            }
            [p] if p["value"]["promoted"].is_null() => {
                assert_eq!(out.code, 2, "no promotion, yet decided: {}", out.stdout)
            }
            [_] => {}
            more => panic!("{} promotions: {}", more.len(), out.stdout),
        }
        if out.code != 1 || count(&results, "lock-overlap") == 0 {
            // No promotion (unknown), or one after the holder had finished.
            outcomes.push(out.stdout);
            continue;
        }
        assert!(!events(&dir, "switch-master").is_empty());
        // The partition refused probes, the old primary's pid was gone, and it
        // came back as a new process.
        for op in ["start-failover", "kill", "stop-failover"] {
            common::assert_verified(&dir, op);
        }
        // The story names the promotion, and the key the new primary lacked.
        let told = common::lockstorm(&["explain", dir.to_str().unwrap()]);
        let overlap = told
            .stdout
            .split("\n\n")
            .find(|c| c.starts_with("lock-overlap"));
        let overlap = overlap.unwrap_or_else(|| panic!("no overlap told:\n{}", told.stdout));
        for step in [
            "the nemesis cut n1 off from its replicas",
            "the nemesis killed n1 while worker-",
            "became the primary",
            "the new primary, never had worker-",
        ] {
            assert!(overlap.contains(step), "no {step:?} in:\n{overlap}");
        }
        return;
    }
    panic!(
        "the failover never lost the lock in two runs:\n{}",
        outcomes.join("\n")
    );
}

/// The same failover, but an acquisition counts only once a replica has it:
/// during the partition none does, so every acquire there fails instead.
#[test]
fn acquires_that_wait_for_a_replica_keep_the_lock_across_a_failover() {
    let tmp = common::tmp();
    // 30 s: the failover's kill comes about 16 s in, and a loaded machine's
    // Sentinel may need more than the 6 s a 22 s run would leave it.
    let (out, results, dir) = failover(tmp.path(), "30", &["--wait-replicas", "1"]);
    common::assert_valid(&results, &dir);
    assert_eq!(out.code, 0, "{}", out.stdout);
    let refused: u64 = results
        .stats
        .errors
        .iter()
        .filter(|(e, _)| e.starts_with("not-replicated"))
        .map(|(_, n)| n)
        .sum();
    assert!(
        refused > 0,
        "no acquire was refused for want of a replica: {}",
        out.stdout
    );
    let promoted = events(&dir, "promoted");
    assert!(
        promoted
            .first()
            .is_some_and(|p| p["value"]["promoted"].is_string()),
        "the failover did not happen: {promoted:?}"
    );
}
