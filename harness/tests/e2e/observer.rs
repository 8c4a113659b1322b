//! The observer records the lock key's life on its node, each event with the
//! token the key held and, where the command's source address names one,
//! the worker that sent it; the checker labels overlaps from it.

use crate::common;

use checker::{Results, LEASE_EXPIRED};
use common::{events, run_short};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// Token → the worker whose acquire carried it (worker `i` runs as process
/// `i`, or `i + k·workers` after an `info`).
fn owners(dir: &Path, workers: u64) -> HashMap<String, String> {
    events(dir, "acquire")
        .iter()
        .filter(|e| e["type"] == "invoke" && e["process"].is_u64())
        .filter_map(|e| {
            let worker = e["process"].as_u64()? % workers;
            Some((e["token"].as_str()?.to_string(), format!("worker-{worker}")))
        })
        .collect()
}

/// The observer's `f` events, each checked for the contract's shape.
fn observed(dir: &Path, f: &str) -> Vec<Value> {
    let found = events(dir, f);
    for e in &found {
        assert_eq!(e["process"], "observer", "{e}");
        assert_eq!(e["type"], "info", "{e}");
        assert_eq!(e["node"], "n1", "{e}");
        assert!(e["value"].is_object(), "{e}");
    }
    found
}

/// The worker whose token the event names.
fn owner_of<'a>(e: &Value, owners: &'a HashMap<String, String>) -> Option<&'a str> {
    owners.get(str_of(e, "token")).map(String::as_str)
}

fn str_of<'a>(e: &'a Value, field: &str) -> &'a str {
    e[field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field}: {e}"))
}

/// Every example of `lock-overlap` is labelled `label`.
fn assert_overlaps_labelled(results: &Results, label: &str) {
    let overlap = &results.anomalies["lock-overlap"];
    assert!(overlap.count > 0, "the pause made no overlap: {overlap:?}");
    assert_eq!(
        overlap.labels.get(label),
        Some(&overlap.count),
        "{overlap:?}"
    );
    assert_eq!(overlap.example_labels.len(), overlap.examples.len());
    assert!(
        overlap
            .example_labels
            .iter()
            .all(|l| l.as_deref() == Some(label)),
        "{overlap:?}"
    );
}

/// The watchdog renews its lease every TTL/3 while its holder works (450 ms
/// of a 900 ms lease); a pause (1.35 s) freezes the holder and its watchdog
/// thread together, so the key expires under it.
#[test]
fn a_watchdog_lock_is_seen_set_renewed_and_expired_under_a_pause() {
    let tmp = common::tmp();
    let extra = ["--ttl-ms", "900", "--work-ms", "450", "--workers", "3"];
    let (_, results, dir) = run_short(tmp.path(), "watchdog", "pause", "8", "1", &extra);
    let owner = owners(&dir, 3);
    let sets = observed(&dir, "key-set");
    assert!(!sets.is_empty(), "no key-set recorded");
    for e in &sets {
        assert_eq!(owner_of(e, &owner), Some(str_of(&e["value"], "by")), "{e}");
        assert_eq!(e["value"]["ttl_ms"], 900, "{e}");
    }
    // A renewal is the holder's own watchdog's, and the token's `extend`
    // says it happened.
    let extended: Vec<Value> = events(&dir, "extend")
        .into_iter()
        .filter(|e| e["type"] == "ok")
        .map(|e| e["token"].clone())
        .collect();
    let renewed = observed(&dir, "key-renewed");
    assert!(!renewed.is_empty(), "no key-renewed recorded");
    for e in &renewed {
        assert_eq!(owner_of(e, &owner), Some(str_of(&e["value"], "by")), "{e}");
        assert!(extended.contains(&e["token"]), "no extend ok for {e}");
    }
    // The paused worker's key expires during the pause, no sooner than a
    // lease after the observer saw it last set or renewed.
    let pause = &events(&dir, "start-pause")[0];
    let paused = str_of(&pause["value"], "target");
    let expired = observed(&dir, "key-expired");
    let theirs: Vec<&Value> = expired
        .iter()
        .filter(|e| owner_of(e, &owner) == Some(paused))
        .collect();
    assert!(
        !theirs.is_empty(),
        "{paused}'s key never seen expired: {expired:?}"
    );
    let time = |e: &Value| e["time"].as_u64().unwrap();
    for e in theirs {
        assert!(time(e) > time(pause), "expired before the pause: {e}");
        let last_lease = sets
            .iter()
            .chain(&renewed)
            .filter(|s| s["token"] == e["token"])
            .map(time)
            .max()
            .expect("its key was seen set");
        // The observer stamps each event after the node acted, within a
        // few ms on an idle host: 50 ms of slack for a busy one.
        assert!(
            time(e) + 50_000_000 >= last_lease + 900_000_000,
            "expired {} ms after its last lease began: {e}",
            (time(e) - last_lease) / 1_000_000
        );
    }
    assert_overlaps_labelled(&results, LEASE_EXPIRED);
}

