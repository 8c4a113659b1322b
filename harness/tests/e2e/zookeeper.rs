//! ZooKeeper's lock end to end, on a real three-member ensemble (Debian's
//! `zookeeper` on Java): its recipe breaks under a pause as any lease does
//! (the session expires under a live holder), its creation-zxid fence keeps
//! the data, a killed majority leaves it unavailable but safe, and no member,
//! JVM or data folder outlives the harness.

use crate::common;

use checker::Validity;
use common::events;
use serde_json::Value;

#[test]
fn zookeepers_lock_breaks_under_a_pause_and_its_zxid_fence_keeps_the_data() {
    common::long_test();
    let (_tmp, results, dir, _) = common::members_run("zookeeper", "pause", "8", &[]);
    assert_eq!(results.valid, Validity::False, "{}", dir.display());
    assert!(
        common::count(&results, "lock-overlap") >= 1,
        "{}",
        dir.display()
    );
    common::assert_all_caused(&results, "lock-overlap");
    common::assert_verified(&dir, "start-pause");
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert!(
        record["zookeeper"]
            .as_str()
            .is_some_and(|v| v.contains("ZooKeeper 3.")),
        "run.json names ZooKeeper's version: {}",
        record["zookeeper"]
    );
    let (_tmp, results, dir, json) = common::members_run("zookeeper-fenced", "pause", "8", &[]);
    common::assert_valid(&results, &dir);
    let refused = json["checkers"]["counter"]["stale_fence_rejected"]["writes"]
        .as_u64()
        .unwrap_or(0);
    assert!(refused >= 1, "no stale write refused: {}", dir.display());
    // Each refused write carried a fence lower than one the storage had
    // taken: a creation zxid of an earlier holder's node.
    let fences: Vec<u64> = events(&dir, "write")
        .into_iter()
        .filter_map(|e| e["fence"].as_u64())
        .collect();
    assert!(
        !fences.is_empty(),
        "no write carried a fence: {}",
        dir.display()
    );
}

#[test]
fn the_zxid_fence_survives_a_killed_majority_of_members() {
    common::fence_survives_a_killed_majority("zookeeper-fenced", "12");
}

#[test]
fn no_member_jvm_or_data_folder_outlives_an_interrupted_or_killed_harness() {
    let run = common::paused_for_a_minute("zookeeper");
    common::nothing_outlives_a_signalled_harness(&run, "zookeeper-pause", "start-pause", |dir| {
        (1..=3)
            .map(|n| dir.join(format!("nodes/n{n}/data")))
            .collect()
    });
}

#[test]
fn a_missing_zookeeper_is_one_line_saying_how_to_install_it() {
    common::missing_server_line(
        "zookeeper",
        ("LOCKSTORM_ZOOKEEPER_JAR", "/nonexistent/zookeeper.jar"),
        "zookeeper",
    );
}

#[test]
fn a_fault_that_does_not_reach_zookeeper_yet_is_refused_in_one_line() {
    let tmp = common::tmp();
    let results = tmp.path().to_str().unwrap();
    for nemesis in ["delay", "partition", "clock"] {
        let out = common::lockstorm(&[
            "run",
            "--config",
            "zookeeper",
            "--nemesis",
            nemesis,
            "--results",
            results,
        ]);
        let line = common::one_line_254(&out);
        assert!(
            line.contains("choose pause, crash, kill or pause-node"),
            "{line}"
        );
    }
}
