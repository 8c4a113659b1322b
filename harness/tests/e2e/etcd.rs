//! etcd's lock end to end, on three real `etcd` members: its recipe breaks
//! under a pause as any lease does, its revision fence keeps the data, a
//! crashed holder's lease runs out, and no member or data folder outlives
//! the harness.

use crate::common;

use checker::Validity;
use common::events;
use serde_json::Value;
use std::path::{Path, PathBuf};

#[test]
fn etcds_lock_breaks_under_a_pause_and_its_revision_fence_keeps_the_data() {
    common::long_test();
    let (_tmp, results, dir, _) = common::members_run("etcd", "pause", "8", &[]);
    assert_eq!(results.valid, Validity::False, "{}", dir.display());
    assert!(
        common::count(&results, "lock-overlap") >= 1,
        "{}",
        dir.display()
    );
    common::assert_all_caused(&results, "lock-overlap");
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert!(
        record["etcd"].as_str().is_some_and(|v| v.contains("3.")),
        "run.json names etcd's version: {}",
        record["etcd"]
    );
    let (_tmp, results, dir, json) = common::members_run("etcd-fenced", "pause", "8", &[]);
    common::assert_valid(&results, &dir);
    let refused = json["checkers"]["counter"]["stale_fence_rejected"]["writes"]
        .as_u64()
        .unwrap_or(0);
    assert!(refused >= 1, "no stale write refused: {}", dir.display());
}

#[test]
fn a_crashed_holders_lease_runs_out_and_keep_alives_renew_it_while_held() {
    // Work past a third of the TTL: each hold's lease is kept alive.
    let (_tmp, results, dir, _) = common::members_run("etcd", "crash", "8", &["--work-ms", "1500"]);
    common::assert_valid(&results, &dir);
    common::assert_verified(&dir, "stop-crash");
    // The keep-alive thread renewed each lease while it was held.
    let renewed = events(&dir, "extend")
        .into_iter()
        .filter(|e| {
            e["type"] == "ok"
                && e["process"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("keepalive-"))
        })
        .count();
    assert!(
        renewed >= 1,
        "no keep-alive renewed a lease: {}",
        dir.display()
    );
}

#[test]
fn the_revision_fence_survives_a_killed_majority_of_members() {
    common::fence_survives_a_killed_majority("etcd-fenced", "10");
}