/// `unsafe-del` releases with a plain `DEL`. The material's Demo 4: work
/// (2.5 s) longer than the lease (2 s), no fault. The slow holder's key
/// expires under it, the next worker takes the lock, and the slow one's
/// `DEL` then deletes the next holder's key, seen with who sent it. (A pause
/// makes the same story, but its stale `DEL` may land while no one holds
/// the key, and then deletes nothing: CI saw that once.)
#[test]
fn a_plain_del_is_seen_deleting_another_workers_key() {
    let tmp = common::tmp();
    let slow = ["--work-ms", "2500", "--no-validity-check"];
    let (_, results, dir) = run_short(tmp.path(), "unsafe-del", "none", "8", "1", &slow);
    let owner = owners(&dir, 5);
    let deleted = observed(&dir, "key-deleted");
    assert!(!deleted.is_empty(), "no key-deleted recorded");
    let foreign: Vec<&Value> = deleted
        .iter()
        .filter(|e| owner_of(e, &owner) != Some(str_of(&e["value"], "by")))
        .collect();
    assert!(
        !foreign.is_empty(),
        "every delete was its owner's: {deleted:?}"
    );
    // Each foreign delete names a worker that held the lock before: the
    // slow holder whose own key had expired.
    for e in &foreign {
        let by = str_of(&e["value"], "by");
        assert!(owner.values().any(|w| w == by), "{by} held no key: {e}");
    }
    assert!(results.anomalies["foreign-release"].count > 0);
    assert_overlaps_labelled(&results, LEASE_EXPIRED);
}

/// One worker alone, frozen after its lease check past its TTL: no one
/// else is granted the lock, so only the observer shows that its write went
/// out after its key had expired, a definite `unsafe-action`.
#[test]
fn a_write_after_the_holders_key_was_seen_expired_is_unsafe_with_no_rival() {
    let tmp = common::tmp();
    let extra = ["--workers", "1"];
    let (_, results, dir) = run_short(tmp.path(), "single", "pause", "8", "3", &extra);
    assert_eq!(results.anomalies["lock-overlap"].count, 0, "one worker");
    let unsafe_action = &results.anomalies["unsafe-action"];
    assert!(unsafe_action.count > 0, "{unsafe_action:?}");
    let history: Vec<Value> = std::fs::read_to_string(dir.join("history.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let at = |i: u64| history.iter().find(|e| e["index"] == i).unwrap();
    for example in &unsafe_action.examples {
        let [write, expired] = example[..] else {
            panic!("not [write ok, key-expired]: {example:?}");
        };
        let (write, expired) = (at(write), at(expired));
        assert_eq!(
            (&write["f"], &write["type"]),
            (&"write".into(), &"ok".into())
        );
        assert_eq!(expired["f"], "key-expired", "{expired}");
        assert!(expired["time"].as_u64() < write["time"].as_u64());
        // The key that expired was the writer's own.
        let held = history
            .iter()
            .filter(|e| e["f"] == "acquire" && e["type"] == "ok")
            .filter(|e| {
                e["process"] == write["process"] && e["time"].as_u64() < write["time"].as_u64()
            })
            .max_by_key(|e| e["time"].as_u64())
            .expect("the writer held the lock");
        assert_eq!(held["token"], expired["token"], "{held} {expired}");
    }
}