/// The protocol page's etcd lock client, as a user would copy it; with
/// `fence`, declaring the fence its grants carry.
fn etcd_example(dir: &Path, fence: bool) -> PathBuf {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md"))
        .unwrap();
    let (_, after) = page
        .split_once("<!-- example-etcd-adapter -->\n```python\n")
        .expect("docs/protocol.md has the marked etcd example");
    let (code, _) = after.split_once("```").expect("the example block ends");
    let declared = r#"features=["token"]"#;
    assert!(code.contains(declared), "the example declares {declared}");
    let code = match fence {
        true => code.replace(declared, r#"features=["token", "fence"]"#),
        false => code.to_string(),
    };
    let path = dir.join(if fence {
        "etcd_fenced.py"
    } else {
        "etcd_lock.py"
    });
    std::fs::write(&path, code).unwrap();
    path
}

#[test]
fn a_users_etcd_lock_client_is_caught_under_a_pause_and_its_fence_keeps_the_data() {
    common::long_test();
    for fence in [false, true] {
        let tmp = common::open_tmp();
        let cmd = format!("python3 {}", etcd_example(tmp.path(), fence).display());
        let client = ["--client-cmd", cmd.as_str(), "--workers", "3"];
        let (_, results, dir) = common::run_short(tmp.path(), "etcd", "pause", "8", "5", &client);
        common::assert_no_process_left(tmp.path());
        let record: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
        // Its `init` reached the members: it took the lock, and said who it is.
        assert_eq!(
            record["client"]["library"],
            "etcd-sketch 1.0",
            "{}",
            dir.display()
        );
        assert!(results.stats.acquired >= 5, "{}", dir.display());
        for n in 1..=3 {
            let data = dir.join(format!("nodes/n{n}/data"));
            assert!(!data.exists(), "{} outlived the run", data.display());
        }
        // Either way the lock broke: an adapter's promise is its lock's.
        assert_eq!(results.valid, Validity::False, "{}", dir.display());
        assert!(
            common::count(&results, "lock-overlap") >= 1,
            "{}",
            dir.display()
        );
        common::assert_all_caused(&results, "lock-overlap");
        let refused = results
            .stats
            .errors
            .get("stale-fence")
            .copied()
            .unwrap_or(0);
        match fence {
            false => assert_eq!(refused, 0, "no fence, nothing refused: {}", dir.display()),
            // With its revision checked, the paused holder's write is refused.
            true => {
                assert!(refused >= 1, "no stale write refused: {}", dir.display());
                for anomaly in ["lost-update", "stale-fence-accepted"] {
                    assert_eq!(
                        common::count(&results, anomaly),
                        0,
                        "{anomaly}: {}",
                        dir.display()
                    );
                }
            }
        }
    }
}

#[test]
fn a_member_cut_off_from_the_others_loses_its_leader_and_the_fence_keeps_the_data() {
    // The default --targets majority: n1 and n2 on one side, n3 alone.
    let (_tmp, results, dir, _) =
        common::members_run("etcd-fenced", "partition", "10", &["--fault-ms", "2000"]);
    common::assert_valid(&results, &dir);
    common::assert_verified(&dir, "start-partition");
    common::assert_verified(&dir, "stop-partition");
    for cut in events(&dir, "start-partition") {
        assert_eq!(cut["value"]["by"], "iptables", "{cut}");
        assert_eq!(
            cut["value"]["cut"],
            serde_json::json!([["n1", "n2"], ["n3"]]),
            "{cut}"
        );
        assert_eq!(
            cut["value"]["verified"]["leaderless"],
            serde_json::json!(["n3"]),
            "the member alone lost its leader: {cut}"
        );
    }
}

/// A wall-clock jump on a majority of members, twice the TTL forward while
/// a client holds the lock, moves what the members say of the time (their
/// HTTP `Date`, read back) and not their leases: a lease runs on the
/// leader's monotonic clock, so no holder loses its lock early, where a
/// Redis key expires (`redlock`'s clock tests).
#[test]
fn a_wall_clock_jump_on_the_members_moves_their_time_not_their_leases() {
    let (_tmp, results, dir, _) = common::members_run("etcd", "clock", "7", &[]);
    common::assert_valid(&results, &dir);
    assert_eq!(common::count(&results, "lock-overlap"), 0);
    let jumps = events(&dir, "start-clock");
    assert!(!jumps.is_empty(), "no jump: {}", dir.display());
    for jump in &jumps {
        // Each member's Date, read back, was the jump ahead of real time.
        let want = jump["value"]["jump_ms"].as_i64().unwrap();
        let seen = jump["value"]["verified"]["observed_offset_ms"]
            .as_object()
            .unwrap_or_else(|| panic!("not verified: {jump}"));
        assert_eq!(seen.len(), 2, "a majority of members: {jump}");
        for (member, ms) in seen {
            let ms = ms.as_i64().unwrap();
            assert!(
                (ms - want).abs() < 250,
                "{member} was {ms} ms ahead: {jump}"
            );
        }
    }
    common::assert_verified(&dir, "stop-clock");
}

#[test]
fn no_member_or_data_folder_outlives_an_interrupted_or_killed_harness() {
    let run = common::paused_for_a_minute("etcd");
    common::nothing_outlives_a_signalled_harness(&run, "etcd-pause", "start-pause", |dir| {
        (1..=3)
            .map(|n| dir.join(format!("nodes/n{n}/data/member")))
            .collect()
    });
}

#[test]
fn a_missing_etcd_is_one_line_saying_how_to_install_it() {
    common::missing_server_line(
        "etcd",
        ("LOCKSTORM_ETCD_BIN", "/nonexistent/etcd/bin"),
        "etcd-server",
    );
}

#[test]
fn a_fault_that_does_not_reach_etcd_yet_is_refused_in_one_line() {
    let tmp = common::tmp();
    let results = tmp.path().to_str().unwrap();
    for nemesis in ["delay", "lose-reply"] {
        let out = common::lockstorm(&[
            "run",
            "--config",
            "etcd",
            "--nemesis",
            nemesis,
            "--results",
            results,
        ]);
        let line = common::one_line_254(&out);
        assert!(
            line.contains("choose pause, crash, kill, pause-node, partition or clock"),
            "{line}"
        );
    }
    // The harness serves a member's clock to its process: not in a container.
    let out = common::lockstorm(&[
        "run",
        "--config",
        "etcd",
        "--nemesis",
        "clock",
        "--backend",
        "docker",
        "--results",
        results,
    ]);
    let line = common::one_line_254(&out);
    assert!(line.contains("add --backend local"), "{line}");
}
